package chstore

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

func TestParseURL(t *testing.T) {
	tests := []struct {
		url      string
		protocol clickhouse.Protocol
		addr     string
		db, user string
		secure   bool
	}{
		{"clickhouse://localhost:9000", clickhouse.Native, "localhost:9000", "", "", false},
		{"clickhouse://ch", clickhouse.Native, "ch:9000", "", "", false},
		{"clickhouse://ch/sec?secure=true", clickhouse.Native, "ch:9440", "sec", "", true},
		{"clickhouse://u@ch:9001/db", clickhouse.Native, "ch:9001", "db", "u", false},
		{"http://ch:8123", clickhouse.HTTP, "ch:8123", "", "", false},
		{"http://ch", clickhouse.HTTP, "ch:8123", "", "", false},
		{"https://ch/hunts", clickhouse.HTTP, "ch:8443", "hunts", "", true},
		{"http://ch:8123/?username=bob&database=d2", clickhouse.HTTP, "ch:8123", "d2", "bob", false},
		{"clickhouse://a:9000,b:9000/x", clickhouse.Native, "a:9000,b:9000", "x", "", false},
		{"http://[::1]", clickhouse.HTTP, "[::1]:8123", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			ep, err := ParseURL(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			if ep.Protocol != tt.protocol || strings.Join(ep.Addr, ",") != tt.addr || ep.Database != tt.db ||
				ep.User != tt.user || ep.Secure != tt.secure {
				t.Errorf("got %v, want %v %s db=%q user=%q tls=%t",
					ep, tt.protocol, tt.addr, tt.db, tt.user, tt.secure)
			}
		})
	}
}

func TestParseURLErrors(t *testing.T) {
	const secret = "Sup3r-s3cret"
	for _, raw := range []string{
		"mysql://u:" + secret + "@h",
		"clickhouse://u:" + secret + "@",
		"https://u:" + secret + "@h?secure=false",
		"http://u:" + secret + "@h:port/x",
		"clickhouse://u:" + secret + "@h?secure=maybe",
		// Unescaped '#' or '?' in a numeric-looking password: parses, but wrongly.
		"clickhouse://u:12#" + secret + "@h",
		"clickhouse://u:12?" + secret + "@h",
	} {
		_, err := ParseURL(raw)
		if err == nil {
			t.Errorf("ParseURL(%q) succeeded", raw)
			continue
		}
		if !errors.Is(err, ErrConfig) {
			t.Errorf("ParseURL(%q): %v is not ErrConfig", raw, err)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("ParseURL error leaks the password: %v", err)
		}
	}
}

func TestRedact(t *testing.T) {
	tests := []struct{ in, want string }{
		{"clickhouse://localhost:9000", "clickhouse://localhost:9000"},
		{"clickhouse://bob@h:9000/db", "clickhouse://bob@h:9000/db"},
		{"clickhouse://bob:hunter2@h:9000/db", "clickhouse://bob:xxxxx@h:9000/db"},
		{"https://bob:p%2Fw%40d@h/db?secure=true", "https://bob:xxxxx@h/db?secure=true"},
		{"http://h:8123/?user=a&password=hunter2&x=1", "http://h:8123/?user=a&password=xxxxx&x=1"},
		{"http://h:8123/?PASSWORD=hunter2", "http://h:8123/?PASSWORD=xxxxx"},
		// Unparseable: masked on the raw text.
		{"http://bob:hun:ter/2@h:bad/db", "http://bob:xxxxx@h:bad/db"},
		{"http://h:bad/?password=hunter2", "http://h:bad/?xxxxx"},
		{"clickhouse://u:12#hunter2@h", "clickhouse://u:xxxxx@h"},
		{"clickhouse://u:12?hunter2@h/db", "clickhouse://u:xxxxx@h/db"},
	}
	for _, tt := range tests {
		if got := Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestWithDefaults(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := Options{URL: "clickhouse://u@h/urldb", PasswordFile: pwFile}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.Password != "from-file" || o.User != "u" || o.Database != "urldb" || o.ConnectTimeout != DefaultConnectTimeout {
		t.Errorf("got %+v password=%q", o, o.Password)
	}
	o, err = Options{}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.URL != DefaultURL || o.Database != DefaultDatabase || o.User != DefaultUser || o.Password != "" {
		t.Errorf("zero options: %+v", o)
	}
	o, err = Options{URL: "http://u@h/urldb", Database: "explicit", User: "v", Password: "env"}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.Password != "env" || o.User != "v" || o.Database != "explicit" {
		t.Errorf("explicit values must win: %+v password=%q", o, o.Password)
	}
	for name, bad := range map[string]Options{
		"both passwords":    {Password: "a", PasswordFile: pwFile},
		"missing file":      {PasswordFile: filepath.Join(dir, "nope")},
		"CA on plain URL":   {URL: "http://h", TLSCAFile: pwFile},
		"skip on plain URL": {URL: "clickhouse://h", TLSSkipVerify: true},
	} {
		if _, err := bad.WithDefaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: got %v, want ErrConfig", name, err)
		}
	}
}

func TestClickHouseOptions(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, selfSignedPEM(t), 0o600); err != nil {
		t.Fatal(err)
	}
	ch, err := Options{URL: "https://u@h/urldb?max_execution_time=60&compress=lz4", Password: "pw", TLSCAFile: ca, DialTimeout: time.Second}.ClickHouseOptions()
	if err != nil {
		t.Fatal(err)
	}
	if ch.Protocol != clickhouse.HTTP || ch.Addr[0] != "h:8443" || ch.Auth != (clickhouse.Auth{Username: "u", Password: "pw", Database: "urldb"}) {
		t.Errorf("got protocol %v addr %v auth user=%q db=%q", ch.Protocol, ch.Addr, ch.Auth.Username, ch.Auth.Database)
	}
	if ch.TLS == nil || ch.TLS.RootCAs == nil || ch.TLS.InsecureSkipVerify {
		t.Errorf("TLS not configured from the CA file: %+v", ch.TLS)
	}
	if ch.Settings["max_execution_time"] != 60 || ch.Compression == nil || ch.Compression.Method != clickhouse.CompressionLZ4 {
		t.Errorf("URL parameters lost: settings %v compression %v", ch.Settings, ch.Compression)
	}
	if ch.DialContext == nil || ch.DialTimeout < 30*time.Second {
		t.Errorf("want a context-aware dialer and the driver's 30s pool wait, got %v", ch.DialTimeout)
	}
	ch, err = Options{URL: "clickhouse://h/hunt_runner", AllowMissingDatabase: true}.ClickHouseOptions()
	if err != nil {
		t.Fatal(err)
	}
	if ch.Protocol != clickhouse.Native || ch.Auth.Database != "" || ch.TLS != nil {
		t.Errorf("AllowMissingDatabase must drop the default database: %+v", ch.Auth)
	}
	notPEM := filepath.Join(t.TempDir(), "x")
	_ = os.WriteFile(notPEM, []byte("nope"), 0o600)
	if _, err := (Options{URL: "https://h", TLSCAFile: notPEM}).ClickHouseOptions(); !errors.Is(err, ErrConfig) {
		t.Errorf("bad CA file: %v", err)
	}
}

func TestOptionsNeverPrintPassword(t *testing.T) {
	o := Options{URL: "clickhouse://u:in-url-secret@h", Password: "env-secret"}
	for _, s := range []string{fmt.Sprint(o), fmt.Sprintf("%+v", o), fmt.Sprintf("%#v", o), o.LogValue().String()} {
		if strings.Contains(s, "in-url-secret") || strings.Contains(s, "env-secret") {
			t.Errorf("password printed: %s", s)
		}
	}
}

// TestPasswordInURLRefused: a password in a ClickHouse URL, in any form, is refused with a
// message naming the env var and the file flag, never quoting the password.
func TestPasswordInURLRefused(t *testing.T) {
	pw := secret("pw-*")
	for _, raw := range []string{
		"clickhouse://alice:" + pw + "@ch:9000/db",
		"clickhouse://alice:" + url.QueryEscape(pw) + "@ch",
		"http://ch:8123/?user=alice&password=" + pw,
		"http://ch:8123/?Password=" + pw,
		"http://ch:8123/?PASSWORD=" + pw + "&x=1",
		"http://ch:8123/?pass%77ord=" + pw,
		// The parse trap: the password reads as a port and a path, alice as the host.
		"clickhouse://alice:2024/Summer" + pw + "@ch:9000",
		"clickhouse://alice:12#" + pw + "@ch",
		"clickhouse://alice:12?" + pw + "@ch",
		"https://alice:" + pw + "@ch,ch2/db?secure=true",
	} {
		_, err := ParseURL(raw)
		if !errors.Is(err, ErrPasswordInURL) || !errors.Is(err, ErrConfig) {
			t.Errorf("ParseURL(%s): err = %v, want ErrPasswordInURL", strings.ReplaceAll(raw, pw, "PW"), err)
			continue
		}
		for _, s := range []string{err.Error(), Redact(raw)} {
			if strings.Contains(s, pw) || strings.Contains(s, "Summer") {
				t.Errorf("the password is echoed: %s", s)
			}
		}
		if !strings.Contains(err.Error(), "HUNT_RUNNER_CLICKHOUSE_PASSWORD") || !strings.Contains(err.Error(), "--clickhouse-password-file") {
			t.Errorf("the message does not say where the password goes: %v", err)
		}
		if _, err := (Options{URL: raw}).WithDefaults(); !errors.Is(err, ErrPasswordInURL) {
			t.Errorf("WithDefaults accepted a URL with a password: %v", err)
		}
	}
	for _, ok := range []string{"clickhouse://alice@ch:9000/db", "http://ch:8123/?user=alice&database=x", "http://ch/?passwordless=1"} {
		if _, err := ParseURL(ok); err != nil {
			t.Errorf("ParseURL(%s): %v", ok, err)
		}
	}
}

// selfSignedPEM makes a throwaway CA certificate for the TLS option tests.
func selfSignedPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hunt-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
