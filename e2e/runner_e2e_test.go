package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"

	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store/schema"
)

const (
	// The load is sized for chlocal's engine, which runs one statement at a time, on a loaded
	// 2-core machine (load average 8): 30 hunts at 3–6 s make about 7 fires a second, which
	// the three runners cannot always keep up with there; a hunt that falls behind catches up
	// in one wider window, which the tiling check below covers.
	e2eHunts       = 30
	minInterval    = 3
	eventsPerSec   = 4 // events are written every 250 ms, so a window [s, e) holds 4·(e−s) of them
	gapEvery       = 10
	coordDB        = "hr"
	eventsDB       = "ev"
	runnerProcsNum = 3
	// recoverWithin bounds how long after ClickHouse comes back every hunt must have committed
	// a fire owed after the outage: liveness, not throughput, so it is generous.
	recoverWithin = 4 * time.Minute
)

// TestRunnersEndToEnd runs three `hunt-runner run` processes over 30 hunts with 3–6 s
// intervals for over a minute against a private chlocal process, and abuses them: SIGKILL one
// mid-run and restart it, SIGTERM another and restart it, then stop ClickHouse for 20 s. From
// the tables afterwards: no fire succeeded twice, every hunt's succeeded and gap windows tile
// [first window, watermark) exactly (no fire lost, none covered twice), the findings equal a
// single clean run's, and every hunt recovers from the outage by itself.
func TestRunnersEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	binary(t) // build first: the build must not eat into the timed phases
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	srv, conn, intervals, args := setupE2E(t, ctx, e2eHunts)
	var now uint32
	procs := startRunners(t, "runner", args)
	start := time.Now()
	t.Logf("3 runners ready")

	// Until the outage: 30% of the reads that see hunt_watermark (snapshots, claims' verify
	// reads, commits' read-backs) are answered 1.5 s late, and runner-2 is frozen with SIGSTOP
	// again and again for 1–7 s, longer than its 5 s lease, between its snapshot, claim, run
	// and commit wherever the signal finds it.
	srv.SetFaults(t, ctl.FaultRule{Name: "late-watermark-read", Kind: ctl.KindRead, Match: "hunt_watermark",
		Probability: 0.3, Effect: ctl.DelayAnswer, Delay: 1500 * time.Millisecond})
	stopPauses := pauseRepeatedly(t, procs[2], 3*time.Second)

	// SIGKILL runner-0 while a run is in flight, restart it.
	time.Sleep(10 * time.Second)
	if !chtest.Poll(30*time.Second, func() bool { return procs[0].metric("hunt_runner_runs_in_flight") >= 1 }) {
		t.Log("runner-0 showed no run in flight; killing it anyway")
	}
	procs[0].kill()
	t.Logf("SIGKILLed runner-0 at +%v", time.Since(start).Round(time.Second))
	time.Sleep(2 * time.Second)
	procs[0].start()

	// SIGTERM runner-1: it drains and exits 0 within the grace period; restart it.
	time.Sleep(12 * time.Second)
	code, took := procs[1].term(20 * time.Second)
	if code != 0 {
		t.Errorf("runner-1 exited %d after SIGTERM, want 0", code)
	}
	t.Logf("SIGTERMed runner-1 at +%v: exit %d after %v", time.Since(start).Round(time.Second), code, took.Round(time.Millisecond))
	procs[1].start()
	for _, p := range procs[:2] {
		if !chtest.Poll(60*time.Second, p.ready) {
			t.Fatalf("restarted %s never became ready", p.name)
		}
	}

	// Run on until the minute is full, then take ClickHouse away for 20 s.
	if d := 45*time.Second - time.Since(start); d > 0 {
		time.Sleep(d)
	}
	t.Logf("runner-2 was paused %d times", stopPauses())
	srv.ClearFaults(t)
	srv.Stop()
	down := time.Now()
	t.Logf("ClickHouse stopped at +%v", time.Since(start).Round(time.Second))
	for _, p := range procs {
		if !chtest.Poll(15*time.Second, func() bool { return !p.ready() }) {
			t.Errorf("%s stayed ready with ClickHouse down", p.name)
		}
	}
	time.Sleep(20*time.Second - time.Since(down))
	for _, p := range procs {
		if !p.running() {
			t.Fatalf("%s exited during the outage", p.name)
		}
		if code, _ := p.get("/healthz"); code != 200 {
			t.Errorf("%s /healthz = %d during the outage, want 200", p.name, code)
		}
	}
	srv.Start()
	var back uint32
	if !chtest.Poll(30*time.Second, func() bool {
		return conn.QueryRow(ctx, "SELECT toUnixTimestamp(now())").Scan(&back) == nil
	}) {
		t.Fatal("ClickHouse did not answer after its restart")
	}
	t.Logf("ClickHouse back at +%v", time.Since(start).Round(time.Second))
	for _, p := range procs {
		if !chtest.Poll(45*time.Second, p.ready) {
			t.Fatalf("%s did not become ready again after the outage", p.name)
		}
	}
	// Let every hunt recover (its watermark past the first fire owed after ClickHouse came
	// back), then stop everyone at once, cleanly.
	backAt := time.Now()
	if !chtest.Poll(recoverWithin, func() bool { return recovered(ctx, conn, intervals, int64(back)) }) {
		t.Errorf("the hunts did not recover within %v of the outage", recoverWithin)
	}
	t.Logf("every hunt recovered %v after ClickHouse came back", time.Since(backAt).Round(time.Second))
	if err := conn.QueryRow(ctx, "SELECT toUnixTimestamp(now())").Scan(&now); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		if code, _ := p.term(20 * time.Second); code != 0 {
			t.Errorf("%s exited %d after SIGTERM, want 0", p.name, code)
		}
	}
	t.Logf("all stopped at +%v", time.Since(start).Round(time.Second))
	st := verify(t, ctx, conn, intervals, int64(back), int64(now))
	if st.gaps == 0 {
		t.Errorf("the 20 s outage recorded no gap for the hunts with a short max_catchup")
	}
}

// setupE2E starts a private chlocal process with the coordination schema, an events table
// (one unique event every 250 ms from an hour ago to ten minutes ahead) and a directory of
// hunts with 3–6 s intervals over it, every gapEvery-th with a short max_catchup; it returns
// the server, a connection, the hunts' intervals and the common `run` arguments.
func setupE2E(t *testing.T, ctx context.Context, hunts int) (*chtest.Server, driver.Conn, map[string]int64, []string) {
	t.Helper()
	srv := chtest.Start(t)
	conn := open(t, srv.URL)
	if _, err := schema.Apply(ctx, conn, coordDB, schema.TopologySingle, ""); err != nil {
		t.Fatal(err)
	}
	var now uint32
	if err := conn.QueryRow(ctx, "SELECT toUnixTimestamp(now())").Scan(&now); err != nil {
		t.Fatal(err)
	}
	// Events from an hour ago to ten minutes ahead, one every 250 ms, each unique.
	from, to := int64(now)-3600, int64(now)+600
	mustExec(t, conn, "CREATE DATABASE "+eventsDB)
	mustExec(t, conn, "CREATE TABLE "+eventsDB+".events (ts DateTime64(3, 'UTC'), n UInt64) ENGINE = MergeTree ORDER BY ts")
	mustExec(t, conn, fmt.Sprintf("INSERT INTO %s.events SELECT fromUnixTimestamp64Milli(toInt64(%d + number * 250), 'UTC'), number FROM numbers(%d)",
		eventsDB, from*1000, (to-from)*eventsPerSec))

	huntsDir := t.TempDir()
	intervals := map[string]int64{}
	for i := range hunts {
		id := fmt.Sprintf("e2e-%02d", i)
		iv := int64(minInterval + i%4)
		intervals[id] = iv
		extra := ""
		if i%gapEvery == 0 {
			// Short catch-up: the outage must show up as recorded gaps, never as lost fires.
			extra = fmt.Sprintf("max_catchup: %ds\n", 2*iv)
		}
		body := fmt.Sprintf("id: %s\ninterval: %ds\n%sseverity: low\nlabels: {suite: e2e}\nquery: |\n"+
			"  SELECT ts, n FROM %s.events\n  WHERE ts >= {window_start:DateTime64(3)} AND ts < {window_end:DateTime64(3)}\n",
			id, iv, extra, eventsDB)
		// Written long ago, as far as the directory source can tell, so that it trusts the
		// files at once instead of waiting for them to settle.
		path, written := filepath.Join(huntsDir, id+".yaml"), time.Now().Add(-time.Hour)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, written, written); err != nil {
			t.Fatal(err)
		}
	}

	args := []string{"--clickhouse-url", srv.URL, "--database", coordDB, "--hunts-dir", huntsDir,
		"--reload-interval", "2s", "--tick", "1s", "--lease", "5s", "--settle", "300ms", "--grace", "10s",
		"--concurrency", "4", "--clickhouse-connect-timeout", "20s"}
	return srv, conn, intervals, args
}

// startRunners starts runnerProcsNum `run` processes named prefix-N with args and waits until
// each is ready; when the test fails, their log tails are printed. E2E_LOG_DIR keeps the logs.
func startRunners(t *testing.T, prefix string, args []string) []*runnerProc {
	t.Helper()
	logs := t.TempDir()
	if d := os.Getenv("E2E_LOG_DIR"); d != "" { // keep the runners' logs for a post-mortem
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		logs = d
	}
	var procs []*runnerProc
	for i := range runnerProcsNum {
		procs = append(procs, newRunner(t, fmt.Sprintf("%s-%d", prefix, i), args, logs))
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range procs {
				t.Log(p.logTail())
			}
		}
	})
	for _, p := range procs {
		if !chtest.Poll(60*time.Second, p.ready) {
			t.Fatalf("%s never became ready", p.name)
		}
	}
	return procs
}

// pauseRepeatedly freezes p with SIGSTOP for 1–7 s at a time, with every gap of 1–3 s, until
// the returned function is called; that resumes p and reports how many pauses there were.
func pauseRepeatedly(t *testing.T, p *runnerProc, after time.Duration) func() int {
	t.Helper()
	stop, done := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		defer func() { done <- n }()
		select {
		case <-stop:
			return
		case <-time.After(after):
		}
		for {
			if !p.running() {
				return
			}
			_ = p.cmd.Process.Signal(syscall.SIGSTOP)
			n++
			select {
			case <-stop:
				_ = p.cmd.Process.Signal(syscall.SIGCONT)
				return
			case <-time.After(time.Second + time.Duration(rand.Int64N(int64(6*time.Second)))):
			}
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			select {
			case <-stop:
				return
			case <-time.After(time.Second + time.Duration(rand.Int64N(int64(2*time.Second)))):
			}
		}
	}()
	return func() int { close(stop); return <-done }
}

// recovered reports whether every hunt's watermark has passed the first fire owed after back
// (server clock): each committed a window that ends after the outage.
func recovered(ctx context.Context, conn driver.Conn, intervals map[string]int64, back int64) bool {
	rows, err := conn.Query(ctx, "SELECT hunt_id, toInt64(max(watermark)) FROM "+coordDB+".hunt_watermark GROUP BY hunt_id")
	if err != nil {
		return false
	}
	defer rows.Close()
	wms := map[string]int64{}
	for rows.Next() {
		var id string
		var wm int64
		if rows.Scan(&id, &wm) != nil {
			return false
		}
		wms[id] = wm
	}
	for id, iv := range intervals {
		if wms[id] < firstFireAfter(id, iv, back) {
			return false
		}
	}
	return true
}

// firstFireAfter is the hunt's first fire strictly after t.
func firstFireAfter(id string, iv, t int64) int64 {
	return schedule.LatestFire(t, iv, schedule.PhaseOffset(id, iv, schedule.DefaultSpreadFraction)) + iv
}

func open(t *testing.T, url string) driver.Conn {
	t.Helper()
	opts, err := chtest.Options(url, "default")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func mustExec(t *testing.T, conn driver.Conn, q string) {
	t.Helper()
	if err := conn.Exec(context.Background(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

type runWin struct {
	fire, start, end int64
	status           string
}

// e2eStats is what verify counted.
type e2eStats struct{ runs, gaps int64 }

// verify checks the tables after the stop: no fire succeeded twice, windows tile, findings are
// exact, the watermarks passed the first fire owed after back (server clock), and the runners
// shared the work; stoppedAt is when they were stopped.
func verify(t *testing.T, ctx context.Context, conn driver.Conn, intervals map[string]int64, back, stoppedAt int64) e2eStats {
	t.Helper()
	var doubles uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM (SELECT hunt_id, fire FROM "+coordDB+".hunt_runs "+
		"WHERE status = 'succeeded' GROUP BY hunt_id, fire HAVING count() > 1)").Scan(&doubles); err != nil {
		t.Fatal(err)
	}
	if doubles != 0 {
		t.Errorf("%d (hunt, fire) pairs succeeded twice", doubles)
		rows, err := conn.Query(ctx, "SELECT hunt_id, toInt64(fire), run_id, owner, started, finished FROM "+coordDB+".hunt_runs "+
			"WHERE status = 'succeeded' AND (hunt_id, fire) IN (SELECT hunt_id, fire FROM "+coordDB+".hunt_runs "+
			"WHERE status = 'succeeded' GROUP BY hunt_id, fire HAVING count() > 1) ORDER BY hunt_id, started")
		if err == nil {
			for rows.Next() {
				var id, owner string
				var fire int64
				var runID uuid.UUID
				var started, finished time.Time
				if rows.Scan(&id, &fire, &runID, &owner, &started, &finished) == nil {
					t.Logf("double: %s fire %d run %s owner %s started %s finished %s", id, fire, runID, owner,
						started.Format("15:04:05.000"), finished.Format("15:04:05.000"))
				}
			}
			rows.Close()
		}
	}

	rows, err := conn.Query(ctx, "SELECT hunt_id, toInt64(fire), toInt64(window_start), toInt64(window_end), toString(status) FROM "+
		coordDB+".hunt_runs WHERE status IN ('succeeded', 'gap') ORDER BY hunt_id, window_start")
	if err != nil {
		t.Fatal(err)
	}
	wins := map[string][]runWin{}
	for rows.Next() {
		var id string
		var w runWin
		if err := rows.Scan(&id, &w.fire, &w.start, &w.end, &w.status); err != nil {
			t.Fatal(err)
		}
		wins[id] = append(wins[id], w)
	}
	rows.Close()
	wms := map[string]int64{}
	rows, err = conn.Query(ctx, "SELECT hunt_id, toInt64(max(watermark)) FROM "+coordDB+".hunt_watermark GROUP BY hunt_id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var wm int64
		if err := rows.Scan(&id, &wm); err != nil {
			t.Fatal(err)
		}
		wms[id] = wm
	}
	rows.Close()

	var covered, gaps, runs, atLatest, maxLag int64
	ids := make([]string, 0, len(intervals))
	for id := range intervals {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		iv := intervals[id]
		ws := wins[id]
		wm, ok := wms[id]
		if !ok || len(ws) == 0 {
			t.Errorf("%s never ran", id)
			continue
		}
		off := schedule.PhaseOffset(id, iv, schedule.DefaultSpreadFraction)
		first := ws[0]
		if first.status != "succeeded" || first.start != first.end-iv {
			t.Errorf("%s: first window %+v, want a succeeded first run over one interval", id, first)
		}
		for i, w := range ws {
			if w.status == "succeeded" {
				runs++
				covered += w.end - w.start
				if schedule.LatestFire(w.fire, iv, off) != w.fire {
					t.Errorf("%s: succeeded fire %d is not on the schedule grid", id, w.fire)
				}
			} else {
				gaps++
			}
			if i > 0 && ws[i-1].end != w.start {
				t.Errorf("%s: windows do not tile: [%d, %d) %s then [%d, %d) %s", id, ws[i-1].start, ws[i-1].end,
					ws[i-1].status, w.start, w.end, w.status)
			}
		}
		if last := ws[len(ws)-1]; last.end != wm || last.status != "succeeded" {
			t.Errorf("%s: last window %+v does not end at the watermark %d", id, last, wm)
		}
		// Watermarks never move back: the fire recovery waited for is still committed. How far
		// behind the latest fire a hunt stands at the stop is throughput, logged below.
		if owed := firstFireAfter(id, iv, back); wm < owed {
			t.Errorf("%s: watermark %d is behind fire %d, committed after the outage", id, wm, owed)
		}
		if wm >= schedule.LatestFire(stoppedAt, iv, off) {
			atLatest++
		}
		if lag := stoppedAt - wm; lag > maxLag {
			maxLag = lag
		}
	}

	var findings uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+coordDB+".hunt_findings_committed").Scan(&findings); err != nil {
		t.Fatal(err)
	}
	// Every committed window's findings are exact: one per source event in the window, under
	// that run's id, whatever other attempts of the fire wrote.
	var inexact uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+coordDB+".hunt_runs AS r LEFT JOIN (SELECT run_id, count() AS c FROM "+
		coordDB+".hunt_findings_committed GROUP BY run_id) AS f ON f.run_id = r.run_id WHERE r.status = 'succeeded' AND "+
		fmt.Sprintf("f.c != %d * (toInt64(r.window_end) - toInt64(r.window_start)) SETTINGS join_use_nulls = 0", eventsPerSec)).Scan(&inexact); err != nil {
		t.Fatal(err)
	}
	if inexact != 0 {
		t.Errorf("%d committed windows whose findings are not exactly their events", inexact)
	}
	// One clean run over the same windows reads every event in them once.
	if want := uint64(covered * eventsPerSec); findings != want {
		t.Errorf("findings %d, want %d (a single clean run over the covered windows)", findings, want)
	}
	var owners uint64
	_ = conn.QueryRow(ctx, "SELECT uniqExact(owner) FROM "+coordDB+".hunt_runs WHERE status = 'succeeded'").Scan(&owners)
	var lost uint64
	_ = conn.QueryRow(ctx, "SELECT count() FROM "+coordDB+".hunt_runs WHERE status = 'lost'").Scan(&lost)
	t.Logf("%d succeeded runs by %d owners, %d gaps, %d lost, %d findings, %d/%d hunts at the latest fire, max lag %ds at stop",
		runs, owners, gaps, lost, findings, atLatest, len(ids), maxLag)
	if owners < 2 {
		t.Errorf("runs by %d owner(s); the three runners should share the work", owners)
	}
	return e2eStats{runs: runs, gaps: gaps}
}
