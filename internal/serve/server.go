package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Server serves Handler on Addr with the probe routes in front of it. It is a Start(ctx)
// component: it serves until ctx ends, then shuts down gracefully.
type Server struct {
	Name    string       // in log lines and errors, e.g. "http server", "shim"
	Addr    string       // listen address, e.g. ":8080"
	Metrics http.Handler // nil: /metrics answers 404
	// Ready reports why the process is not ready, or nil. nil Ready means always ready.
	Ready func() error
	// Handler serves every other route; nil serves only the probes.
	Handler http.Handler
	Logger  *slog.Logger
	// Stopping is called once ctx ends, before the listener closes (e.g. to turn /readyz
	// unready for the requests still arriving).
	Stopping func()

	ln net.Listener
}

// Listen binds the address now so that a port conflict fails start-up instead of a goroutine,
// and so that ":0" can be used in tests (see BoundAddr).
func (s *Server) Listen() error {
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("%s: listen %s: %w", s.name(), s.Addr, err)
	}
	s.ln = ln
	return nil
}

// Use serves on an existing listener instead of binding Addr.
func (s *Server) Use(ln net.Listener) { s.ln = ln }

// BoundAddr is the address actually bound after Listen.
func (s *Server) BoundAddr() string {
	if s.ln == nil {
		return s.Addr
	}
	return s.ln.Addr().String()
}

func (s *Server) name() string {
	if s.Name == "" {
		return "http server"
	}
	return s.Name
}

// Routes is the whole route table: the probes, then Handler for everything else.
func (s *Server) Routes() http.Handler {
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
	if s.Handler != nil {
		mux.Handle("/", s.Handler)
	}
	return mux
}

// Start serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	if s.ln == nil {
		if err := s.Listen(); err != nil {
			return err
		}
	}
	log := s.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv := &http.Server{Handler: s.Routes(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 90 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(s.ln) }()
	log.Debug("serving", "server", s.name(), "addr", s.ln.Addr().String())
	select {
	case err := <-errc:
		return fmt.Errorf("%s: serve: %w", s.name(), err)
	case <-ctx.Done():
	}
	if s.Stopping != nil {
		s.Stopping()
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s: shutdown: %w", s.name(), err)
	}
	return nil
}
