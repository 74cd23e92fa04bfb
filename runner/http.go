package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// HTTPServer serves /metrics, /healthz and /readyz. It is a Start(ctx) component: it serves
// until ctx ends, then shuts down gracefully.
type HTTPServer struct {
	Addr    string       // listen address, e.g. ":8080"
	Metrics http.Handler // nil: /metrics answers 404
	// Ready reports why the process is not ready, or nil. nil Ready means always ready.
	Ready  func() error
	Logger *slog.Logger
	// Extra routes (e.g. the KEDA shim in `dev`), mounted as given.
	Extra map[string]http.Handler

	ln net.Listener
}

// Listen binds the address now so that a port conflict fails start-up instead of a goroutine,
// and so that ":0" can be used in tests (see BoundAddr).
func (s *HTTPServer) Listen() error {
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.Addr, err)
	}
	s.ln = ln
	return nil
}

// BoundAddr is the address actually bound after Listen.
func (s *HTTPServer) BoundAddr() string {
	if s.ln == nil {
		return s.Addr
	}
	return s.ln.Addr().String()
}

// Handler is the route table.
func (s *HTTPServer) Handler() http.Handler {
	mux := http.NewServeMux()
	if s.Metrics != nil {
		mux.Handle("GET /metrics", s.Metrics)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if s.Ready != nil {
			if err := s.Ready(); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ready")
	})
	for p, h := range s.Extra {
		mux.Handle(p, h)
	}
	return mux
}

// Start serves until ctx ends.
func (s *HTTPServer) Start(ctx context.Context) error {
	if s.ln == nil {
		if err := s.Listen(); err != nil {
			return err
		}
	}
	log := s.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(s.ln) }()
	log.Info("serving /metrics /healthz /readyz", "addr", s.ln.Addr().String())
	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http shutdown: %w", err)
	}
	return nil
}
