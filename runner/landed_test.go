package runner

import (
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
)

// A commit that lands while its lease is trusted, but whose answer, and every retry's, comes
// only after the trusted deadline, is a success: once no attempt can still be running, the
// run's row is read back by id before any later attempt, so before anything records the run
// lost (committer.commit). Nothing
// here races the clock: no answer to a commit arrives before the test ends (the server holds
// each one for longer than the whole lease), so the trust always runs out with the outcome
// unknown, and the row is always there, since the server executes each commit at once.
func TestCommitAnsweredOnlyAfterTheTrustedDeadline(t *testing.T) {
	e := newPrivateEnv(t)
	h := hunt.Hunt{ID: "unanswered", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery,
		MaxFindings: hunt.MaxFindingsCeiling}
	// A 10 s lease: a loaded server has seconds to run the first commit before its fence's
	// "the lease outlives the statement" fails, and the test waits about one lease.
	r := e.runner("pod-a", testSet("x", h), func(o *Options) { o.Lease = 10 * time.Second })
	var mu sync.Mutex
	var reports []RunReport
	r.opts.OnRun = func(rep RunReport) { mu.Lock(); reports = append(reports, rep); mu.Unlock() }
	e.srv.SetFaults(t, ctl.FaultRule{Name: "unanswered", Kind: ctl.KindInsert, Match: matchCommit,
		Effect: ctl.DelayAnswer, Delay: 2 * time.Minute})
	e.tickUntil(r, "a run to end", func() bool { mu.Lock(); defer mu.Unlock(); return len(reports) > 0 })

	// The premise: commits were sent, executed, and none was answered, so only a read-back
	// can have found the run's row.
	commit := regexp.MustCompile(matchCommit)
	sent := 0
	for _, st := range e.srv.StatementLog(t) {
		if st.Kind != ctl.KindInsert || !commit.MatchString(st.SQL) {
			continue
		}
		sent++
		if st.Fault != "unanswered" || !st.Executed || st.Done {
			t.Fatalf("commit statement %d: fault %q, executed %v, answered %v; want every commit executed and held unanswered",
				st.Seq, st.Fault, st.Executed, st.Done)
		}
	}
	if sent == 0 {
		t.Fatal("no commit was sent")
	}

	mu.Lock()
	if len(reports) != 1 || reports[0].Status != hunt.RunSucceeded || reports[0].Err != nil {
		t.Errorf("outcomes %+v, want one success: the commit landed", reports)
	}
	mu.Unlock()
	if n := e.count("SELECT count() FROM hunt_watermark WHERE hunt_id = ?", h.ID); n != 1 {
		t.Errorf("%d commit rows, want 1 (%d attempts sent)", n, sent)
	}
	if runs := e.runs(h.ID); len(runs) != 1 || runs[0].Status != hunt.RunSucceeded {
		t.Errorf("hunt_runs %+v, want one succeeded and nothing else (no lost run beside its commit)", runs)
	}
	if n := e.count("SELECT count() FROM hunt_lease WHERE hunt_id = ? AND lease_until <= claimed + INTERVAL 1 SECOND", h.ID); n != 0 {
		t.Errorf("%d release rows, want none: the commit spent the lease", n)
	}
	fire := e.latest(h)
	if got, want := e.count("SELECT count() FROM hunt_findings_committed WHERE hunt_id = ?", h.ID), e.eventsIn(fire-3600, fire, 0); got != want {
		t.Errorf("%d committed findings, want %d", got, want)
	}
}
