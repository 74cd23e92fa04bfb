package runner

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/serve"
	"github.com/hunt-runner/hunt-runner/schedule"
)

// The done-when of declared sources: a hunt whose source stops receiving rows goes to no_data
// at the first fire past max_silence (still committing its window), its runs metric says so,
// and it recovers by itself at the first fire after rows arrive. The schedule clock is pinned.
func TestSilentSourceIsNoDataUntilItSpeaks(t *testing.T) {
	e := newEnv(t)
	e.exec("CREATE TABLE feed (ts DateTime('UTC'), v UInt8) ENGINE = MergeTree ORDER BY ts")
	h := hunt.Hunt{ID: "watched", Interval: 60 * time.Second, Offset: sec(e.mid(60)), Query: eventsQuery,
		Sources: []hunt.Source{{Table: e.db.Name + ".feed", TimeColumn: "ts", MaxSilence: 15 * time.Minute}}}
	f := e.latest(h)
	// The feed's newest row: still within max_silence at fire f, past it at f+60.
	e.exec(fmt.Sprintf("INSERT INTO feed VALUES (toDateTime(%d, 'UTC'), 1)", f-15*60+30))
	var sched atomic.Int64
	sched.Store(e.now)
	tel, err := serve.NewTelemetry(e.ctx, serve.TelemetryOptions{Service: "test"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(tel.Meter, 400*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reports []RunReport
	r := e.runner("pod-a", testSet("x", h), func(o *Options) {
		o.Lease = time.Minute
		o.Metrics = m
		o.ScheduleClock = func(time.Time) time.Time { return time.Unix(sched.Load(), 0) }
		o.OnRun = func(rep RunReport) { mu.Lock(); reports = append(reports, rep); mu.Unlock() }
	})
	runTo := func(fire int64, want hunt.RunStatus) {
		t.Helper()
		sched.Store(fire + h.IntervalSeconds()/2)
		e.tickUntil(r, fmt.Sprintf("fire %d to commit", fire), func() bool { wm, _ := e.watermarkOf(h.ID); return wm == fire })
		mu.Lock()
		last := reports[len(reports)-1]
		mu.Unlock()
		if last.Fire != fire || last.Status != want {
			t.Fatalf("fire %d: run %s (%v), want %s", fire, last.Status, last.Err, want)
		}
		snap, err := e.store().Snapshot(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st := snap.Hunts[h.ID]; want == hunt.RunNoData && (st.Status != hunt.RunNoData || !strings.Contains(st.LastError, "feed")) {
			t.Fatalf("state after fire %d: %+v, want no_data naming the source", fire, st)
		} else if want == hunt.RunSucceeded && fire > f && st.Status != hunt.RunSucceeded {
			t.Fatalf("state after fire %d: %+v, want succeeded: the hunt recovers by itself", fire, st)
		}
	}
	runTo(f, hunt.RunSucceeded)
	runTo(f+60, hunt.RunNoData)
	// The window was committed with its findings: nothing is examined twice.
	if got, want := e.count("SELECT count() FROM hunt_findings_committed WHERE hunt_id = ? AND toUnixTimestamp(fire) = ?", h.ID, f+60), e.eventsIn(f, f+60, 0); got != want {
		t.Fatalf("%d findings committed for the no_data fire, want the window's %d", got, want)
	}
	if body := scrape(t, tel); !strings.Contains(body, `hunt_runner_runs_total{kind="scheduled",outcome="no_data"} 1`) {
		t.Fatalf("runs metric lacks the no_data run:\n%s", grepLines(body, "hunt_runner_runs_total"))
	}
	// Rows arrive again.
	e.exec(fmt.Sprintf("INSERT INTO feed VALUES (toDateTime(%d, 'UTC'), 1)", f+60))
	runTo(f+120, hunt.RunSucceeded)
	if schedule.LatestFire(sched.Load(), h.IntervalSeconds(), h.OffsetSeconds()) != f+120 {
		t.Fatal("the pinned clock moved past the fires the test expects")
	}
}

// A declared source that does not exist fails the run: a missing feed is never zero findings.
func TestMissingSourceFailsTheRun(t *testing.T) {
	e := newEnv(t)
	h := hunt.Hunt{ID: "nosuch", Interval: 60 * time.Second, Offset: sec(e.mid(60)), Query: eventsQuery,
		Sources: []hunt.Source{{Table: "no_such_table", TimeColumn: "ts", MaxSilence: time.Minute}}}
	r := e.runner("pod-a", testSet("x", h), nil)
	e.tickUntil(r, "the run to fail", func() bool {
		return e.count("SELECT count() FROM hunt_runs WHERE hunt_id = ? AND status = 'failed'", h.ID) > 0
	})
	if _, ok := e.watermarkOf(h.ID); ok {
		t.Fatal("a run whose source does not exist committed")
	}
	var msg string
	e.scan(&msg, "SELECT error FROM hunt_runs WHERE hunt_id = ? AND status = 'failed' LIMIT 1", h.ID)
	if !strings.Contains(msg, "source check") {
		t.Fatalf("error %q, want the source check's", msg)
	}
}

func grepLines(body, prefix string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
