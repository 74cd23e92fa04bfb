package shim

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// logBuffer captures slog JSON lines for assertions on the holding log.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// count returns how many lines have msg containing substr.
func (l *logBuffer) count(substr string) int { return l.countAt("", substr) }

// countAt counts the lines at level (e.g. "WARN"; "" for any) whose message holds substr.
func (l *logBuffer) countAt(level, substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range strings.Split(l.buf.String(), "\n") {
		var rec struct{ Msg, Level string }
		if json.Unmarshal([]byte(line), &rec) == nil && strings.Contains(rec.Msg, substr) && (level == "" || rec.Level == level) {
			n++
		}
	}
	return n
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func slogJSON(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// newToken returns a bearer token made at test time (secrets never sit in fixtures).
func newToken() string { return "tok-" + rand.Text() }

// clock is a settable Options.Now, so that a test moves past max_stale without sleeping.
type clock struct{ offset atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

type testShim struct {
	*Server
	http *httptest.Server
	logs *logBuffer
}

// startShim builds a shim on conn and serves it on a loopback httptest server.
func startShim(t testing.TB, o Options) *testShim {
	t.Helper()
	logs := &logBuffer{}
	o.Logger = slogJSON(logs)
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return &testShim{Server: s, http: hs, logs: logs}
}

type reply struct {
	Status int
	Body   []byte
	JSON   map[string]any
}

func (r reply) value(t testing.TB) float64 {
	t.Helper()
	v, ok := r.JSON["value"].(float64)
	if !ok {
		t.Fatalf("no numeric value in %d %s", r.Status, r.Body)
	}
	return v
}

func (r reply) held() bool { b, _ := r.JSON["held"].(bool); return b }

func (s *testShim) get(t testing.TB, path string, header ...string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.http.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	r := reply{Status: resp.StatusCode, Body: body}
	_ = json.Unmarshal(body, &r.JSON)
	return r
}

// coordination creates the coordination tables and the backlog view in db, and publishes
// hunts: live ones are due (no watermark), so the backlog equals len(live).
func coordination(t testing.TB, conn driver.Conn, db string, live ...string) {
	t.Helper()
	ctx := context.Background()
	if _, err := schema.Apply(ctx, conn, db, schema.Topology("single"), ""); err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, store.BacklogViewSQL(db, "")); err != nil {
		t.Fatal(err)
	}
	publish(t, conn, db, live...)
}

func publish(t testing.TB, conn driver.Conn, db string, live ...string) {
	t.Helper()
	for _, id := range live {
		if err := conn.Exec(context.Background(), "INSERT INTO `"+db+"`.hunt_schedule (hunt_id, interval_seconds, phase_offset, enabled, config_hash, updated) VALUES (?, 60, 0, 1, 'h', now64(6))", id); err != nil {
			t.Fatal(err)
		}
	}
}

// otelTable creates the OpenTelemetry exporter's gauge table in db.
func otelTable(t testing.TB, conn driver.Conn, db string) {
	t.Helper()
	ddl, err := os.ReadFile("testdata/otel_metrics_gauge.sql")
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(context.Background(), strings.ReplaceAll(string(ddl), dbPlaceholder, "`"+db+"`")); err != nil {
		t.Fatal(err)
	}
}

// gauge inserts one gauge point ago seconds in the past.
func gauge(t testing.TB, conn driver.Conn, db, service, metric, pod string, value float64, ago int) {
	t.Helper()
	err := conn.Exec(context.Background(), "INSERT INTO `"+db+"`.otel_metrics_gauge (ServiceName, MetricName, ResourceAttributes, Attributes, TimeUnix, Value) "+
		"VALUES (?, ?, map('k8s.pod.name', ?), map('queue', 'q1'), now64(9) - toIntervalSecond(?), ?)", service, metric, pod, ago, value)
	if err != nil {
		t.Fatal(err)
	}
}

// engine is a private chlocal process with one database, for outage tests.
type engine struct {
	srv  *chtest.Server
	conn driver.Conn
	db   string
}

func startEngine(t testing.TB) *engine {
	t.Helper()
	srv := chtest.Start(t)
	opts, err := chtest.Options(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	const db = "shim_outage"
	if err := admin.Exec(context.Background(), "CREATE DATABASE IF NOT EXISTS "+db); err != nil {
		t.Fatal(err)
	}
	opts, _ = chtest.Options(srv.URL, db)
	opts.DialTimeout = time.Second
	conn, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &engine{srv: srv, conn: conn, db: db}
}
