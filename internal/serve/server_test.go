package serve

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestServerProbesRoutesAndShutdown(t *testing.T) {
	var notReady atomic.Bool
	var stopping atomic.Int32
	tel, err := NewTelemetry(context.Background(), TelemetryOptions{Service: "test", Scope: "test"})
	if err != nil {
		t.Fatal(err)
	}
	app := http.NewServeMux()
	app.HandleFunc("GET /hello", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hi") })
	s := &Server{Addr: "127.0.0.1:0", Metrics: tel.MetricsHandler, Handler: app,
		Ready: func() error {
			if notReady.Load() {
				return errors.New("hunts not loaded")
			}
			return nil
		},
		Stopping: func() { stopping.Add(1) }}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	base := "http://" + s.BoundAddr()
	get := func(p string) (int, string) {
		resp, err := http.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for p, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 200, "/hello": 200, "/nope": 404} {
		if code, body := get(p); code != want {
			t.Errorf("GET %s = %d %s, want %d", p, code, body, want)
		}
	}
	notReady.Store(true)
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "hunts not loaded") {
		t.Errorf("unready /readyz = %d %q", code, body)
	}

	// A second server on the same address fails at Listen, not later in a goroutine.
	if err := (&Server{Addr: s.BoundAddr()}).Listen(); err == nil {
		t.Error("a second Listen on a bound address succeeded")
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Start after cancel = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("server did not stop")
	}
	if stopping.Load() != 1 {
		t.Errorf("Stopping called %d times, want once", stopping.Load())
	}
}

func TestTelemetryWithoutOTLPIgnoresTheEnvironment(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	tel, err := NewTelemetry(context.Background(), TelemetryOptions{Service: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if tel.OTLP {
		t.Error("OTLP on without TelemetryOptions.OTLP")
	}
	tel, err = NewTelemetry(context.Background(), TelemetryOptions{Service: "test", OTLP: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = tel.Shutdown(ctx)
	}()
	if !tel.OTLP {
		t.Error("OTLP off with the endpoint set")
	}
}
