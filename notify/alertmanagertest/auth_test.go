package alertmanagertest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/notify"
)

// writePKI writes a throwaway CA, a server certificate for 127.0.0.1 and a client
// certificate into dir, and returns their paths.
func writePKI(t *testing.T, dir string) (ca, serverCert, serverKey, clientCert, clientKey string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(name string, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	issue := func(n int64, usage x509.ExtKeyUsage, name string) (string, string) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		c := &x509.Certificate{SerialNumber: big.NewInt(n), Subject: pkix.Name{CommonName: name}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, c, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, _ := x509.MarshalECPrivateKey(k)
		return write(name+".pem", "CERTIFICATE", der), write(name+".key", "EC PRIVATE KEY", kd)
	}
	ca = write("ca.pem", "CERTIFICATE", caDER)
	serverCert, serverKey = issue(2, x509.ExtKeyUsageServerAuth, "server")
	clientCert, clientKey = issue(3, x509.ExtKeyUsageClientAuth, "client")
	return
}

// A real Alertmanager behind TLS with client certificates and basic auth (its own
// --web.config.file) receives a sink's alerts through basic_auth and tls_config, parsed from
// a notify config as an operator writes it; the first of the sink's urls is down, the alert
// still arrives (fan-out), and Alertmanager notifies it.
func TestRealAlertmanagerTLSBasicAuthFanOut(t *testing.T) {
	dir := t.TempDir()
	ca, sc, sk, cc, ck := writePKI(t, dir)
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	pass := hex.EncodeToString(b)
	hash, err := bcrypt.GenerateFromPassword([]byte(pass), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	web := "tls_server_config:\n  cert_file: " + sc + "\n  key_file: " + sk + "\n  client_auth_type: RequireAndVerifyClientCert\n" +
		"  client_ca_file: " + ca + "\nbasic_auth_users:\n  hunt: '" + string(hash) + "'\n"
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(ca)
	pool.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair(cc, ck)
	if err != nil {
		t.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}
	ready := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.SetBasicAuth("hunt", pass)
		return tr.RoundTrip(r)
	})}

	var box inbox
	hook := httptest.NewServer(http.HandlerFunc(box.serve))
	defer hook.Close()
	am := startAlertmanagerWeb(t, hook.URL, 2*time.Second, web, ready)
	// Without credentials Alertmanager refuses: the test is not passing for lack of a guard.
	if resp, err := http.Post(am+"/api/v2/alerts", "application/json", nil); err == nil {
		resp.Body.Close()
		t.Fatalf("alertmanager answered %d without TLS client certificate", resp.StatusCode)
	}

	dead := "http://" + freeAddr(t)
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte(pass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := notify.ParseConfig("notify.yaml", []byte(`external_url: https://hunts.example.com
sinks:
  - name: am
    type: alertmanager
    urls: [`+dead+`, `+am+`]
    basic_auth: {username: hunt, password_file: `+pw+`}
    tls_config: {ca_file: `+ca+`, cert_file: `+cc+`, key_file: `+ck+`}
    lookback: 1h
routes:
  - sinks: [am]
`))
	if err != nil {
		t.Fatal(err)
	}
	db := chtest.NewWithSchema(t)
	hunts := hunt.NewSet([]hunt.Hunt{{Enabled: true, ID: "tls-hunt", Description: "d", Severity: "low"}}, "test", "")
	d, err := notify.New(db.Conn, func() *hunt.Set { return hunts }, notify.Options{Config: cfg, Database: db.Name,
		Owner: "t", Poll: 50 * time.Millisecond, Settle: 400 * time.Millisecond, Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = d.Start(ctx) }()
	defer func() { cancel(); <-done }()
	commit(t, db, "tls-hunt", time.Now().UTC().Truncate(time.Minute), `{"user":"x"}`)
	chtest.Eventually(t, 60*time.Second, "the alert notified through TLS and basic auth", func() bool {
		all := box.all()
		return len(all) == 1 && len(all[0].Alerts) == 1 && all[0].Alerts[0].Labels["alertname"] == "tls-hunt"
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
