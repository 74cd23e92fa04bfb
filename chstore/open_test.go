package chstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
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

func assertNoSecret(t *testing.T, pw string, texts ...string) {
	t.Helper()
	for _, s := range texts {
		if strings.Contains(s, pw) {
			t.Errorf("secret %q leaked in: %s", pw, s)
		}
	}
}

func TestOpenRefusedRetriesThenClassifies(t *testing.T) {
	pw := secret("refused-*")
	addr := closedPort(t)
	for _, scheme := range []string{"clickhouse", "http"} {
		t.Run(scheme, func(t *testing.T) {
			log, buf := capture()
			start := time.Now()
			_, err := Open(context.Background(), Options{
				URL:            scheme + "://bob@" + addr + "/db",
				Password:       pw,
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
			if !strings.Contains(buf.String(), "retrying") || !strings.Contains(buf.String(), `"clickhouse_url":"`+scheme+"://bob@") {
				t.Errorf("retries not logged with the URL:\n%s", buf)
			}
			t.Logf("error: %v", err)
			assertNoSecret(t, pw, err.Error(), buf.String())
		})
	}
}

func TestOpenBadDNSName(t *testing.T) {
	if _, err := net.LookupHost("hunt-runner-test.invalid"); err == nil {
		t.Skip("this resolver answers for .invalid")
	}
	pw := secret("dns-*")
	log, buf := capture()
	_, err := Open(context.Background(), Options{
		URL:            "http://hunt-runner-test.invalid:8123",
		Password:       pw,
		ConnectTimeout: 600 * time.Millisecond,
	}, log)
	if !errors.Is(err, ErrDNS) {
		t.Fatalf("got %v, want ErrDNS", err)
	}
	if !strings.Contains(err.Error(), "check the host") {
		t.Errorf("no hint in %v", err)
	}
	t.Logf("error: %v", err)
	assertNoSecret(t, pw, err.Error(), buf.String())
}

// echoServer is not ClickHouse and does not pretend to be: it is an HTTP endpoint (a misbehaving
// proxy, say) that answers every request with an error page echoing the credentials it received.
// It tests only our own scrubbing of text that comes back from the wire; how ClickHouse itself
// refuses credentials is tested on a real server in TestOpenAuthFailureOnEngine.
func echoServer(t *testing.T, requests *atomic.Int32) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		user, pw, _ := r.BasicAuth()
		if k := r.Header.Get("X-ClickHouse-Key"); k != "" {
			user, pw = r.Header.Get("X-ClickHouse-User"), k
		}
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprintf(w, "proxy: upstream refused user %s with password %q (request %s)\n", user, pw, r.URL.String())
	}))
	t.Cleanup(srv.Close)
	return srv
}

// secret returns a password made at test time, with the characters a URL must escape around it.
func secret(shape string) string { return strings.Replace(shape, "*", rand.Text()[:12], 1) }

func TestOpenScrubsEchoedCredentials(t *testing.T) {
	inFile := secret("file-*/pw&x")
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte(inFile+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	inEnv := secret("env-* pw")
	cases := []struct {
		name   string
		secret string
		opts   func(base string) Options
	}{
		{"in file", inFile, func(base string) Options { return Options{URL: base, PasswordFile: pwFile} }},
		{"in env/Options", inEnv, func(base string) Options { return Options{URL: base, Password: inEnv} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var requests atomic.Int32
			srv := echoServer(t, &requests)
			o := tc.opts(srv.URL)
			o.ConnectTimeout = 600 * time.Millisecond // the unclassified failure is retried: log lines too
			log, buf := capture()
			_, err := Open(context.Background(), o, log)
			if err == nil {
				t.Fatal("Open succeeded against an endpoint that refuses everything")
			}
			if requests.Load() == 0 {
				t.Fatal("the endpoint was never reached")
			}
			t.Logf("error: %v", err)
			assertNoSecret(t, tc.secret, err.Error(), fmt.Sprintf("%+v", err), buf.String())
			// The echo did reach the error, masked: without this the test could pass because
			// the body was dropped, not scrubbed.
			if !strings.Contains(err.Error(), `with password \"`+redacted+`\"`) {
				t.Errorf("the echoed password should show as %s: %v", redacted, err)
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
