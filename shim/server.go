package shim

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/hunt-runner/hunt-runner/internal/serve"
)

// Defaults of Options.
const (
	DefaultListen       = ":8081"
	DefaultTimeout      = 2 * time.Second
	DefaultMaxStale     = 5 * time.Minute
	DefaultRetryBackoff = time.Second
	DefaultMaxEntries   = 10000
	// DefaultMaxEntriesPerQuery bounds one parameterised query's cached values, so a flood of
	// made-up parameter values evicts only that query's own.
	DefaultMaxEntriesPerQuery = 1000
)

// Routes with a fixed query behind them.
const (
	BacklogQuery  = "hunt-backlog" // GET /keda/hunt-backlog
	PressureQuery = "pressure"     // GET /keda/pressure?service=NAME
)

// Options configure a Server. Zero values take the documented defaults.
type Options struct {
	// Conn runs the queries; required. It is never pinged at start: the shim must come up and
	// answer cold_hold while ClickHouse is down.
	Conn Querier
	// Database is $coordination in the catalogue (the --database flag); default "hunt_runner".
	Database string
	// OtelDatabase is $otel: where the OpenTelemetry exporter writes; default "otel".
	OtelDatabase string
	// Override is a catalogue deep-merged over the built-in one (the --queries file), and
	// OverrideSource names it in errors.
	Override       []byte
	OverrideSource string
	// Timeout is the per-query client deadline for queries that set none (default 2s). Keep it
	// below the KEDA trigger's timeout (3s by default) so the shim always answers first.
	Timeout time.Duration
	// MaxStale is max_stale for queries that set none (default 5m).
	MaxStale time.Duration
	// Listen is the address Start serves on (default ":8081").
	Listen string
	// Token, when set, is the bearer token /keda/* and /q/* require.
	Token string
	// RetryBackoff: after a failure, requests for the same value are answered held without
	// asking ClickHouse again for this long (default 1s), so a dead server costs nothing.
	RetryBackoff time.Duration
	// MaxEntries bounds the last-good cache (default 10000 (query, params) pairs), and
	// MaxEntriesPerQuery each parameterised query's share (default 1000). The value of a query
	// without parameters (the backlog) is never evicted and counts against neither.
	MaxEntries         int
	MaxEntriesPerQuery int
	// Logger receives the holding-started/ended lines; default discards.
	Logger *slog.Logger
	// Metrics records the shim's instruments; default: a private Prometheus registry served
	// on /metrics (see NewMetrics).
	Metrics *Metrics
	// Redact lists strings (passwords) scrubbed from logged errors.
	Redact []string
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Server is the KEDA metrics-api adapter.
type Server struct {
	opts       Options
	cat        *Catalogue
	conn       Querier
	log        *slog.Logger
	metrics    *Metrics
	cache      *cache
	flight     singleflight.Group
	fetch      fetchFunc
	noSettings atomic.Bool
	ready      atomic.Bool
	tokenSum   [32]byte
	http       *serve.Server
	handler    http.Handler
}

// New loads and validates the catalogue and builds the server. A catalogue error (wrapping
// ErrCatalogue) means the shim must not start.
func New(o Options) (*Server, error) {
	if o.Conn == nil {
		return nil, errors.New("shim: Options.Conn is required")
	}
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Timeout < 0 {
		return nil, fmt.Errorf("shim: timeout %v must be positive", o.Timeout)
	}
	if o.MaxStale == 0 {
		o.MaxStale = DefaultMaxStale
	}
	if o.RetryBackoff == 0 {
		o.RetryBackoff = DefaultRetryBackoff
	}
	if o.RetryBackoff < 0 {
		o.RetryBackoff = 0
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	if o.MaxEntriesPerQuery <= 0 {
		o.MaxEntriesPerQuery = DefaultMaxEntriesPerQuery
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.OverrideSource == "" {
		o.OverrideSource = "override catalogue"
	}
	if o.Token != "" && strings.TrimSpace(o.Token) != o.Token {
		return nil, errors.New("shim: token has surrounding white space")
	}
	cat, err := LoadCatalogue(o.Override, o.OverrideSource, CatalogueOptions{
		Database: o.Database, OtelDatabase: o.OtelDatabase, Timeout: o.Timeout, MaxStale: o.MaxStale,
	})
	if err != nil {
		return nil, err
	}
	for _, name := range []string{BacklogQuery, PressureQuery} {
		if _, ok := cat.Lookup(name); !ok {
			return nil, fmt.Errorf("%w: query %q is required", ErrCatalogue, name)
		}
	}
	s := &Server{
		opts:  o,
		cat:   cat,
		conn:  o.Conn,
		log:   o.Logger,
		cache: newCache(o.MaxEntries, o.MaxEntriesPerQuery),
	}
	s.fetch = s.runQuery
	if o.Token != "" {
		s.tokenSum = sha256.Sum256([]byte(o.Token))
	}
	if o.Metrics == nil {
		if o.Metrics, err = NewMetrics(nil); err != nil {
			return nil, err
		}
	}
	s.metrics = o.Metrics
	if err := s.metrics.observeHeld(s.cache, o.Now); err != nil {
		return nil, err
	}
	s.http = &serve.Server{Name: "shim", Addr: o.Listen, Metrics: s.metrics.Handler(), Handler: s.routes(),
		Ready: s.readiness, Logger: o.Logger, Stopping: func() { s.ready.Store(false) }}
	s.handler = s.http.Routes()
	s.ready.Store(true) // the catalogue is loaded; readiness never depends on ClickHouse
	return s, nil
}

// Catalogue returns the loaded catalogue.
func (s *Server) Catalogue() *Catalogue { return s.cat }

// Handler serves every route, for embedding (hunt-runner dev) and tests.
func (s *Server) Handler() http.Handler { return s.handler }

// Start serves on Options.Listen until ctx ends, then shuts down gracefully.
func (s *Server) Start(ctx context.Context) error {
	if err := s.http.Listen(); err != nil {
		return err
	}
	return s.Serve(ctx, nil)
}

// Serve is Start on an existing listener (nil: the one Start bound).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if ln != nil {
		s.http.Use(ln)
	}
	backlog, _ := s.cat.Lookup(BacklogQuery)
	source := backlog.Builtin
	if source == "" {
		source = "sql"
	}
	s.log.Info("KEDA shim listening", "addr", s.http.BoundAddr(), "queries", strings.Join(s.cat.Names(), ","),
		"backlog_source", source, "auth", s.opts.Token != "")
	return s.http.Start(ctx)
}

// readiness: the catalogue is loaded at New, so the shim is ready until it shuts down; it
// never depends on ClickHouse.
func (s *Server) readiness() error {
	if !s.ready.Load() {
		return errors.New("shutting down")
	}
	return nil
}

// routes are the shim's own routes; serve.Server puts the probes and /metrics in front.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /keda/hunt-backlog", s.auth(s.queryHandler(func(*http.Request) string { return BacklogQuery })))
	mux.Handle("GET /keda/pressure", s.auth(s.queryHandler(func(*http.Request) string { return PressureQuery })))
	mux.Handle("GET /q/{name}", s.auth(s.queryHandler(func(r *http.Request) string { return r.PathValue("name") })))
	return mux
}

// auth requires the bearer token when one is configured. Both sides are hashed first so the
// comparison takes the same time whatever the length of the guess.
func (s *Server) auth(next http.Handler) http.Handler {
	if s.opts.Token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
		if !ok || subtle.ConstantTimeCompare(sum[:], s.tokenSum[:]) != 1 {
			s.metrics.request(r.Context(), "", "unauthorized")
			w.Header().Set("WWW-Authenticate", `Bearer realm="hunt-runner-shim"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "missing or wrong bearer token"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) queryHandler(name func(*http.Request) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		qname := name(r)
		q, ok := s.cat.Lookup(qname)
		if !ok {
			s.metrics.request(r.Context(), "", "unknown_query")
			writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("unknown query %q", qname)})
			return
		}
		params, err := requestParams(q, r)
		if err != nil {
			s.metrics.request(r.Context(), q.Name, "bad_request")
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		a := s.serve(r.Context(), q, params)
		outcome := "fresh"
		if a.Held {
			outcome = "held"
			s.metrics.held(r.Context(), q.Name, a.Reason)
		}
		s.metrics.request(r.Context(), q.Name, outcome)
		writeJSON(w, http.StatusOK, a.body(s.opts.Now()))
	})
}

// requestParams takes exactly the declared parameters from the request; undeclared ones are
// ignored. A missing, repeated or ill-formed value is an error and ClickHouse is never asked.
func requestParams(q *Query, r *http.Request) (map[string]string, error) {
	values := r.URL.Query()
	params := make(map[string]string, len(q.Params))
	for _, p := range q.Params {
		vs, ok := values[p]
		switch {
		case !ok || len(vs) == 0:
			return nil, fmt.Errorf("missing parameter %q", p)
		case len(vs) > 1:
			return nil, fmt.Errorf("parameter %q given %d times", p, len(vs))
		case !paramValueRE.MatchString(vs[0]):
			return nil, fmt.Errorf("parameter %q must match %s", p, paramValueRE)
		}
		params[p] = vs[0]
	}
	return params, nil
}

// serve answers one request: a fresh value, or the held one when ClickHouse fails. Concurrent
// requests for the same value share one query; after a failure the held value is served
// without asking again for RetryBackoff.
func (s *Server) serve(ctx context.Context, q *Query, params map[string]string) answer {
	canon := canonicalParams(params)
	key := cacheKey(q, canon)
	now := s.opts.Now()
	e := s.cache.get(key, q, canon, now)
	s.cache.mu.Lock()
	if e.holding && now.Sub(e.failedAt) < s.opts.RetryBackoff {
		a := s.heldLocked(e, now)
		s.cache.mu.Unlock()
		return a
	}
	s.cache.mu.Unlock()

	res, _, _ := s.flight.Do(key, func() (any, error) {
		start := time.Now()
		v, err := s.fetch(ctx, q, params)
		s.metrics.queryDuration(ctx, q.Name, time.Since(start), err == nil)
		return s.settle(e, v, err), nil
	})
	return res.(answer)
}

// settle records the outcome of one query and logs the edges of holding.
func (s *Server) settle(e *entry, v float64, err error) answer {
	now := s.opts.Now()
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	if err == nil {
		v = e.query.Clamp(v)
		if e.holding {
			s.log.Log(context.Background(), s.cache.edgeLevel(e.query.Name+"/ended", now, slog.LevelInfo), "ClickHouse answers again; holding ended",
				"query", e.query.Name, "params", e.params, "reason", e.reason, "held_for", now.Sub(e.since).Round(time.Millisecond), "value", v)
		}
		e.holding, e.reason, e.staleLogged = false, "", false
		e.value, e.good, e.goodAt = v, true, now
		return answer{Value: v}
	}
	reason := classify(err)
	e.failedAt, e.reason = now, reason
	if !e.holding {
		e.holding, e.since = true, now
		attrs := []any{"query", e.query.Name, "params", e.params, "reason", reason, "err", s.scrub(err)}
		if e.good {
			attrs = append(attrs, "held_value", e.value, "value_age", now.Sub(e.goodAt).Round(time.Millisecond))
		} else {
			attrs = append(attrs, "cold_hold", e.query.ColdHold)
		}
		s.log.Log(context.Background(), s.cache.edgeLevel(e.query.Name+"/started", now, slog.LevelWarn),
			"ClickHouse query failed; holding the last good value, or cold_hold when there is none (no scaling change)", attrs...)
	}
	return s.heldLocked(e, now)
}

// heldLocked is the held answer, logging once when it goes past max_stale.
func (s *Server) heldLocked(e *entry, now time.Time) answer {
	a := e.heldAnswerLocked(now)
	if a.Stale && !e.staleLogged {
		e.staleLogged = true
		s.log.Log(context.Background(), s.cache.edgeLevel(e.query.Name+"/stale", now, slog.LevelWarn), "held value is older than max_stale; still holding it",
			"query", e.query.Name, "params", e.params, "reason", e.reason, "max_stale", e.query.MaxStale, "cold", a.Cold)
	}
	return a
}

func (s *Server) scrub(err error) string {
	msg := err.Error()
	for _, secret := range s.opts.Redact {
		if secret != "" {
			msg = strings.ReplaceAll(msg, secret, "[redacted]")
		}
	}
	return msg
}

// body is the JSON answer. KEDA reads only "value"; the rest is for people and alerts.
func (a answer) body(now time.Time) map[string]any {
	b := map[string]any{"value": json.Number(formatValue(a.Value))}
	if !a.Held {
		return b
	}
	b["held"], b["reason"], b["stale"] = true, a.Reason, a.Stale
	if a.Cold {
		b["cold"] = true
	} else {
		b["age_seconds"] = json.Number(strconv.FormatFloat(now.Sub(a.GoodAt).Seconds(), 'f', 3, 64))
	}
	return b
}

// formatValue prints integral values without a fraction ("23", not "23.0").
func formatValue(v float64) string {
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func writeJSON(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}
