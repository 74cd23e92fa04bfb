package shim

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store"
)

func TestBacklogFromTheView(t *testing.T) {
	db := chtest.New(t)
	coordination(t, db.Conn, db.Name, "a", "b", "c")
	// One hunt finished its current fire: 2 due.
	if err := db.Conn.Exec(context.Background(), "INSERT INTO `"+db.Name+"`.hunt_watermark (hunt_id, watermark, claim_id, updated) VALUES ('c', now() + 3600, generateUUIDv4(), now64(6))"); err != nil {
		t.Fatal(err)
	}
	want, err := store.New(db.Conn, db.Name).CountDue(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if want != 2 {
		t.Fatalf("store.CountDue = %d, want 2", want)
	}
	s := startShim(t, Options{Conn: db.Conn, Database: db.Name})
	r := s.get(t, "/keda/hunt-backlog")
	if r.Status != 200 || r.value(t) != float64(want) || r.held() {
		t.Fatalf("/keda/hunt-backlog = %d %s, want %d fresh", r.Status, r.Body, want)
	}
	if string(r.Body) != "{\"value\":2}\n" {
		t.Errorf("body %q, want exactly {\"value\":2}", r.Body)
	}
	if r := s.get(t, "/q/hunt-backlog-direct"); r.value(t) != float64(want) {
		t.Fatalf("/q/hunt-backlog-direct = %s, want %d", r.Body, want)
	}
	// clamp_max from an override.
	c := startShim(t, Options{Conn: db.Conn, Database: db.Name, Override: []byte("queries:\n  hunt-backlog:\n    clamp_max: 1\n")})
	if r := c.get(t, "/keda/hunt-backlog"); r.value(t) != 1 || r.held() {
		t.Fatalf("clamped backlog = %s, want 1", r.Body)
	}
}

func TestPressure(t *testing.T) {
	db := chtest.New(t)
	coordination(t, db.Conn, db.Name)
	otelTable(t, db.Conn, db.Name)
	// checkout: pod a averages 50 (40, 60), pod b 80, a bare scaling_pressure 30 → max 80.
	gauge(t, db.Conn, db.Name, "checkout", "shop_scaling_pressure", "a", 40, 5)
	gauge(t, db.Conn, db.Name, "checkout", "shop_scaling_pressure", "a", 60, 10)
	gauge(t, db.Conn, db.Name, "checkout", "shop_scaling_pressure", "b", 80, 3)
	gauge(t, db.Conn, db.Name, "checkout", "scaling_pressure", "a", 30, 1)
	gauge(t, db.Conn, db.Name, "checkout", "shop_scaling_pressure", "c", 100, 120) // outside the window
	gauge(t, db.Conn, db.Name, "checkout", "scaling_pressure_total", "d", 99, 1)   // other name
	gauge(t, db.Conn, db.Name, "checkout", "shopscaling_pressure", "d", 99, 1)     // no underscore before
	gauge(t, db.Conn, db.Name, "payments", "scaling_pressure", "a", 95, 1)         // other service
	gauge(t, db.Conn, db.Name, "hot", "scaling_pressure", "a", 250, 1)             // clamps to 100
	gauge(t, db.Conn, db.Name, "sub.zero", "scaling_pressure", "a", -20, 1)        // clamps to 0
	s := startShim(t, Options{Conn: db.Conn, Database: db.Name, OtelDatabase: db.Name})
	for service, want := range map[string]float64{"checkout": 80, "payments": 95, "hot": 100, "sub.zero": 0, "nobody": 0} {
		if r := s.get(t, "/keda/pressure?service="+service); r.Status != 200 || r.value(t) != want || r.held() {
			t.Errorf("pressure %s = %d %s, want %v fresh", service, r.Status, r.Body, want)
		}
	}
}

func TestParametersAreValidatedBeforeClickHouse(t *testing.T) {
	db := chtest.New(t)
	coordination(t, db.Conn, db.Name)
	otelTable(t, db.Conn, db.Name)
	s := startShim(t, Options{Conn: db.Conn, Database: db.Name, OtelDatabase: db.Name})
	countable := os.Getenv(chtest.EnvURL) == ""
	before := int64(0)
	if countable {
		before = chtest.Queries(t, db.URL)
	}
	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/keda/pressure?service=x%27%20OR%20%271%27%3D%271", 400}, // x' OR '1'='1
		{"/keda/pressure?service=a%27b", 400},
		{"/keda/pressure?service=", 400},
		{"/keda/pressure", 400},
		{"/keda/pressure?service=a&service=b", 400},
		{"/keda/pressure?service=" + strings.Repeat("x", 129), 400},
		{"/q/pressure?service=a%20b", 400},
		{"/q/no-such-query", 404},
		{"/q/..%2Fetc", 404},
	} {
		r := s.get(t, tc.path)
		if r.Status != tc.status {
			t.Errorf("%s = %d %s, want %d", tc.path, r.Status, r.Body, tc.status)
		}
		if msg, _ := r.JSON["error"].(string); msg == "" {
			t.Errorf("%s: no JSON error in %s", tc.path, r.Body)
		}
	}
	if countable {
		if after := chtest.Queries(t, db.URL); after != before {
			t.Fatalf("ClickHouse saw %d queries for rejected requests", after-before)
		}
	}
	// A value made of allowed characters reaches ClickHouse as a bound parameter: the dotted,
	// colon-separated name is compared as a whole string, not parsed as SQL.
	gauge(t, db.Conn, db.Name, "ns:svc.v1-a_b", "scaling_pressure", "a", 42, 1)
	if r := s.get(t, "/keda/pressure?service=ns:svc.v1-a_b&ignored=x%27"); r.Status != 200 || r.value(t) != 42 {
		t.Fatalf("bound service = %d %s, want 42", r.Status, r.Body)
	}
	if countable {
		if after := chtest.Queries(t, db.URL); after != before+2 { // the INSERT and the shim's query
			t.Errorf("ClickHouse saw %d queries, want 2", after-before)
		}
	}
}

func TestOverrideAddsAndChangesQueries(t *testing.T) {
	db := chtest.New(t)
	coordination(t, db.Conn, db.Name, "a", "b", "c", "d")
	otelTable(t, db.Conn, db.Name)
	gauge(t, db.Conn, db.Name, "checkout", "scaling_pressure", "a", 70, 90) // 90 s ago: outside 60 s
	override := `
queries:
  pressure:
    binds: {window_seconds: 300}      # widen the built-in window; params and SQL stay
  hunt-backlog:
    builtin: due_count                # run the due SQL directly instead of the view
    clamp_max: 3
  hunts-named:
    database: $coordination
    params: [prefix]
    sql: SELECT count() FROM (SELECT hunt_id FROM __DB__.hunt_schedule FINAL WHERE startsWith(hunt_id, {prefix:String}))
    cold_hold: 1
`
	s := startShim(t, Options{Conn: db.Conn, Database: db.Name, OtelDatabase: db.Name, Override: []byte(override), OverrideSource: "queries.yaml"})
	if r := s.get(t, "/keda/pressure?service=checkout"); r.value(t) != 70 {
		t.Errorf("pressure with the widened window = %s, want 70", r.Body)
	}
	if r := s.get(t, "/keda/hunt-backlog"); r.value(t) != 3 {
		t.Errorf("backlog through due_count clamped at 3 = %s", r.Body)
	}
	publish(t, db.Conn, db.Name, "zz-1", "zz-2")
	if r := s.get(t, "/q/hunts-named?prefix=zz-"); r.Status != 200 || r.value(t) != 2 {
		t.Errorf("added query = %d %s, want 2", r.Status, r.Body)
	}
	// Without the override the built-in window misses the 90 s old point.
	plain := startShim(t, Options{Conn: db.Conn, Database: db.Name, OtelDatabase: db.Name})
	if r := plain.get(t, "/keda/pressure?service=checkout"); r.value(t) != 0 {
		t.Errorf("built-in pressure = %s, want 0", r.Body)
	}
	if r := plain.get(t, "/q/hunts-named?prefix=zz-"); r.Status != 404 {
		t.Errorf("query from another shim's override = %d", r.Status)
	}
}

func TestBearerToken(t *testing.T) {
	db := chtest.New(t)
	coordination(t, db.Conn, db.Name, "a")
	token := newToken()
	s := startShim(t, Options{Conn: db.Conn, Database: db.Name, Token: token})
	for i, h := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", token}, {"Authorization", "Bearer " + token + "-longer"}} {
		if r := s.get(t, "/keda/hunt-backlog", h...); r.Status != 401 {
			t.Errorf("wrong authorization #%d = %d, want 401", i, r.Status)
		}
	}
	if r := s.get(t, "/keda/hunt-backlog", "Authorization", "Bearer "+token); r.Status != 200 || r.value(t) != 1 {
		t.Errorf("right token = %d %s", r.Status, r.Body)
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		r := s.get(t, p)
		if r.Status != 200 {
			t.Errorf("%s without token = %d", p, r.Status)
		}
		if strings.Contains(string(r.Body), token) {
			t.Errorf("%s shows the token", p)
		}
	}
	if strings.Contains(s.logs.String(), token) {
		t.Error("token in the log")
	}
}

func TestOutageHoldsLastGoodAndRecovers(t *testing.T) {
	e := startEngine(t)
	coordination(t, e.conn, e.db, "a", "b", "c")
	const deadline = 2 * time.Second
	s := startShim(t, Options{Conn: e.conn, Database: e.db, Timeout: deadline, RetryBackoff: time.Nanosecond})
	if r := s.get(t, "/keda/hunt-backlog"); r.value(t) != 3 || r.held() {
		t.Fatalf("before the outage: %s", r.Body)
	}
	e.srv.Stop()
	for i := 0; i < 5; i++ {
		start := time.Now()
		r := s.get(t, "/keda/hunt-backlog")
		if r.Status != 200 || r.value(t) != 3 || !r.held() || r.JSON["reason"] != ReasonUnreachable {
			t.Fatalf("during the outage: %d %s, want 200 holding 3 (unreachable)", r.Status, r.Body)
		}
		if d := time.Since(start); d > deadline+300*time.Millisecond {
			t.Fatalf("held answer took %v, longer than the deadline", d)
		}
	}
	if n := s.logs.count("holding the last good value"); n != 1 {
		t.Fatalf("%d holding-started lines for 5 held answers, want 1:\n%s", n, s.logs)
	}
	m := s.get(t, "/metrics")
	for _, want := range []string{`hunt_shim_held_total{query="hunt-backlog",reason="unreachable"} 5`, `hunt_shim_held_age_seconds{cold="false",query="hunt-backlog"}`,
		`hunt_shim_query_up{query="hunt-backlog"} 0`} {
		if !strings.Contains(string(m.Body), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, m.Body)
		}
	}
	if r := s.get(t, "/readyz"); r.Status != 200 {
		t.Errorf("/readyz during the outage = %d, want 200 (readiness is not tied to ClickHouse)", r.Status)
	}

	e.srv.Start()
	publish(t, e.conn, e.db, "d")
	r := s.get(t, "/keda/hunt-backlog")
	if r.value(t) != 4 || r.held() {
		t.Fatalf("after recovery: %s, want a fresh 4", r.Body)
	}
	if n := s.logs.count("holding ended"); n != 1 {
		t.Fatalf("%d holding-ended lines, want 1:\n%s", n, s.logs)
	}
	m = s.get(t, "/metrics")
	if strings.Contains(string(m.Body), "hunt_shim_held_age_seconds{") {
		t.Error("the age gauge still reports a value that is no longer held")
	}
	if !strings.Contains(string(m.Body), `hunt_shim_query_up{query="hunt-backlog"} 1`) {
		t.Errorf("after recovery the backlog query is not up:\n%s", m.Body)
	}
}

func TestColdStartWithEngineDown(t *testing.T) {
	e := startEngine(t)
	coordination(t, e.conn, e.db, "a")
	e.srv.Stop()
	var clk clock
	s := startShim(t, Options{Conn: e.conn, Database: e.db, OtelDatabase: e.db, RetryBackoff: time.Nanosecond, Now: clk.Now,
		Override: []byte("queries:\n  floor:\n    sql: SELECT 1\n    cold_hold: 2\n")})
	if r := s.get(t, "/readyz"); r.Status != 200 {
		t.Fatalf("/readyz with the engine down = %d", r.Status)
	}
	for path, want := range map[string]float64{"/keda/hunt-backlog": 0, "/keda/pressure?service=x": 0, "/q/floor": 2} {
		r := s.get(t, path)
		if r.Status != 200 || r.value(t) != want || !r.held() || r.JSON["cold"] != true {
			t.Errorf("%s cold = %d %s, want 200 cold_hold %v", path, r.Status, r.Body, want)
		}
	}
	if n := s.logs.count("older than max_stale"); n != 0 {
		t.Errorf("%d max_stale lines before max_stale passed, want 0", n)
	}
	clk.Advance(DefaultMaxStale + time.Second)
	r := s.get(t, "/keda/hunt-backlog")
	if r.JSON["stale"] != true {
		t.Errorf("cold hold past max_stale not flagged: %s", r.Body)
	}
	if n := s.logs.count("older than max_stale"); n != 1 {
		t.Errorf("%d max_stale lines, want 1", n)
	}
	if !strings.Contains(string(s.get(t, "/metrics").Body), `hunt_shim_held_stale{query="hunt-backlog"} 1`) {
		t.Error("/metrics lacks the stale flag")
	}
}

func TestSlowQueryHeldWithinDeadline(t *testing.T) {
	db := chtest.New(t)
	coordination(t, db.Conn, db.Name)
	ctx := context.Background()
	if err := db.Conn.Exec(ctx, "CREATE TABLE `"+db.Name+"`.slow (x UInt8) ENGINE = Memory"); err != nil {
		t.Fatal(err)
	}
	const timeout = time.Second
	// Each row of slow costs 0.9 s: empty it answers at once (7), with rows it overruns.
	override := "queries:\n  slow:\n    database: $coordination\n    timeout: 1s\n" +
		"    sql: SELECT 7 + sum(sleepEachRow(0.9)) FROM __DB__.slow\n"
	s := startShim(t, Options{Conn: db.Conn, Database: db.Name, Override: []byte(override), RetryBackoff: time.Nanosecond})
	if r := s.get(t, "/q/slow"); r.value(t) != 7 || r.held() {
		t.Fatalf("fast: %s", r.Body)
	}
	if err := db.Conn.Exec(ctx, "INSERT INTO `"+db.Name+"`.slow VALUES (1), (2)"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := s.get(t, "/q/slow")
	took := time.Since(start)
	if r.Status != 200 || r.value(t) != 7 || !r.held() || r.JSON["reason"] != ReasonTimeout {
		t.Fatalf("slow: %d %s, want 200 holding 7 (timeout)", r.Status, r.Body)
	}
	if took > timeout+500*time.Millisecond { // generous for a loaded machine; TestDeadlineEndsAStalledQuery checks the exact deadline
		t.Fatalf("held answer after %v, deadline %v", took, timeout)
	}
	if err := db.Conn.Exec(ctx, "TRUNCATE TABLE `"+db.Name+"`.slow"); err != nil {
		t.Fatal(err)
	}
	if r := s.get(t, "/q/slow"); r.held() || r.value(t) != 7 {
		t.Fatalf("after the slow spell: %s", r.Body)
	}
	if s.logs.count("holding ended") != 1 {
		t.Fatalf("no holding-ended line:\n%s", s.logs)
	}
}

func TestBadResultHeld(t *testing.T) {
	db := chtest.New(t)
	override := `
queries:
  none: {sql: "SELECT 1 WHERE 0", cold_hold: 3}
  many: {sql: "SELECT number FROM numbers(2)"}
  null-value: {sql: "SELECT CAST(NULL AS Nullable(UInt8))"}
  nan: {sql: "SELECT nan"}
  text: {sql: "SELECT 'x'"}
  broken: {sql: "SELECT no_such_column"}
  dec: {sql: "SELECT toDecimal64(2.5, 2)"}
  big: {sql: "SELECT toUInt256(12)"}
  nullable-ok: {sql: "SELECT CAST(4 AS Nullable(Int32))"}
`
	s := startShim(t, Options{Conn: db.Conn, Database: db.Name, Override: []byte(override)})
	for path, want := range map[string]struct {
		value  float64
		reason string
	}{
		"/q/none": {3, ReasonBadResult}, "/q/many": {0, ReasonBadResult}, "/q/null-value": {0, ReasonBadResult},
		"/q/nan": {0, ReasonBadResult}, "/q/text": {0, ReasonBadResult}, "/q/broken": {0, ReasonQueryError},
		"/q/dec": {2.5, ""}, "/q/big": {12, ""}, "/q/nullable-ok": {4, ""},
	} {
		r := s.get(t, path)
		reason, _ := r.JSON["reason"].(string)
		if r.Status != 200 || r.value(t) != want.value || reason != want.reason {
			t.Errorf("%s = %d %s, want %v (%q)", path, r.Status, r.Body, want.value, want.reason)
		}
	}
}

// The attack: while ClickHouse is down, 10,001 unauthenticated requests with distinct
// ?service= values. The held backlog stays what it was (not a cold 0 that would let KEDA scale
// the runners to zero mid-outage), and /metrics names no parameter value and stays small.
func TestParameterFloodDuringOutageKeepsTheBacklog(t *testing.T) {
	e := startEngine(t)
	coordination(t, e.conn, e.db, "a", "b", "c")
	s := startShim(t, Options{Conn: e.conn, Database: e.db, OtelDatabase: e.db, Timeout: time.Second})
	if r := s.get(t, "/keda/hunt-backlog"); r.value(t) != 3 || r.held() {
		t.Fatalf("before the outage: %s", r.Body)
	}
	e.srv.Stop()
	if r := s.get(t, "/keda/hunt-backlog"); r.value(t) != 3 || !r.held() {
		t.Fatalf("outage: %s, want 3 held", r.Body)
	}
	// One after another, as the attack ran: each value is held (its query failed) before the
	// next arrives, so none is an unsettled entry the cache would drop first.
	const flood = 10001
	for i := 1; i <= flood; i++ {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, fmt.Sprintf("/keda/pressure?service=flood-%d", i), nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("flood request %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	r := s.get(t, "/keda/hunt-backlog")
	if r.value(t) != 3 || !r.held() || r.JSON["cold"] == true {
		t.Fatalf("after %d distinct parameter requests: %s, want the held 3", flood, r.Body)
	}
	m := string(s.get(t, "/metrics").Body)
	if strings.Contains(m, "flood-") {
		t.Fatal("/metrics carries request parameter values")
	}
	series := 0
	for _, line := range strings.Split(m, "\n") {
		if strings.HasPrefix(line, "hunt_shim_") {
			series++
		}
	}
	if series > 100 || len(m) > 64<<10 {
		t.Fatalf("/metrics holds %d shim series in %d bytes after the flood, want it bounded by the catalogue", series, len(m))
	}
	t.Logf("/metrics after the flood: %d shim series, %d bytes", series, len(m))
}
