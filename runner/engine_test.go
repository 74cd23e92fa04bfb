package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/internal/serve"
	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

// env is one fresh database with the coordination schema and an events table whose rows are
// one per second over the two hours before the server's now.
type env struct {
	t   testing.TB
	db  *chtest.DB
	ctx context.Context
	now int64          // server clock when the events were written
	srv *chtest.Server // private engine (newPrivateEnv only), for faults
}

func newEnv(t testing.TB) *env {
	t.Helper()
	return setupEnv(t, chtest.New(t))
}

// newPrivateEnv uses a private chlocal process, so that its query counter sees only this test.
func newPrivateEnv(t testing.TB) *env {
	t.Helper()
	srv := chtest.Start(t)
	e := setupEnv(t, srv.NewDB(t))
	e.srv = srv
	return e
}

func setupEnv(t testing.TB, db *chtest.DB) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	if _, err := schema.Apply(ctx, db.Conn, db.Name, schema.TopologySingle, ""); err != nil {
		t.Fatalf("apply schema: %v", err)
	}
	e := &env{t: t, db: db, ctx: ctx}
	e.exec("CREATE TABLE events (ts DateTime64(3, 'UTC'), host String, n UInt32) ENGINE = MergeTree ORDER BY ts")
	var now uint32
	e.scan(&now, "SELECT toUnixTimestamp(now())")
	e.now = int64(now)
	e.exec(fmt.Sprintf("INSERT INTO events SELECT toDateTime64(%d - number, 3, 'UTC'), concat('host-', toString(number %% 7)), number FROM numbers(7200)", e.now))
	return e
}

// mid is the phase offset that puts an interval-long schedule's latest fire half an interval
// before the pinned schedule instant (e.now), so a test's fires do not depend on the hour it
// runs at, also where it compares them with the server's clock.
func (e *env) mid(interval int64) int64 { return ((e.now-interval/2)%interval + interval) % interval }

func (e *env) exec(q string, args ...any) {
	e.t.Helper()
	if err := e.db.Conn.Exec(e.ctx, q, args...); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
}

func (e *env) scan(dst any, q string, args ...any) {
	e.t.Helper()
	if err := e.db.Conn.QueryRow(e.ctx, q, args...).Scan(dst); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
}

func (e *env) count(q string, args ...any) uint64 {
	e.t.Helper()
	var n uint64
	e.scan(&n, q, args...)
	return n
}

const eventsQuery = "SELECT host, n FROM events WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}"

// eventsIn counts the events a run over [start, end) with delay must find.
func (e *env) eventsIn(start, end int64, delay time.Duration) uint64 {
	d := delay.Milliseconds()
	return e.count(fmt.Sprintf("SELECT count() FROM events WHERE toUnixTimestamp64Milli(ts) >= %d AND toUnixTimestamp64Milli(ts) < %d",
		start*1000-d, end*1000-d))
}

type envRunner struct {
	*Runner
	coord *lease.Coordinator
}

func (e *env) runner(owner string, set *hunt.Set, mod func(*Options)) envRunner {
	e.t.Helper()
	// The schedule is pinned at the setup instant (e.now): the fires a test expects, and the
	// windows its runs read, are the same however long a loaded machine takes to get there.
	opts := Options{Owner: owner, Database: e.db.Name, Tick: time.Second, Lease: 6 * time.Second, Concurrency: 4, Logger: testLogger(e.t),
		Settle: 400 * time.Millisecond, ScheduleClock: func(time.Time) time.Time { return time.Unix(e.now, 0) }}
	if mod != nil {
		mod(&opts)
	}
	coord, err := lease.New(store.New(e.db.Conn, e.db.Name).Leases(), lease.Options{Owner: owner, Lease: opts.Lease, Settle: opts.Settle})
	if err != nil {
		e.t.Fatal(err)
	}
	r, err := New(e.db.Conn, coord, store.New(e.db.Conn, e.db.Name), func() *hunt.Set { return set }, opts)
	if err != nil {
		e.t.Fatal(err)
	}
	r.runCtx = e.ctx
	return envRunner{Runner: r, coord: coord}
}

// tickAndWait runs one tick and waits for every run it started.
func (e *env) tickAndWait(r envRunner) {
	e.t.Helper()
	if err := r.tick(e.ctx); err != nil {
		e.t.Fatalf("tick: %v", err)
	}
	r.exec.wg.Wait()
}

// latest is h's latest fire on the pinned schedule.
func (e *env) latest(h hunt.Hunt) int64 {
	return schedule.LatestFire(e.now, h.IntervalSeconds(), h.OffsetSeconds())
}

func (e *env) watermarkOf(id string) (int64, bool) {
	e.t.Helper()
	rows, err := e.db.Conn.Query(e.ctx, "SELECT toUnixTimestamp(watermark) FROM hunt_watermark WHERE hunt_id = ? ORDER BY watermark DESC, updated DESC LIMIT 1", id)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	if !rows.Next() {
		return 0, false
	}
	var w uint32
	if err := rows.Scan(&w); err != nil {
		e.t.Fatal(err)
	}
	return int64(w), true
}

// setWatermark writes a watermark row directly, as a test fixture (the runner never does this).
func (e *env) setWatermark(id string, wm int64) {
	e.exec("INSERT INTO hunt_watermark (hunt_id, watermark, claim_id, updated) SELECT ?, toDateTime(?, 'UTC'), generateUUIDv4(), now64(6)", id, wm)
}

type runRow struct {
	Fire, Start, End int64
	Status           hunt.RunStatus
	Error            string
	Rows             uint64
}

func (e *env) runs(id string) []runRow {
	e.t.Helper()
	rows, err := e.db.Conn.Query(e.ctx, "SELECT toUnixTimestamp(fire), toUnixTimestamp(window_start), toUnixTimestamp(window_end), "+
		"status, error, rows_written FROM hunt_runs WHERE hunt_id = ? ORDER BY finished, status", id)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []runRow
	for rows.Next() {
		var f, s, en uint32
		var r runRow
		var status string // the driver scans into plain strings only
		if err := rows.Scan(&f, &s, &en, &status, &r.Error, &r.Rows); err != nil {
			e.t.Fatal(err)
		}
		r.Fire, r.Start, r.End, r.Status = int64(f), int64(s), int64(en), hunt.RunStatus(status)
		out = append(out, r)
	}
	return out
}

func TestRunnerRunsCommitsAndBacksOff(t *testing.T) {
	e := newEnv(t)
	good := hunt.Hunt{ID: "logins", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery, Severity: "high",
		Labels: map[string]string{"team": "secops"}, Delay: 2 * time.Minute, MaxFindings: hunt.MaxFindingsCeiling}
	broken := hunt.Hunt{ID: "broken", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)),
		Query: "SELECT throwIf(number = 0, 'boom') AS x FROM numbers(1) WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}"}
	hs := testSet("set-1", broken, good)
	tel, err := serve.NewTelemetry(e.ctx, serve.TelemetryOptions{Service: "test"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(tel.Meter, 400*time.Millisecond, WithPerHunt(10)) // the loaded set's hunts are itemised by the tick
	if err != nil {
		t.Fatal(err)
	}
	var reports []RunReport
	var mu sync.Mutex
	frozen := time.Now()
	r := e.runner("pod-a", hs, func(o *Options) {
		o.Clock = func() time.Time { return frozen }
		// A first failure backs off one tick, as retry_after on the server's clock: a minute
		// outlasts the test, so the broken hunt stays in backoff whatever the machine's load.
		o.Tick = time.Minute
		o.Metrics = m
		o.OnRun = func(rep RunReport) { mu.Lock(); reports = append(reports, rep); mu.Unlock() }
	})
	if err := r.Ready(); err == nil {
		t.Fatal("ready before the first snapshot")
	}
	e.tickAndWait(r)
	if err := r.Ready(); err != nil {
		t.Fatalf("not ready after a tick: %v", err)
	}

	fire := e.latest(good)
	if wm, ok := e.watermarkOf("logins"); !ok || wm != fire {
		t.Fatalf("logins watermark %d (%v), want the latest fire %d", wm, ok, fire)
	}
	want := e.eventsIn(fire-3600, fire, good.Delay)
	if want == 0 {
		t.Fatal("fixture: no events in the window")
	}
	if got := e.count("SELECT count() FROM hunt_findings_committed WHERE hunt_id = 'logins'"); got != want {
		t.Fatalf("findings %d, want %d", got, want)
	}
	var finding, sev string
	var labels map[string]string
	if err := e.db.Conn.QueryRow(e.ctx, "SELECT finding, severity, labels FROM hunt_findings WHERE hunt_id = 'logins' LIMIT 1").Scan(&finding, &sev, &labels); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(finding), &doc); err != nil || doc["host"] == nil || doc["n"] == nil {
		t.Fatalf("finding %q is not the JSON of the row: %v", finding, err)
	}
	if sev != "high" || labels["team"] != "secops" {
		t.Fatalf("severity %q labels %v", sev, labels)
	}
	runs := e.runs("logins")
	if len(runs) != 1 || runs[0].Status != hunt.RunSucceeded || runs[0].Rows != want || runs[0].Start != fire-3600 || runs[0].End != fire {
		t.Fatalf("logins runs %+v, want one succeeded over [%d, %d) with %d rows", runs, fire-3600, fire, want)
	}

	// The broken hunt: no watermark, its error in hunt_state and hunt_run, lease released.
	if _, ok := e.watermarkOf("broken"); ok {
		t.Fatal("a failed run advanced the watermark")
	}
	br := e.runs("broken")
	if len(br) != 1 || br[0].Status != hunt.RunFailed || !strings.Contains(br[0].Error, "boom") {
		t.Fatalf("broken runs %+v", br)
	}
	snap, err := store.New(e.db.Conn, e.db.Name).Snapshot(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := snap.Hunts["broken"]
	if st.Status != hunt.RunFailed || st.ConsecutiveFailures != 1 || !strings.Contains(st.LastError, "boom") {
		t.Fatalf("broken state %+v", st)
	}
	if st.HasLease && st.LeaseUntil.After(snap.Now) {
		t.Fatalf("failed run kept a live lease until %v (now %v)", st.LeaseUntil, snap.Now)
	}

	// The next tick: the broken hunt is backing off, the good one is done.
	e.tickAndWait(r)
	if n := len(e.runs("broken")); n != 1 {
		t.Fatalf("a backing-off hunt ran again: %d runs", n)
	}
	if n := len(e.runs("logins")); n != 1 {
		t.Fatalf("a finished fire ran again: %d runs", n)
	}

	// An older watermark row landing late (a lagging replica, a stale write) moves nothing back.
	e.setWatermark("logins", fire-3600)
	e.tickAndWait(r)
	if wm, _ := e.watermarkOf("logins"); wm != fire {
		t.Fatalf("watermark %d after a late older row, want %d; runs %+v", wm, fire, e.runs("logins"))
	}
	mu.Lock()
	if len(reports) != 2 {
		t.Fatalf("OnRun saw %d runs, want 2: %+v", len(reports), reports)
	}
	mu.Unlock()
	body := scrape(t, tel)
	for _, want := range []string{
		`hunt_runner_runs_total{hunt_id="logins",kind="scheduled",outcome="succeeded"} 1`,
		`hunt_runner_runs_total{hunt_id="broken",kind="scheduled",outcome="failed"} 1`,
		`hunt_runner_run_duration_seconds_count{kind="scheduled",outcome="succeeded"} 1`,
		`hunt_runner_metrics_hunts_omitted 0`,
		`hunt_runner_claims_total{outcome="won"} 2`,
		`hunt_runner_loaded_set_info{hash="set-1"} 1`,
		`hunt_runner_behind_seconds{hunt_id="logins"} 0`,
		`hunt_runner_settle_seconds 0.4`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if t.Failed() {
		t.Log(body)
	}
}

func scrape(t *testing.T, tel *serve.Telemetry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	tel.MetricsHandler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func TestRunnerGapAfterLongOutage(t *testing.T) {
	e := newEnv(t)
	h := hunt.Hunt{ID: "gappy", Interval: 60 * time.Second, Offset: 7 * time.Second, Query: eventsQuery, MaxCatchup: 5 * time.Minute, MaxFindings: hunt.MaxFindingsCeiling}
	fire := e.latest(h)
	e.setWatermark("gappy", fire-3600)
	r := e.runner("pod-a", testSet("x", h), nil)
	// The first claim may be lost on a loaded machine (acknowledged past the settle): wait for
	// a later tick's claim to commit rather than assume the first wins.
	e.tickUntil(r, "the run after the outage to commit", func() bool {
		wm, _ := e.watermarkOf("gappy")
		return wm > fire-3600
	})
	fire2 := e.latest(h)
	runs := e.runs("gappy")
	if len(runs) != 2 {
		t.Fatalf("runs %+v, want a gap and a success", runs)
	}
	var gap, ok runRow
	for _, rr := range runs {
		switch rr.Status {
		case hunt.RunGap:
			gap = rr
		case hunt.RunSucceeded:
			ok = rr
		}
	}
	// The fire may have moved on by one interval between the reads; both rows use the fire run.
	f := ok.Fire
	if f != fire && f != fire2 {
		t.Fatalf("ran fire %d, want %d", f, fire)
	}
	if gap.Start != fire-3600 || gap.End != f-300 || ok.Start != f-300 || ok.End != f {
		t.Fatalf("gap [%d, %d) run [%d, %d); want gap [%d, %d) run [%d, %d)", gap.Start, gap.End, ok.Start, ok.End,
			fire-3600, f-300, f-300, f)
	}
	if got, want := e.count("SELECT count() FROM hunt_findings_committed WHERE hunt_id = 'gappy'"), e.eventsIn(f-300, f, 0); got != want {
		t.Fatalf("findings %d, want %d (only the newest max_catchup)", got, want)
	}
}

func TestRunnerRunNowRequest(t *testing.T) {
	e := newEnv(t)
	h := hunt.Hunt{ID: "asked", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery}
	fire := e.latest(h)
	e.setWatermark("asked", fire)
	wm := store.New(e.db.Conn, e.db.Name)
	var now uint32
	e.scan(&now, "SELECT toUnixTimestamp(now())")
	req := int64(now) - 1 // after the watermark: the latest fire is half an hour back
	if err := wm.Request(e.ctx, "asked", req, "test"); err != nil {
		t.Fatal(err)
	}
	r := e.runner("pod-a", testSet("x", h), nil)
	e.tickAndWait(r)
	runs := e.runs("asked")
	if len(runs) != 1 || runs[0].Status != hunt.RunSucceeded || runs[0].Start != fire || runs[0].End != req || runs[0].Fire != req {
		t.Fatalf("runs %+v, want one over [%d, %d)", runs, fire, req)
	}
	if wm, _ := e.watermarkOf("asked"); wm != req {
		t.Fatalf("watermark %d, want the requested fire %d", wm, req)
	}
	e.tickAndWait(r)
	if n := len(e.runs("asked")); n != 1 {
		t.Fatalf("a served request ran again (%d runs)", n)
	}
}

// A peer that takes the lease while the run is in flight: the run writes no watermark and
// records `lost`.
func TestRunnerLostLeaseCommitsNothing(t *testing.T) {
	e := newEnv(t)
	h := hunt.Hunt{ID: "slow", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)),
		Query: "SELECT sleepEachRow(0.5) AS s, number FROM numbers(4) WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}"}
	r := e.runner("pod-a", testSet("x", h), func(o *Options) { o.Lease = 3 * time.Second })
	release := holdRuns(t, r.Runner)
	if err := r.tick(e.ctx); err != nil {
		t.Fatal(err)
	}
	if len(r.exec.queue) != 1 {
		t.Fatalf("queued %d, want the one won fire", len(r.exec.queue))
	}
	fire := r.exec.queue[0].fire
	// A peer's newer claim on the same fire.
	e.exec("INSERT INTO hunt_lease SELECT 'slow', toDateTime(?, 'UTC'), 'thief', ?, now64(6) + 1, now64(3) + 60", fire, uuid.New())
	release()
	r.exec.wg.Wait()
	runs := e.runs("slow")
	if len(runs) != 1 || runs[0].Status != hunt.RunLost {
		t.Fatalf("runs %+v, want one lost", runs)
	}
	if _, ok := e.watermarkOf("slow"); ok {
		t.Fatal("a run that lost its lease wrote the watermark")
	}
}

// Two runners in one process over 200 due hunts: every fire is won, run and committed once.
func TestTwoRunnersEachFireOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	e := newEnv(t)
	var hunts []hunt.Hunt
	for i := range 200 {
		hunts = append(hunts, hunt.Hunt{ID: fmt.Sprintf("h%03d", i), Interval: 3600 * time.Second, Offset: sec((e.mid(3600) + int64(i)) % 3600), Query: eventsQuery})
	}
	hs := testSet("x", hunts...)
	ctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	for _, owner := range []string{"pod-a", "pod-b"} {
		r := e.runner(owner, hs, func(o *Options) { o.Tick = 200 * time.Millisecond; o.Concurrency = 8 })
		wg.Go(func() {
			if err := r.Start(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	// Liveness, not throughput: on a loaded machine 200 runs on one engine thread take minutes.
	deadline := time.Now().Add(6 * time.Minute)
	for e.count("SELECT uniqExact(hunt_id) FROM hunt_watermark") < 200 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if n := e.count("SELECT uniqExact(hunt_id) FROM hunt_watermark"); n != 200 {
		t.Fatalf("%d hunts committed, want 200", n)
	}
	if n := e.count("SELECT count() FROM (SELECT hunt_id, fire FROM hunt_runs WHERE status = 'succeeded' GROUP BY hunt_id, fire HAVING count() > 1)"); n != 0 {
		t.Fatalf("%d fires succeeded twice", n)
	}
	if n := e.count("SELECT count() FROM hunt_runs WHERE status = 'succeeded'"); n != 200 {
		rows, _ := e.db.Conn.Query(e.ctx, "SELECT status, error, count() FROM hunt_runs GROUP BY ALL")
		for rows.Next() {
			var st, er string
			var c uint64
			_ = rows.Scan(&st, &er, &c)
			t.Logf("%s %d %s", st, c, er)
		}
		t.Fatalf("%d succeeded runs, want 200", n)
	}
	owners := e.count("SELECT uniqExact(owner) FROM hunt_runs")
	t.Logf("runs split over %d owners", owners)
}

// The round trips of a tick do not depend on how many fires are due.
func TestTickRoundTripsFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	e := newPrivateEnv(t)
	one, fifty := tickStatements(t, e, 1), tickStatements(t, e, 50)
	if len(one) != len(fifty) {
		t.Fatalf("round trips per tick: %d with 1 due hunt, %d with 50\n1 due:\n%s\n50 due:\n%s",
			len(one), len(fifty), strings.Join(one, "\n"), strings.Join(fifty, "\n"))
	}
	t.Logf("round trips per tick: %d", len(one))
}

// tickStatements runs one tick with n due hunts and returns the statements it sent, one line
// each. The driver's handshake when the pool opens a connection is left out: whether the pool
// needs one depends on what else the machine is doing, not on the tick.
func tickStatements(t testing.TB, e *env, n int) []string {
	e.exec("TRUNCATE TABLE hunt_lease")
	var hunts []hunt.Hunt
	for i := range n {
		hunts = append(hunts, hunt.Hunt{ID: fmt.Sprintf("h%04d", i), Interval: 3600 * time.Second, Offset: sec(int64(i % 3600)), Query: eventsQuery})
	}
	r := e.runner("pod-a", testSet("x", hunts...), func(o *Options) { o.MaxQueued = n })
	holdRuns(t, r.Runner)
	r.hb.skip() // the heartbeat is beside the tick, once per 30 s: not a round trip of it
	var mark uint64
	if log := e.srv.StatementLog(t); len(log) > 0 {
		mark = log[len(log)-1].Seq
	}
	if err := r.tick(e.ctx); err != nil {
		t.Fatal(err)
	}
	sent := e.srv.StatementsSince(t, mark)
	if len(r.exec.queue) != n {
		t.Fatalf("won %d of %d", len(r.exec.queue), n)
	}
	for _, j := range r.exec.queue {
		j.stopRenewal()
	}
	var out []string
	for _, st := range sent {
		if st.Database == e.db.Name && !isHandshake(st.SQL) {
			line, _, _ := strings.Cut(strings.TrimSpace(st.SQL), "\n")
			out = append(out, fmt.Sprintf("%s %.100s", st.Kind, line))
		}
	}
	return out
}

// isHandshake reports whether sql is what clickhouse-go sends when it opens a connection.
func isHandshake(sql string) bool {
	return strings.HasPrefix(strings.TrimSpace(sql), "SELECT displayName(), version()")
}

// useClaimer and useStore put c and s in place of the runner's claim protocol and store in
// every part that uses them (a test wraps them to observe or delay calls).
func (r *Runner) useClaimer(c Claimer) { r.claimer, r.commits.claimer = c, c }

func (r *Runner) useStore(s StateStore) {
	r.store, r.commits.store, r.owners.store = s, s, s
	r.hb.store, _ = s.(Heartbeater)
}

// testLogger sends the runner's log to the test log (shown on failure or with -v).
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Findings of attempts that never committed — a crash after the insert, or an insert that
// the server finished after its client died and that lands after the commit — are never seen
// through hunt_findings_committed, and a committed run's findings strictly inside the new
// run's window stay as they were.
func TestCommittedViewHidesUncommittedAttempts(t *testing.T) {
	e := newEnv(t)
	h := hunt.Hunt{ID: "crashy", Interval: 600 * time.Second, Offset: sec(e.mid(600)), Query: eventsQuery, MaxFindings: hunt.MaxFindingsCeiling}
	fire := e.latest(h)
	committed := uuid.New()
	// A committed run of fire-1200 with one finding; a crashed attempt at fire-600 left a finding.
	e.exec("INSERT INTO hunt_watermark (hunt_id, watermark, claim_id, updated, run_id) SELECT 'crashy', toDateTime(?, 'UTC'), generateUUIDv4(), now64(6), ?",
		fire-1200, committed)
	e.exec(fmt.Sprintf("INSERT INTO hunt_findings (hunt_id, fire, finding_id, finding, run_id, found) VALUES "+
		"('crashy', toDateTime(%d, 'UTC'), 1, 'orphan', generateUUIDv4(), now64(6)), "+
		"('crashy', toDateTime(%d, 'UTC'), 2, 'committed', '%s', now64(6))", fire-600, fire-1200, committed))
	r := e.runner("pod-a", testSet("x", h), nil)
	e.tickAndWait(r)
	// A late insert of another attempt of the fire just committed, same rows, newer `found`.
	e.exec("INSERT INTO hunt_findings (hunt_id, fire, finding_id, finding, run_id, found) "+
		"SELECT hunt_id, fire, finding_id, finding, generateUUIDv4(), now64(6) + 1 FROM hunt_findings WHERE hunt_id = 'crashy' AND fire = toDateTime(?, 'UTC')", fire)
	if n := e.count("SELECT count() FROM hunt_findings_committed WHERE hunt_id = 'crashy' AND finding = 'orphan'"); n != 0 {
		t.Fatalf("%d findings of the uncommitted attempt are visible", n)
	}
	if n := e.count("SELECT count() FROM hunt_findings_committed WHERE hunt_id = 'crashy' AND fire = toDateTime(?, 'UTC')", fire-1200); n != 1 {
		t.Fatalf("the committed fire's finding: %d rows, want 1", n)
	}
	want := e.eventsIn(fire-1200, fire, 0)
	if got := e.count("SELECT count() FROM hunt_findings_committed WHERE hunt_id = 'crashy' AND fire = toDateTime(?, 'UTC')", fire); got != want {
		t.Fatalf("findings of the committed run %d, want exactly %d (one per event, late attempt hidden)", got, want)
	}
}

// A flooding hunt stores at most its max_findings, the same ones on every run (the order is
// deterministic), and its record counts the rest.
func TestRunnerCapsFindings(t *testing.T) {
	e := newEnv(t)
	h := hunt.Hunt{ID: "flood", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), MaxFindings: 100,
		Query: "SELECT number AS n FROM numbers(5000) WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}"}
	r := e.runner("pod-a", testSet("x", h), nil)
	e.tickAndWait(r)
	if n := e.count("SELECT count() FROM hunt_findings_committed WHERE hunt_id = 'flood'"); n != 100 {
		t.Fatalf("stored %d findings, want the cap of 100", n)
	}
	if n := e.count("SELECT sum(findings_dropped) FROM hunt_runs WHERE hunt_id = 'flood' AND status = 'succeeded'"); n != 4900 {
		t.Fatalf("findings_dropped = %d, want 4900", n)
	}
	var first string
	e.scan(&first, "SELECT finding FROM hunt_findings_committed WHERE hunt_id = 'flood' ORDER BY cityHash64(finding), finding LIMIT 1")
	var minHash string
	e.scan(&minHash, "SELECT argMin(f, (cityHash64(f), f)) FROM (SELECT formatRowNoNewline('JSONEachRow', number AS n) AS f FROM numbers(5000))")
	if first != minHash {
		t.Fatalf("kept %q first, want the deterministic first %q", first, minHash)
	}
}

// A commit that the server refuses (here a constraint on hunt_watermark standing in for
// Keeper read-only, too many parts or a memory limit) leaves neither progress nor a succeeded
// record: the run is failed, and the next attempt after the fault commits once.
func TestCommitAndRecordAreOne(t *testing.T) {
	e := newEnv(t)
	h := hunt.Hunt{ID: "atomic", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery, MaxFindings: hunt.MaxFindingsCeiling}
	e.exec("ALTER TABLE hunt_watermark ADD CONSTRAINT refuse CHECK hunt_id != 'atomic'")
	r := e.runner("pod-a", testSet("x", h), nil)
	e.tickAndWait(r)
	if _, ok := e.watermarkOf("atomic"); ok {
		t.Fatal("a refused commit moved the watermark")
	}
	runs := e.runs("atomic")
	if len(runs) != 1 || runs[0].Status != hunt.RunFailed {
		t.Fatalf("runs %+v, want one failed and no succeeded", runs)
	}
	if n := e.count("SELECT count() FROM hunt_findings_committed WHERE hunt_id = 'atomic'"); n != 0 {
		t.Fatalf("%d findings of the refused commit are visible", n)
	}
	e.exec("ALTER TABLE hunt_watermark DROP CONSTRAINT refuse")
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); { // through the backoff (one tick)
		if _, ok := e.watermarkOf("atomic"); ok {
			break
		}
		e.tickAndWait(r)
	}
	fire := e.latest(h)
	if wm, ok := e.watermarkOf("atomic"); !ok || wm != fire {
		t.Fatalf("watermark %d/%v after the fault, want %d", wm, ok, fire)
	}
	if n := e.count("SELECT count() FROM hunt_runs WHERE hunt_id = 'atomic' AND status = 'succeeded'"); n != 1 {
		t.Fatalf("%d succeeded records, want 1", n)
	}
}

// SIGTERM semantics of Start: a run that finishes within the grace period commits; a run still
// going when the grace period ends is cancelled and commits nothing (its lease expires).
func TestRunnerShutdownGrace(t *testing.T) {
	slow := "SELECT sleepEachRow(0.5) AS s, number FROM numbers(4) WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}"
	for _, tc := range []struct {
		name   string
		grace  time.Duration
		commit bool
	}{
		{"finishes within grace", 20 * time.Second, true},
		{"cancelled after grace", 300 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			h := hunt.Hunt{ID: "slow", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: slow}
			started := make(chan struct{})
			r := e.runner("pod-a", testSet("x", h), func(o *Options) { o.Grace = tc.grace })
			ctx, cancel := context.WithCancel(e.ctx)
			done := make(chan error, 1)
			go func() { done <- r.Start(ctx) }()
			go func() {
				for r.metricsInFlight() == 0 {
					time.Sleep(20 * time.Millisecond)
				}
				close(started)
			}()
			select {
			case <-started:
			case <-time.After(30 * time.Second):
				t.Fatal("the run never started")
			}
			stopAt := time.Now()
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Start returned %v after shutdown, want nil", err)
			}
			took := time.Since(stopAt)
			_, committed := e.watermarkOf("slow")
			if committed != tc.commit {
				t.Fatalf("committed=%v after shutdown (took %v), want %v; runs %+v", committed, took, tc.commit, e.runs("slow"))
			}
			if !tc.commit {
				if took > tc.grace+5*time.Second {
					t.Fatalf("drain took %v with grace %v", took, tc.grace)
				}
				if runs := e.runs("slow"); len(runs) != 0 {
					t.Fatalf("a cancelled run wrote %+v", runs)
				}
			}
		})
	}
}

// metricsInFlight counts runs executing now (tests only).
func (r *Runner) metricsInFlight() int {
	running, _ := r.exec.counts()
	return running
}

// The hunt query runs with the hunt's timeout as max_execution_time and a JSON log_comment
// naming hunt and fire (attribution_test.go checks every key). The query reads its own
// settings back into its finding.
func TestRunnerQuerySettings(t *testing.T) {
	e := newEnv(t)
	h := hunt.Hunt{ID: "settings", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Timeout: 42 * time.Second, Query: "SELECT toString(getSetting('max_execution_time')) AS met, " +
		"toString(getSetting('log_comment')) AS lc, toString(getSetting('readonly')) AS ro " +
		"FROM numbers(1) WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)};"}
	r := e.runner("pod-a", testSet("x", h), nil)
	e.tickAndWait(r)
	fire := e.latest(h)
	var finding string
	e.scan(&finding, "SELECT finding FROM hunt_findings WHERE hunt_id = 'settings'")
	var got struct {
		Met string `json:"met"`
		Lc  string `json:"lc"`
		Ro  string `json:"ro"`
	}
	if err := json.Unmarshal([]byte(finding), &got); err != nil {
		t.Fatalf("finding %q: %v", finding, err)
	}
	if got.Met != "42" {
		t.Errorf("max_execution_time %q, want 42", got.Met)
	}
	var lc struct {
		HuntID string `json:"hunt_id"`
		Fire   string `json:"fire"`
	}
	if err := json.Unmarshal([]byte(got.Lc), &lc); err != nil || lc.HuntID != "settings" || lc.Fire != time.Unix(fire, 0).UTC().Format(time.RFC3339) {
		t.Errorf("log_comment %q does not name hunt and fire %d (%v)", got.Lc, fire, err)
	}
	t.Logf("hunt statement ran with readonly=%s", got.Ro)
}

// pausedClaimer runs a peer's work between the tick's snapshot and the claim, as a pod paused
// there (GC, CPU throttling) would see it; the claim itself is the real protocol.
type pausedClaimer struct {
	Claimer
	during func()
}

func (p pausedClaimer) Claim(ctx context.Context, fires []lease.Fire) (lease.Result, error) {
	p.during()
	return p.Claimer.Claim(ctx, fires)
}

// Issue scenario 1: pod A reads its snapshot, then pauses; peer B claims, runs and commits the
// previous fire; A claims the next fire. A's window must start at B's commit, not at the
// snapshot's watermark: the committed windows tile and every event is found exactly once.
func TestWindowStartsAtTheVerifiedWatermark(t *testing.T) {
	e := newEnv(t)
	h := hunt.Hunt{ID: "paused", Interval: 600 * time.Second, Offset: sec(e.mid(600)), Query: eventsQuery, MaxFindings: hunt.MaxFindingsCeiling}
	f2 := e.latest(h)
	f1, w0 := f2-600, f2-1800
	e.setWatermark("paused", w0)
	b := e.runner("pod-b", testSet("x", h), nil)
	a := e.runner("pod-a", testSet("x", h), nil)
	var once sync.Once
	a.useClaimer(pausedClaimer{Claimer: a.claimer, during: func() {
		once.Do(func() {
			// B, running as the schedule stood at f1: claim f1, run [w0, f1), commit.
			res, err := b.coord.Claim(e.ctx, []lease.Fire{{HuntID: "paused", Fire: f1}})
			if err != nil || len(res.Won) != 1 {
				t.Fatalf("peer claim: %+v, %v", res, err)
			}
			b.exec.enqueue([]*job{b.newJob(dueFire{Hunt: &b.source().Hunts[0], Fire: f1}, res.Won[0], store.HuntState{}, time.Now(), time.Now())})
			b.exec.wg.Wait()
		})
	}})
	// A's claim may itself be acknowledged too late on a loaded machine (it is then lost and
	// its provisional row expires): tick until A has committed f2.
	for deadline := time.Now().Add(time.Minute); e.count("SELECT count() FROM hunt_watermark WHERE hunt_id = 'paused' AND toInt64(watermark) = ?", f2) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("A never committed f2")
		}
		e.tickAndWait(a)
		time.Sleep(100 * time.Millisecond)
	}
	runs := e.runs("paused")
	var ok []runRow
	for _, r := range runs {
		if r.Status == hunt.RunSucceeded {
			ok = append(ok, r)
		}
	}
	if len(ok) != 2 || ok[0].Start != w0 || ok[0].End != f1 || ok[1].Start != f1 || ok[1].End != f2 {
		t.Fatalf("committed windows %+v, want [%d, %d) then [%d, %d)", ok, w0, f1, f1, f2)
	}
	if got, want := e.count("SELECT count() FROM hunt_findings_committed WHERE hunt_id = 'paused'"), e.eventsIn(w0, f2, 0); got != want {
		t.Fatalf("%d committed findings, want exactly %d (one per event)", got, want)
	}
}

// Statement text the fault rules below aim at. Renewals are the only hunt_lease writes with a
// literal lease length (claims bind it as a parameter).
const (
	matchCommit   = "INSERT INTO \\S*hunt_watermark"
	matchFindings = "INSERT INTO \\S*hunt_findings"
	matchRenew    = "toIntervalMillisecond\\(\\d+\\)"
)

// waitLeaseExpired waits until the hunt's newest lease has ended on the server's clock.
func (e *env) waitLeaseExpired(id string) {
	e.t.Helper()
	chtest.Eventually(e.t, time.Minute, "the lease of "+id+" to expire", func() bool {
		return e.count("SELECT count() FROM hunt_lease WHERE hunt_id = ? AND lease_until > now64(3)", id) == 0
	})
}

// firedCount is how often the named fault rule fired so far.
func (e *env) firedCount(name string) int {
	for _, r := range e.srv.FaultStats(e.t) {
		if r.Name == name {
			return int(r.Fired)
		}
	}
	return 0
}

// Issue scenario 4: pod A's commit is sent while its lease is trusted but executes only after
// the lease expired (renewals failing, the statement held), by which time peer B has claimed
// the same fire. A stops retrying past its trust deadline; its late statements are refused;
// B commits; exactly one commit, and its findings are exact.
func TestLateCommitAfterExpiryIsRefused(t *testing.T) {
	e := newPrivateEnv(t)
	h := hunt.Hunt{ID: "late", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery, MaxFindings: hunt.MaxFindingsCeiling}
	hs := testSet("x", h)
	e.srv.SetFaults(t,
		ctl.FaultRule{Name: "commit", Kind: ctl.KindInsert, Match: matchCommit, Effect: ctl.DelayStart, Delay: 2 * time.Minute},
		ctl.FaultRule{Name: "renew", Kind: ctl.KindInsert, Match: matchRenew, Effect: ctl.FailBefore, Code: 242})
	a := e.runner("pod-a", hs, func(o *Options) { o.Lease = 3 * time.Second })
	var reports []RunReport
	var mu sync.Mutex
	a.opts.OnRun = func(rep RunReport) { mu.Lock(); reports = append(reports, rep); mu.Unlock() }
	aDone := make(chan struct{})
	go func() { defer close(aDone); e.tickAndWait(a) }()
	chtest.Eventually(t, time.Minute, "A's commit to be held", func() bool { return e.firedCount("commit") > 0 })
	e.waitLeaseExpired("late")
	<-aDone // A gave up at its trust deadline; its statements are still held
	held := e.firedCount("commit")

	b := e.runner("pod-b", hs, func(o *Options) { o.Lease = 30 * time.Second })
	bDone := make(chan struct{})
	go func() { defer close(bDone); e.tickAndWait(b) }()
	chtest.Eventually(t, time.Minute, "B's commit to be held", func() bool { return e.firedCount("commit") > held })
	e.srv.ClearFaults(t) // every held commit executes now, A's and B's, in any order
	<-bDone

	mu.Lock()
	if len(reports) != 1 || reports[0].Status != hunt.RunLost {
		t.Errorf("A's outcome %+v, want lost", reports)
	}
	mu.Unlock()
	fire := e.latest(h)
	if n := e.count("SELECT count() FROM hunt_watermark WHERE hunt_id = 'late'"); n != 1 {
		t.Fatalf("%d commits of the fire, want 1", n)
	}
	var owner string
	e.scan(&owner, "SELECT run_owner FROM hunt_watermark WHERE hunt_id = 'late'")
	if owner != "pod-b" {
		t.Errorf("committed by %q, want pod-b", owner)
	}
	if got, want := e.count("SELECT count() FROM hunt_findings_committed WHERE hunt_id = 'late'"), e.eventsIn(fire-3600, fire, 0); got != want {
		t.Errorf("%d committed findings, want exactly %d", got, want)
	}
}

// Issue scenario 5: pod A's findings insert is finished by the server after A lost its lease
// and gave up, and after peer B committed the same fire. The committed view shows B's findings
// exactly; A's rows landed but are never visible.
func TestLateFindingsOfALostAttemptStayInvisible(t *testing.T) {
	e := newPrivateEnv(t)
	h := hunt.Hunt{ID: "slowins", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery, MaxFindings: hunt.MaxFindingsCeiling}
	hs := testSet("x", h)
	e.srv.SetFaults(t,
		ctl.FaultRule{Name: "findings", Kind: ctl.KindInsert, Match: matchFindings, Times: 1, Effect: ctl.DelayStart, Delay: 2 * time.Minute},
		ctl.FaultRule{Name: "renew", Kind: ctl.KindInsert, Match: matchRenew, Effect: ctl.FailBefore, Code: 242})
	a := e.runner("pod-a", hs, func(o *Options) { o.Lease = 3 * time.Second })
	aDone := make(chan struct{})
	go func() { defer close(aDone); e.tickAndWait(a) }()
	chtest.Eventually(t, time.Minute, "A's findings insert to be held", func() bool { return e.firedCount("findings") > 0 })
	e.waitLeaseExpired("slowins")
	<-aDone
	b := e.runner("pod-b", hs, func(o *Options) { o.Lease = 30 * time.Second })
	e.tickAndWait(b)
	fire := e.latest(h)
	want := e.eventsIn(fire-3600, fire, 0)
	e.srv.ClearFaults(t) // A's insert lands now, after B's commit
	chtest.Eventually(t, time.Minute, "A's held insert to land", func() bool {
		return e.count("SELECT count() FROM hunt_findings WHERE hunt_id = 'slowins'") >= 2*want
	})
	if got := e.count("SELECT count() FROM hunt_findings_committed WHERE hunt_id = 'slowins'"); got != want {
		t.Fatalf("%d committed findings, want exactly B's %d", got, want)
	}
	if n := e.count("SELECT count() FROM hunt_runs WHERE hunt_id = 'slowins' AND status = 'succeeded'"); n != 1 {
		t.Fatalf("%d succeeded records, want 1", n)
	}
}

// The runner owes the fires of its schedule clock (Options.ScheduleClock), not the server's.
func TestRunnerFollowsTheScheduleClock(t *testing.T) {
	e := newEnv(t)
	h := hunt.Hunt{ID: "ahead", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery}
	ahead := e.now + 2*3600
	r := e.runner("pod-a", testSet("x", h), func(o *Options) {
		o.ScheduleClock = func(time.Time) time.Time { return time.Unix(ahead, 0) }
	})
	e.tickAndWait(r)
	want := schedule.LatestFire(ahead, h.IntervalSeconds(), h.OffsetSeconds())
	if wm, ok := e.watermarkOf(h.ID); !ok || wm != want {
		t.Fatalf("watermark %d (%v), want %d: the latest fire two hours ahead, on the schedule clock", wm, ok, want)
	}
}

// steppedRunner runs h with a minute's lease on a schedule clock the test steps (sched, from
// the setup instant).
func (e *env) steppedRunner(h hunt.Hunt) (envRunner, *atomic.Int64) {
	e.t.Helper()
	sched := new(atomic.Int64)
	sched.Store(e.now)
	r := e.runner("pod-a", testSet("x", h), func(o *Options) {
		o.Lease = time.Minute
		o.ScheduleClock = func(time.Time) time.Time { return time.Unix(sched.Load(), 0) }
	})
	return r, sched
}

// A commit spends its lease and frees the hunt: the next fire is claimed and run at once,
// while the committed fire's lease is still live, and nothing is released.
func TestCommitFreesTheHunt(t *testing.T) {
	e := newEnv(t)
	h := hunt.Hunt{ID: "quick", Interval: 60 * time.Second, Offset: sec(e.mid(60)), Query: eventsQuery}
	r, sched := e.steppedRunner(h)
	e.tickAndWait(r)
	first := e.latest(h)
	if wm, _ := e.watermarkOf(h.ID); wm != first {
		t.Fatalf("watermark %d, want the first fire %d", wm, first)
	}
	sched.Add(h.IntervalSeconds())
	e.tickAndWait(r)
	if wm, _ := e.watermarkOf(h.ID); wm != first+h.IntervalSeconds() {
		t.Fatalf("watermark %d after the next fire came, want %d: the committed fire's live lease held the hunt", wm, first+h.IntervalSeconds())
	}
	if n := e.count("SELECT count() FROM hunt_lease WHERE hunt_id = ? AND lease_until <= claimed + INTERVAL 1 SECOND", h.ID); n != 0 {
		t.Fatalf("%d release rows, want none: a commit frees the hunt by itself", n)
	}
}

// slowRenewals holds each renewal until a commit was sent, or for hold, as a slow network
// would, and notes when each one returned.
type slowRenewals struct {
	Claimer
	hold      time.Duration
	committed <-chan struct{}
	mu        sync.Mutex
	ends      []time.Time
}

func (s *slowRenewals) Renew(ctx context.Context, l lease.Lease) (lease.Lease, error) {
	select {
	case <-s.committed:
	case <-time.After(s.hold):
	}
	nl, err := s.Claimer.Renew(ctx, l)
	s.mu.Lock()
	s.ends = append(s.ends, time.Now())
	s.mu.Unlock()
	return nl, err
}

// commitTimes notes when each commit was sent, and closes sent at the first.
type commitTimes struct {
	StateStore
	mu    sync.Mutex
	times []time.Time
	sent  chan struct{}
}

func (c *commitTimes) AdvanceAll(ctx context.Context, commits []store.Commit) []error {
	c.mu.Lock()
	if len(c.times) == 0 {
		close(c.sent)
	}
	c.times = append(c.times, time.Now())
	c.mu.Unlock()
	return c.StateStore.AdvanceAll(ctx, commits)
}

// No renewal is in flight when a commit is sent: the commit spends the lease, and a renewal
// landing after a peer's claim of the next fire would stand above that claim.
func TestCommitWaitsForARenewalInFlight(t *testing.T) {
	e := newEnv(t)
	// A 3 s query (the engine's most per block) against renewals every 2.5 s: the first
	// renewal starts while the query runs and is held until a commit is sent, or for 2 s. With
	// the commit waiting for it, it is held the 2 s; a commit sent while it is held releases it
	// at once, and returns after it. The 7.5 s lease leaves a loaded engine about 4 s for the
	// renewal and the commit to answer.
	h := hunt.Hunt{ID: "renewed", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)),
		Query: "SELECT sleepEachRow(0.5) AS s, number FROM numbers(6) WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}"}
	r := e.runner("pod-a", testSet("x", h), func(o *Options) { o.Lease = 7500 * time.Millisecond })
	commits := &commitTimes{StateStore: r.store, sent: make(chan struct{})}
	renewals := &slowRenewals{Claimer: r.claimer, hold: 2 * time.Second, committed: commits.sent}
	r.useClaimer(renewals)
	r.useStore(commits)
	e.tickAndWait(r)
	if runs := e.runs(h.ID); len(runs) != 1 || runs[0].Status != hunt.RunSucceeded {
		t.Fatalf("runs %+v, want one success", runs)
	}
	chtest.Eventually(t, 10*time.Second, "the renewal held during the run to return", func() bool {
		renewals.mu.Lock()
		defer renewals.mu.Unlock()
		return len(renewals.ends) > 0
	})
	renewals.mu.Lock()
	defer renewals.mu.Unlock()
	commits.mu.Lock()
	defer commits.mu.Unlock()
	if len(commits.times) == 0 {
		t.Fatal("no commit was sent")
	}
	for _, end := range renewals.ends {
		if commits.times[0].Before(end) {
			t.Fatalf("the commit was sent %v before a renewal returned", end.Sub(commits.times[0]))
		}
	}
}

// Shortening an interval (1h to 1m) with no outage leaves no gap: the lease carries the
// interval the newest watermark was committed under, and the run's catch-up cap uses it. The
// commit records the new interval for the run after it.
func TestRunnerShortenedIntervalLeavesNoGap(t *testing.T) {
	e := newEnv(t)
	h := hunt.Hunt{ID: "shortened", Interval: 60 * time.Second, Offset: 7 * time.Second, Query: eventsQuery, MaxFindings: hunt.MaxFindingsCeiling}
	fire := e.latest(h)
	// The last hourly fire committed 50 minutes ago: more than the new interval's default cap
	// (24 minutes), well inside the old one's.
	e.exec("INSERT INTO hunt_watermark (hunt_id, watermark, claim_id, updated, interval_seconds) "+
		"SELECT ?, toDateTime(?, 'UTC'), generateUUIDv4(), now64(6), 3600", "shortened", fire-3000)
	r := e.runner("pod-a", testSet("x", h), nil)
	e.tickUntil(r, "the first run under the new interval to commit", func() bool {
		wm, _ := e.watermarkOf("shortened")
		return wm > fire-3000
	})
	runs := e.runs("shortened")
	if len(runs) != 1 || runs[0].Status != hunt.RunSucceeded || runs[0].Start != fire-3000 {
		t.Fatalf("runs %+v, want one success from %d and no gap", runs, fire-3000)
	}
	var inForce uint32
	e.scan(&inForce, "SELECT argMax(interval_seconds, (watermark, updated)) FROM hunt_watermark WHERE hunt_id = 'shortened'")
	if inForce != 60 {
		t.Fatalf("the commit recorded interval %d, want 60", inForce)
	}
}

// A hunt may declare its window parameters as DateTime (whole seconds): the runner binds them
// in a form the server parses for DateTime as for DateTime64, so the documented form runs.
func TestRunnerDateTimeWindowParameters(t *testing.T) {
	e := newEnv(t)
	h := hunt.Hunt{ID: "seconds", Interval: 60 * time.Second, Offset: 7 * time.Second, MaxFindings: hunt.MaxFindingsCeiling,
		Query: "SELECT host, n FROM events WHERE ts >= {window_start:DateTime} AND ts < {window_end:DateTime('UTC')}"}
	fire := e.latest(h)
	e.setWatermark("seconds", fire-60)
	r := e.runner("pod-a", testSet("x", h), nil)
	e.tickUntil(r, "the DateTime hunt to commit", func() bool {
		wm, _ := e.watermarkOf("seconds")
		return wm > fire-60
	})
	runs := e.runs("seconds")
	if len(runs) != 1 || runs[0].Status != hunt.RunSucceeded {
		t.Fatalf("runs %+v, want one success", runs)
	}
	if got, want := e.count("SELECT count() FROM hunt_findings_committed WHERE hunt_id = 'seconds'"), e.eventsIn(runs[0].Start, runs[0].End, 0); got != want {
		t.Fatalf("findings %d, want %d", got, want)
	}
}

// sec is n seconds: tests count the schedule grid in seconds, as the runner does.
func sec(n int64) time.Duration { return time.Duration(n) * time.Second }

// testSet is the loaded set of hunts, every one enabled, with the set hash pinned to hash.
func testSet(hash string, hunts ...hunt.Hunt) *hunt.Set {
	for i := range hunts {
		hunts[i].Enabled = true
	}
	s := hunt.NewSet(hunts, "test", "")
	s.Hash = hash
	return s
}
