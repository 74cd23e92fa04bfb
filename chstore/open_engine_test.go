package chstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"io"
	stdlog "log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/chstore"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
)

// tlsFront serves h over TLS and writes the server's certificate to a CA file.
func tlsFront(t *testing.T, h http.Handler) (serverURL, caFile string) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	// Failed handshakes are the point of some tests; keep them out of the output.
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

// TestOpenTLS puts the test engine behind a TLS-terminating proxy (as a load balancer in front
// of ClickHouse's HTTP port would be), so that a verified handshake ends in a real connection.
func TestOpenTLS(t *testing.T) {
	db := chtest.New(t)
	backend, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	front, ca := tlsFront(t, httputil.NewSingleHostReverseProxy(backend))
	ctx := context.Background()
	open := func(o chstore.Options) error {
		o.Database, o.ConnectTimeout = db.Name, 5*time.Second
		conn, err := chstore.Open(ctx, o, nil)
		if err == nil {
			conn.Close()
		}
		return err
	}
	if err := open(chstore.Options{URL: front, TLSCAFile: ca}); err != nil {
		t.Errorf("with the CA file: %v", err)
	}
	if err := open(chstore.Options{URL: front}); !errors.Is(err, chstore.ErrTLS) {
		t.Errorf("without the CA file: got %v, want ErrTLS", err)
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	o := chstore.Options{URL: front, TLSSkipVerify: true, Database: db.Name, ConnectTimeout: 5 * time.Second}
	if conn, err := chstore.Open(ctx, o, log); err != nil {
		t.Errorf("skip-verify: %v", err)
	} else {
		conn.Close()
	}
	if !strings.Contains(buf.String(), `"level":"WARN"`) || !strings.Contains(buf.String(), "verification is disabled") {
		t.Errorf("skip-verify was not logged as a warning:\n%s", buf.String())
	}
	// The engine's plain HTTP port on an https:// URL.
	if err := open(chstore.Options{URL: strings.Replace(db.URL, "http://", "https://", 1)}); !errors.Is(err, chstore.ErrTLS) {
		t.Errorf("https to a plain server: got %v, want ErrTLS", err)
	}
}

// The native protocol over TLS goes through chstore's own dialer; it must verify the server. No
// native server is at hand, so this checks the handshake only: the TLS endpoint speaks HTTP.
func TestOpenNativeTLS(t *testing.T) {
	front, ca := tlsFront(t, http.NotFoundHandler())
	native := strings.Replace(front, "https://", "clickhouse://", 1) + "?secure=true"
	ctx := context.Background()
	_, err := chstore.Open(ctx, chstore.Options{URL: native, ConnectTimeout: time.Second}, nil)
	if !errors.Is(err, chstore.ErrTLS) {
		t.Errorf("untrusted certificate: got %v, want ErrTLS", err)
	}
	_, err = chstore.Open(ctx, chstore.Options{URL: native, TLSCAFile: ca, ConnectTimeout: time.Second}, nil)
	if err == nil || errors.Is(err, chstore.ErrTLS) {
		t.Errorf("trusted certificate: got %v, want a non-TLS failure", err)
	}
}

// TestOpenAuthFailureOnEngine: a server that checks credentials refuses an unknown user with a
// wrong password; Open says so at once (no retry) and never prints the password. chlocal accepts
// any credentials, so there the test skips: run it with HUNT_RUNNER_TEST_CLICKHOUSE set to a
// real server (deploy/compose).
func TestOpenAuthFailureOnEngine(t *testing.T) {
	db := chtest.New(t)
	pw := "pw-" + rand.Text()
	user := "hunt_runner_no_such_user_" + strings.ToLower(rand.Text()[:8])
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	start := time.Now()
	conn, err := chstore.Open(context.Background(), chstore.Options{
		URL: db.URL, User: user, Password: pw, Database: db.Name, ConnectTimeout: 10 * time.Second,
	}, log)
	if err == nil {
		conn.Close()
		t.Skip("this engine does not check credentials (chlocal); set " + chtest.EnvURL + " to a real server to run this test")
	}
	if !errors.Is(err, chstore.ErrAuth) {
		t.Fatalf("got %v, want ErrAuth", err)
	}
	var ce *chstore.ConnectError
	if !errors.As(err, &ce) || ce.Attempts != 1 {
		t.Errorf("an authentication failure was retried: %#v", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v: an authentication failure must not wait out ConnectTimeout", took)
	}
	t.Logf("error: %v", err)
	for _, s := range []string{err.Error(), buf.String()} {
		if strings.Contains(s, pw) {
			t.Errorf("password leaked: %s", s)
		}
	}
}
