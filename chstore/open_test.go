package chstore

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// capture returns a logger writing JSON to a buffer, at debug level so nothing is filtered.
func capture() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), &buf
}

// closedPort returns a localhost port nobody listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func assertNoSecret(t *testing.T, secret string, texts ...string) {
	t.Helper()
	for _, s := range texts {
		if strings.Contains(s, secret) {
			t.Errorf("secret %q leaked in: %s", secret, s)
		}
	}
}

func TestOpenRefusedRetriesThenClassifies(t *testing.T) {
	const secret = "refused-S3cret-pw"
	addr := closedPort(t)
	for _, scheme := range []string{"clickhouse", "http"} {
		t.Run(scheme, func(t *testing.T) {
			log, buf := capture()
			start := time.Now()
			_, err := Open(context.Background(), Options{
				URL:            scheme + "://bob:" + secret + "@" + addr + "/db",
				ConnectTimeout: 1200 * time.Millisecond,
			}, log)
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("got %v, want ErrRefused", err)
			}
			var ce *ConnectError
			if !errors.As(err, &ce) || ce.Attempts < 2 {
				t.Errorf("want a retried ConnectError, got %#v", err)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("retry not bounded by ConnectTimeout: took %v", took)
			}
			if !strings.Contains(buf.String(), "retrying") || !strings.Contains(buf.String(), "bob:xxxxx@") {
				t.Errorf("retries not logged with the redacted URL:\n%s", buf)
			}
			t.Logf("error: %v", err)
			assertNoSecret(t, secret, err.Error(), buf.String())
		})
	}
}

func TestOpenBadDNSName(t *testing.T) {
	if _, err := net.LookupHost("hunt-runner-test.invalid"); err == nil {
		t.Skip("this resolver answers for .invalid")
	}
	const secret = "dns-S3cret-pw"
	log, buf := capture()
	_, err := Open(context.Background(), Options{
		URL:            "http://hunt-runner-test.invalid:8123",
		Password:       secret,
		ConnectTimeout: 600 * time.Millisecond,
	}, log)
	if !errors.Is(err, ErrDNS) {
		t.Fatalf("got %v, want ErrDNS", err)
	}
	if !strings.Contains(err.Error(), "check the host") {
		t.Errorf("no hint in %v", err)
	}
	t.Logf("error: %v", err)
	assertNoSecret(t, secret, err.Error(), buf.String())
}

// echoingServer stands in for the one server response chlocal cannot produce (it ignores
// credentials): ClickHouse's HTTP authentication failure, with the status, exception-code header
// and body format of a real server. To prove scrubbing it echoes the password it received, as a
// misbehaving proxy or a future server message might.
func echoingServer(t *testing.T, requests *atomic.Int32) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		user, pw, _ := r.BasicAuth()
		if k := r.Header.Get("X-ClickHouse-Key"); k != "" {
			user, pw = r.Header.Get("X-ClickHouse-User"), k
		}
		w.Header().Set("X-ClickHouse-Exception-Code", "516")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, "Code: 516. DB::Exception: %s: Authentication failed: password is incorrect (got %q, %s). (AUTHENTICATION_FAILED) (version 26.5.1.1)\n",
			user, pw, r.URL.String())
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestOpenAuthFailureNotRetriedAndScrubbed(t *testing.T) {
	dir := t.TempDir()
	const inFile = "file-S3cret/pw&x"
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte(inFile+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		secret string
		opts   func(base string) Options
	}{
		{"in URL", "url-S3cret:pw@x", func(base string) Options {
			return Options{URL: strings.Replace(base, "http://", "http://bob:"+"url-S3cret%3Apw%40x"+"@", 1)}
		}},
		{"in URL query", "query-S3cret", func(base string) Options {
			return Options{URL: base + "/?password=query-S3cret"}
		}},
		{"in file", inFile, func(base string) Options { return Options{URL: base, PasswordFile: pwFile} }},
		{"in env/Options", "env-S3cret pw", func(base string) Options { return Options{URL: base, Password: "env-S3cret pw"} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var requests atomic.Int32
			srv := echoingServer(t, &requests)
			o := tc.opts(srv.URL)
			o.ConnectTimeout = 5 * time.Second
			log, buf := capture()
			_, err := Open(context.Background(), o, log)
			if !errors.Is(err, ErrAuth) {
				t.Fatalf("got %v, want ErrAuth", err)
			}
			var ce *ConnectError
			if !errors.As(err, &ce) || ce.Code != 516 {
				t.Errorf("want code 516, got %#v", err)
			}
			if n := requests.Load(); n != 1 {
				t.Errorf("authentication failure retried: %d requests", n)
			}
			t.Logf("error: %v", err)
			assertNoSecret(t, tc.secret, err.Error(), fmt.Sprintf("%+v", err), buf.String())
			if !strings.Contains(err.Error(), "xxxxx") {
				t.Errorf("the echoed password should show as xxxxx: %v", err)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		err  error
		want error
	}{
		{&clickhouse.Exception{Code: 516, Message: "Authentication failed"}, ErrAuth},
		{&clickhouse.HTTPError{StatusCode: 403, Err: &clickhouse.Exception{Code: 194}}, ErrAuth},
		{fmt.Errorf("handshake: %w", &clickhouse.Exception{Code: 81, Message: "Database x does not exist"}), ErrUnknownDatabase},
		{&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "x", IsNotFound: true}}, ErrDNS},
		{&clickhouse.Exception{Code: 60}, nil},
		{errors.New("tls: first record does not look like a TLS handshake"), ErrTLS},
	}
	for _, tt := range tests {
		if got := classify(tt.err, "u").Kind; got != tt.want {
			t.Errorf("classify(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestOpenHonoursContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Open(ctx, Options{URL: "http://" + closedPort(t), ConnectTimeout: time.Minute}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the context's error", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("ignored the context for %v", took)
	}
}

// tlsAuthServer is echoingServer over TLS; its certificate is written to a CA file.
func tlsAuthServer(t *testing.T) (url, caFile string) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-ClickHouse-Exception-Code", "516")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintln(w, "Code: 516. DB::Exception: Authentication failed. (AUTHENTICATION_FAILED)")
	}))
	// Failed handshakes are the point of the test; keep them out of the output.
	srv.Config.ErrorLog = stdlog.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	block := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(caFile, block, 0o600); err != nil {
		t.Fatal(err)
	}
	return srv.URL, caFile
}

func TestOpenTLS(t *testing.T) {
	url, ca := tlsAuthServer(t)
	ctx := context.Background()
	// Reaching the server's authentication check proves the handshake verified.
	if _, err := Open(ctx, Options{URL: url, TLSCAFile: ca, ConnectTimeout: 2 * time.Second}, nil); !errors.Is(err, ErrAuth) {
		t.Errorf("with the CA file: got %v, want ErrAuth (TLS verified)", err)
	}
	if _, err := Open(ctx, Options{URL: url, ConnectTimeout: 2 * time.Second}, nil); !errors.Is(err, ErrTLS) {
		t.Errorf("without the CA file: got %v, want ErrTLS", err)
	}
	log, buf := capture()
	if _, err := Open(ctx, Options{URL: url, TLSSkipVerify: true, ConnectTimeout: 2 * time.Second}, log); !errors.Is(err, ErrAuth) {
		t.Errorf("skip-verify: got %v, want ErrAuth", err)
	}
	if !strings.Contains(buf.String(), `"level":"WARN"`) || !strings.Contains(buf.String(), "verification is disabled") {
		t.Errorf("skip-verify was not logged as a warning:\n%s", buf)
	}
	// A plain-text server on a TLS URL.
	plain := echoingServer(t, new(atomic.Int32))
	if _, err := Open(ctx, Options{URL: strings.Replace(plain.URL, "http://", "https://", 1), ConnectTimeout: 2 * time.Second}, nil); !errors.Is(err, ErrTLS) {
		t.Errorf("https to a plain server: got %v, want ErrTLS", err)
	}
}

// The native protocol over TLS goes through chstore's own dialer; it must verify the server.
func TestOpenNativeTLS(t *testing.T) {
	url, ca := tlsAuthServer(t)
	native := strings.Replace(url, "https://", "clickhouse://", 1) + "?secure=true"
	ctx := context.Background()
	_, err := Open(ctx, Options{URL: native, ConnectTimeout: time.Second}, nil)
	if !errors.Is(err, ErrTLS) {
		t.Errorf("untrusted certificate: got %v, want ErrTLS", err)
	}
	// With the CA the handshake passes and the failure comes later (an HTTP server cannot
	// speak the native protocol).
	_, err = Open(ctx, Options{URL: native, TLSCAFile: ca, ConnectTimeout: time.Second}, nil)
	if err == nil || errors.Is(err, ErrTLS) {
		t.Errorf("trusted certificate: got %v, want a non-TLS failure", err)
	}
}

// A server that accepts TCP and never answers must not hold Open past its ConnectTimeout, on
// either protocol (the native handshake is bounded by the probe client's short DialTimeout).
func TestOpenBlackholeBounded(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	for _, scheme := range []string{"http", "clickhouse"} {
		start := time.Now()
		_, err = Open(context.Background(), Options{URL: scheme + "://" + l.Addr().String(), ConnectTimeout: 1500 * time.Millisecond, DialTimeout: 500 * time.Millisecond}, nil)
		if !errors.Is(err, ErrTimeout) {
			t.Errorf("%s: got %v, want ErrTimeout", scheme, err)
		}
		if took := time.Since(start); took > 4*time.Second {
			t.Errorf("%s: took %v, ConnectTimeout was 1.5s", scheme, took)
		}
		t.Logf("%s after %v: %v", scheme, time.Since(start).Round(time.Millisecond), err)
	}
}
