package runner

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// A hunt over its read budget ends over_budget on the server's word: nothing committed, one
// hunt_run record, held off rather than retried at every tick; its neighbour commits.
func TestOverBudgetHuntIsStoppedAndHeldOff(t *testing.T) {
	e := newEnv(t)
	big := hunt.Hunt{ID: "big", Interval: 60 * time.Second, Offset: sec(e.mid(60)), Query: eventsQuery, MaxRowsRead: 100}
	small := hunt.Hunt{ID: "small", Interval: 60 * time.Second, Offset: sec(e.mid(60)), Query: eventsQuery}
	var mu sync.Mutex
	var reports []RunReport
	r := e.runner("pod-a", testSet("x", big, small), func(o *Options) {
		o.OnRun = func(rep RunReport) { mu.Lock(); reports = append(reports, rep); mu.Unlock() }
	})
	e.tickUntil(r, "both hunts to run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reports) >= 2
	})
	if wm, ok := e.watermarkOf(small.ID); !ok || wm != e.latest(small) {
		t.Fatalf("the neighbour's watermark %d (%v), want %d: a hunt over budget stopped it", wm, ok, e.latest(small))
	}
	if _, ok := e.watermarkOf(big.ID); ok {
		t.Fatal("the hunt over its budget committed")
	}
	mu.Lock()
	for _, rep := range reports {
		if rep.HuntID == big.ID && (rep.Status != hunt.RunOverBudget || !overBudget(rep.Err)) {
			t.Errorf("big's run: %s, %v; want over_budget with the server's TOO_MANY_ROWS", rep.Status, rep.Err)
		}
	}
	mu.Unlock()
	// More ticks: the hold (one interval) keeps the hunt from being run again at once.
	for range 3 {
		e.tickAndWait(r)
	}
	if n := e.count("SELECT count() FROM hunt_runs WHERE hunt_id = ? AND status = 'over_budget'", big.ID); n != 1 {
		t.Fatalf("%d over_budget runs after more ticks, want 1: an over-budget hunt is not retried in a loop", n)
	}
	snap, err := e.store().Snapshot(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := snap.Hunts[big.ID]
	if st.Status != hunt.RunOverBudget || !st.HasRetryAfter || st.ConsecutiveFailures != 0 ||
		!strings.Contains(st.LastError, "hunt query") {
		t.Fatalf("big's state %+v, want over_budget with a retry_after and no failure counted", st)
	}
	if d := st.RetryAfter.Sub(snap.Now); d < 50*time.Second || d > big.Interval {
		t.Fatalf("retry_after is %s after now, want about the interval %s", d, big.Interval)
	}
}

// on_budget: skip commits the window as a recorded gap: the hunt moves on, the run shows
// over_budget, and none of its findings are committed.
func TestOverBudgetSkipRecordsAGap(t *testing.T) {
	e := newEnv(t)
	h := hunt.Hunt{ID: "skip", Interval: 60 * time.Second, Offset: sec(e.mid(60)), Query: eventsQuery, MaxRowsRead: 100,
		OnBudget: hunt.OnBudgetSkip}
	r := e.runner("pod-a", testSet("x", h), nil)
	e.tickUntil(r, "the skip to commit", func() bool { _, ok := e.watermarkOf(h.ID); return ok })
	if wm, _ := e.watermarkOf(h.ID); wm != e.latest(h) {
		t.Fatalf("watermark %d, want the fire %d", wm, e.latest(h))
	}
	fire := e.latest(h)
	if n := e.count("SELECT count() FROM hunt_runs WHERE hunt_id = ? AND status = 'gap' AND toUnixTimestamp(window_end) = ? AND toUnixTimestamp(window_start) = ?",
		h.ID, fire, fire-60); n != 1 {
		t.Fatalf("%d gap rows over the skipped window, want 1", n)
	}
	if n := e.count("SELECT count() FROM hunt_runs WHERE hunt_id = ? AND status = 'over_budget'", h.ID); n != 1 {
		t.Fatalf("%d over_budget rows, want 1", n)
	}
	if n := e.count("SELECT count() FROM hunt_findings_committed WHERE hunt_id = ?", h.ID); n != 0 {
		t.Fatalf("%d committed findings, want none", n)
	}
	snap, err := e.store().Snapshot(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st := snap.Hunts[h.ID]; st.Status != hunt.RunOverBudget || st.HasRetryAfter {
		t.Fatalf("state %+v, want over_budget without a hold: the hunt moved on", st)
	}
}
