package runner

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
)

// Runs that finish while a commit is in flight commit together, in one compare-and-set
// (store.Store.AdvanceAll), each on its own fence: eight runs, the first commit held 3 s
// before it starts, commit in fewer than eight statements, each exactly once.
func TestCommitsOfRunsFinishingTogetherGoOutTogether(t *testing.T) {
	e := newPrivateEnv(t)
	var hunts []hunt.Hunt
	for i := range 8 {
		hunts = append(hunts, hunt.Hunt{ID: fmt.Sprintf("together-%d", i), Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery})
	}
	r := e.runner("pod-a", testSet("x", hunts...), func(o *Options) { o.Concurrency, o.MaxQueued, o.Lease = 8, 8, 30*time.Second })
	e.srv.SetFaults(t, ctl.FaultRule{Name: "held", Kind: ctl.KindInsert, Match: matchCommit, Times: 1, Effect: ctl.DelayStart, Delay: 3 * time.Second})
	// A claim may be lost on a loaded machine (acknowledged past the settle): tick until all
	// eight have committed.
	e.tickUntil(r, "eight commits", func() bool { return e.count("SELECT uniqExact(hunt_id) FROM hunt_watermark") == 8 })
	if e.firedCount("held") == 0 {
		t.Fatal("the first commit was never held")
	}
	if n := e.count("SELECT count() FROM hunt_watermark"); n != 8 {
		t.Fatalf("%d commit rows, want 8 (one per run)", n)
	}
	commit := regexp.MustCompile(matchCommit)
	sent := 0
	for _, st := range e.srv.StatementLog(t) {
		if st.Database == e.db.Name && commit.MatchString(st.SQL) {
			sent++
		}
	}
	if sent >= 8 {
		t.Fatalf("%d commit statements for 8 runs: the runs finishing behind the held one were not batched", sent)
	}
	t.Logf("8 runs committed in %d statements", sent)
}
