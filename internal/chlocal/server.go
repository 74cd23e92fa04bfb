package chlocal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/column"

	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
)

// PinnedMajor is the ClickHouse major version this package is written
// against. The purego signatures are not a stable ABI, so Start refuses a
// library reporting another major version.
const PinnedMajor = 26

// ErrAlreadyStarted is returned by a second Start in the same process:
// chDB holds one engine per process.
var ErrAlreadyStarted = errors.New("chlocal: an engine was already started in this process (chDB allows one per process; run another chlocal process instead)")

// ErrVersion is returned by Start when the library is not the pinned major version.
var ErrVersion = errors.New("chlocal: unsupported chDB version")

// Options configures Start.
type Options struct {
	// LibPath is the path of libchdb.so. Required (callers usually pass
	// os.Getenv("CHDB_LIB_PATH")).
	LibPath string
	// Listen is the TCP address to serve on. Default "127.0.0.1:0".
	Listen string
	// DataPath is chDB's data directory. Default: a new temporary directory,
	// removed by Close. A given directory is kept, so data survives a restart.
	DataPath string
	// RewriteReplicated turns Replicated*MergeTree engines, Replicated
	// databases and ON CLUSTER clauses into their single-node forms.
	RewriteReplicated bool
	// Logger receives startup and per-error lines. Default: slog.Default().
	Logger *slog.Logger
	// Faults are the fault rules in effect from the start (see FaultRule);
	// PUT /chlocal/faults and SetFaults replace them at run time.
	Faults FaultSet
	// StatementLog is how many statements GET /chlocal/log keeps: 0 means
	// ctl.DefaultLogSize, a negative value turns the log off.
	StatementLog int
	// AllowRemote answers peers other than loopback and any Host header, for
	// a chlocal listening on a non-loopback address (compose, a cluster). By
	// default only loopback clients naming a loopback Host are answered, and
	// in both modes requests carrying a non-loopback Origin (web pages) are
	// refused.
	AllowRemote bool
}

// Server is a running chlocal HTTP server.
type Server struct {
	opts     Options
	log      *slog.Logger
	eng      *engine
	tempData bool
	ln       net.Listener
	http     *http.Server
	done     chan struct{}

	version  string // e.g. 26.5.1.1
	revision uint64
	timezone string
	sc       column.ServerContext

	session   chan struct{}     // a one-slot lock: serialises every use of eng and the session state below
	snapshot  map[string]string // settings changed at startup (server defaults)
	curDB     string            // database of the last USE; "" forces one
	applied   map[string]string // per-request settings currently in effect
	queries   atomic.Int64
	faults    atomic.Pointer[ctl.Injector] // nil: no faults
	stmts     *ctl.StatementLog            // nil: no log
	closing   chan struct{}                // closed by Close: injected holds end early
	relMu     sync.Mutex
	release   chan struct{} // closed (and replaced) by ClearFaults: injected holds end early
	closeOnce sync.Once
	closeErr  error
}

var started atomic.Bool

// Start loads chDB, prepares a server-like session and serves ClickHouse's
// HTTP interface until Close. It fails with ErrNoLibrary when the library is
// missing, ErrVersion when it is not ClickHouse PinnedMajor.x,
// ErrAlreadyStarted when called twice in one process, and an error naming
// the rule when a fault rule is invalid.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{opts: opts, log: opts.Logger, done: make(chan struct{}), session: make(chan struct{}, 1),
		closing: make(chan struct{}), release: make(chan struct{})}
	switch {
	case opts.StatementLog == 0:
		s.stmts = ctl.NewStatementLog(ctl.DefaultLogSize)
	case opts.StatementLog > 0:
		s.stmts = ctl.NewStatementLog(opts.StatementLog)
	}
	// The library and the fault rules are checked before claiming the
	// process's one engine, so that either can be reported (and fixed)
	// without using it up.
	if err := checkLibrary(opts.LibPath); err != nil {
		return nil, err
	}
	if len(opts.Faults.Rules) > 0 {
		if err := s.SetFaults(opts.Faults); err != nil {
			return nil, err
		}
	}
	if !started.CompareAndSwap(false, true) {
		return nil, ErrAlreadyStarted
	}
	if err := s.start(ctx); err != nil {
		s.cleanup()
		return nil, err
	}
	return s, nil
}

func (s *Server) start(ctx context.Context) error {
	if s.opts.DataPath == "" {
		dir, err := os.MkdirTemp("", "chlocal-")
		if err != nil {
			return fmt.Errorf("chlocal: data dir: %w", err)
		}
		s.opts.DataPath, s.tempData = dir, true
	} else if err := os.MkdirAll(s.opts.DataPath, 0o755); err != nil {
		return fmt.Errorf("chlocal: data dir: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	eng, err := openEngine(s.opts.LibPath, s.opts.DataPath)
	if err != nil {
		return err
	}
	s.eng = eng
	if err := s.identify(); err != nil {
		return err
	}
	if err := s.prepareSession(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.opts.Listen)
	if err != nil {
		return fmt.Errorf("chlocal: listen %s: %w", s.opts.Listen, err)
	}
	s.ln = ln
	s.http = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("chlocal: serve", slog.Any("err", err))
		}
	}()
	s.log.Debug("chlocal: listening", slog.String("addr", ln.Addr().String()),
		slog.String("version", s.version), slog.String("data", s.opts.DataPath))
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() && !s.opts.AllowRemote {
		s.log.Warn("chlocal: listening on a non-loopback address, but only loopback clients are answered; "+
			"set AllowRemote (-allow-remote) to serve other hosts", slog.String("addr", ln.Addr().String()))
	}
	return nil
}

// identify reads the engine's version and refuses an unpinned major version.
func (s *Server) identify() error {
	out, err := s.eng.query([]byte("SELECT version(), revision(), timezone()"), "TabSeparated", nil, nil)
	if err != nil {
		return fmt.Errorf("chlocal: query version: %w", err)
	}
	f := strings.Split(strings.TrimRight(string(out), "\n"), "\t")
	if len(f) != 3 {
		return fmt.Errorf("chlocal: unexpected version reply %q", out)
	}
	s.version, s.timezone = f[0], f[2]
	if s.revision, err = strconv.ParseUint(f[1], 10, 64); err != nil {
		return fmt.Errorf("chlocal: revision %q: %w", f[1], err)
	}
	v, err := checkVersion(s.version)
	if err != nil {
		return fmt.Errorf("%w (library %s)", err, s.opts.LibPath)
	}
	loc, err := time.LoadLocation(s.timezone)
	if err != nil {
		loc = time.UTC
	}
	s.sc = column.ServerContext{Revision: s.revision, VersionMajor: v[0], VersionMinor: v[1], VersionPatch: v[2], Timezone: loc}
	return nil
}

// checkVersion parses a ClickHouse version (26.5.1.1) and refuses any
// major version but PinnedMajor.
func checkVersion(version string) ([3]uint64, error) {
	var v [3]uint64
	parts := strings.Split(version, ".")
	if len(parts) < 3 {
		return v, fmt.Errorf("%w: cannot parse version %q", ErrVersion, version)
	}
	for i := range v {
		n, err := strconv.ParseUint(parts[i], 10, 64)
		if err != nil {
			return v, fmt.Errorf("%w: cannot parse version %q", ErrVersion, version)
		}
		v[i] = n
	}
	if v[0] != PinnedMajor {
		return v, fmt.Errorf("%w: the library is ClickHouse %s, chlocal is pinned to %d.x (the chDB C API is not a stable ABI; use @chdb/lib-linux-x64-gnu 26.5.3)", ErrVersion, version, PinnedMajor)
	}
	return v, nil
}

// serverDefaults are the settings in which chDB's defaults differ from
// clickhouse-server's in ways tests would notice (synchronous-looking
// mutations, lenient DateTime parsing, implicit SELECT).
var serverDefaults = []struct{ name, value string }{
	{"async_insert", "0"},
	{"mutations_sync", "0"},
	{"date_time_input_format", "basic"},
	{"implicit_select", "0"},
}

// prepareSession applies server defaults and snapshots the changed
// settings: per-request settings are restored to this snapshot, because
// SET x = DEFAULT restores chDB's compiled-in default instead.
func (s *Server) prepareSession() error {
	for _, d := range serverDefaults {
		if _, err := s.eng.query([]byte("SET "+d.name+" = "+quote(d.value)), "", nil, nil); err != nil {
			return fmt.Errorf("chlocal: set %s: %w", d.name, err)
		}
	}
	out, err := s.eng.query([]byte("SELECT name, value FROM system.settings WHERE changed"), "TabSeparatedRaw", nil, nil)
	if err != nil {
		return fmt.Errorf("chlocal: snapshot settings: %w", err)
	}
	s.snapshot = make(map[string]string)
	for line := range bytes.SplitSeq(bytes.TrimRight(out, "\n"), []byte("\n")) {
		name, value, ok := bytes.Cut(line, []byte("\t"))
		if ok {
			s.snapshot[string(name)] = string(value)
		}
	}
	return nil
}

// URL is the server's base URL, http://127.0.0.1:PORT.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// Addr is the listening address, 127.0.0.1:PORT.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Version is the ClickHouse version chDB reports, e.g. 26.5.1.1.
func (s *Server) Version() string { return s.version }

// Revision is the protocol revision chDB reports.
func (s *Server) Revision() uint64 { return s.revision }

// Queries is the number of SQL requests served so far.
func (s *Server) Queries() int64 { return s.queries.Load() }

// Close stops serving, closes the engine and removes a temporary data
// directory. The process cannot start another engine afterwards.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.closing)
		if s.http != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			if err := s.http.Shutdown(ctx); err != nil {
				s.closeErr = fmt.Errorf("chlocal: shutdown: %w", err)
			}
			<-s.done
		}
		s.cleanup()
	})
	return s.closeErr
}

// closeWait bounds how long Close waits for a running query: chDB cannot
// cancel one, and a stuck statement must not keep a test process alive.
const closeWait = 5 * time.Second

func (s *Server) cleanup() {
	timer := time.NewTimer(closeWait)
	defer timer.Stop()
	select {
	case s.session <- struct{}{}:
	case <-timer.C:
		// The running query still reads the data directory: it is kept, not removed
		// under the engine.
		s.closeErr = errors.Join(s.closeErr, fmt.Errorf("chlocal: a query was still running after %v; engine and data directory %s left in place", closeWait, s.opts.DataPath))
		return
	}
	defer func() { <-s.session }()
	if s.eng != nil {
		s.eng.close()
		s.eng = nil
	}
	s.removeTempData()
}

func (s *Server) removeTempData() {
	if s.tempData {
		if err := os.RemoveAll(s.opts.DataPath); err != nil {
			s.closeErr = errors.Join(s.closeErr, fmt.Errorf("chlocal: remove data dir: %w", err))
		}
		s.tempData = false
	}
}

// quote renders v as a ClickHouse string literal.
func quote(v string) string {
	var b strings.Builder
	b.Grow(len(v) + 2)
	b.WriteByte('\'')
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\'', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// quoteIdent renders name as a ClickHouse identifier.
func quoteIdent(name string) string {
	return "`" + strings.NewReplacer("\\", "\\\\", "`", "\\`").Replace(name) + "`"
}
