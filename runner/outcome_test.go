package runner

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
	"github.com/hunt-runner/hunt-runner/internal/chtest"
	"github.com/hunt-runner/hunt-runner/store"
)

// matchCommitReadBack is Advance's read-back by run id (Store.Committed).
const matchCommitReadBack = `FROM \S*hunt_watermark\S* WHERE hunt_id IN \{ids:Array\(String\)\} AND run_id IN`

// A commit whose answer leaves its outcome unknown, or that the server refused before
// executing it, ends the way the row says: one commit, recorded succeeded and nothing else (no
// failed run, no failure count or backoff, no release row), its findings all visible.
//   - 319 (UNKNOWN_STATUS_OF_INSERT, a quorum timeout) after the commit landed: the read-back
//     finds the row.
//   - 289 (REPLICA_IS_NOT_IN_QUORUM) on the read-back: the outcome stays unknown; once the
//     attempt can no longer be running its row is read back, found, and the commit is not sent
//     again (a second attempt would be another batch, with another deduplication token).
//   - 286 (UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE) before executing, twice: retried with jitter;
//     on the findings insert too, which nothing wrote, so sending it again cannot double it.
func TestAmbiguousCommitEndsAsItsRow(t *testing.T) {
	srv := newPrivateEnv(t).srv
	for _, tc := range []struct {
		name    string
		rule    ctl.FaultRule
		commits int // commit statements sent
	}{
		{"319 after the commit landed", ctl.FaultRule{Name: "f", Kind: ctl.KindInsert, Match: matchCommit, Times: 1,
			Effect: ctl.FailAfter, Code: 319}, 1},
		{"289 on the read-back", ctl.FaultRule{Name: "f", Kind: ctl.KindRead, Match: matchCommitReadBack, Times: 1,
			Effect: ctl.FailBefore, Code: 289}, 1},
		{"286 before executing", ctl.FaultRule{Name: "f", Kind: ctl.KindInsert, Match: matchCommit, Times: 2,
			Effect: ctl.FailBefore, Code: 286}, 3},
		{"286 on the findings insert", ctl.FaultRule{Name: "f", Kind: ctl.KindInsert, Match: `INSERT INTO \S*hunt_findings`, Times: 2,
			Effect: ctl.FailBefore, Code: 286}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setupEnv(t, srv.NewDB(t))
			e.srv = srv
			h := hunt.Hunt{ID: "amb", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery, MaxFindings: hunt.MaxFindingsCeiling}
			r := e.runner("pod-a", testSet("x", h), nil)
			var mu sync.Mutex
			var reports []RunReport
			r.opts.OnRun = func(rep RunReport) { mu.Lock(); reports = append(reports, rep); mu.Unlock() }
			srv.SetFaults(t, tc.rule)
			// The claim may be lost on a loaded machine (acknowledged past the settle): tick
			// until a run has ended.
			e.tickUntil(r, "a run to end", func() bool { mu.Lock(); defer mu.Unlock(); return len(reports) > 0 })
			if e.firedCount("f") == 0 {
				t.Fatal("the fault never fired")
			}
			mu.Lock()
			if len(reports) != 1 || reports[0].Status != hunt.RunSucceeded {
				t.Errorf("outcomes %+v, want one success", reports)
			}
			mu.Unlock()
			commit := regexp.MustCompile(matchCommit)
			sent := 0
			for _, st := range srv.StatementLog(t) {
				if st.Database == e.db.Name && commit.MatchString(st.SQL) {
					sent++
				}
			}
			if sent != tc.commits {
				t.Errorf("%d commit statements sent, want %d", sent, tc.commits)
			}
			fire := e.latest(h)
			if n := e.count("SELECT count() FROM hunt_watermark WHERE hunt_id = 'amb'"); n != 1 {
				t.Errorf("%d commit rows, want 1", n)
			}
			if runs := e.runs("amb"); len(runs) != 1 || runs[0].Status != hunt.RunSucceeded {
				t.Errorf("hunt_runs %+v, want one succeeded and nothing else", runs)
			}
			if n := e.count("SELECT count() FROM hunt_state WHERE hunt_id = 'amb' AND (status = 'failed' OR consecutive_failures > 0 OR toUnixTimestamp64Milli(retry_after) > 0)"); n != 0 {
				t.Errorf("%d failure state rows, want none", n)
			}
			if n := e.count("SELECT count() FROM hunt_lease WHERE hunt_id = 'amb' AND lease_until <= claimed + INTERVAL 1 SECOND"); n != 0 {
				t.Errorf("%d release rows, want none", n)
			}
			if got, want := e.count("SELECT count() FROM hunt_findings_committed WHERE hunt_id = 'amb'"), e.eventsIn(fire-3600, fire, 0); got != want {
				t.Errorf("%d committed findings, want %d", got, want)
			}
		})
	}
}

// A commit that lands but is answered 9 s late: however the attempts and the lease's trusted
// deadline fall, the run is one success, recorded once, never a lost run beside its commit,
// and no second commit statement is sent (its row is read back first, once the first attempt
// can no longer be running; TestCommitAnsweredOnlyAfterTheTrustedDeadline pins the same
// read-back without depending on timing).
func TestCommitSettledPastTheTrustedDeadline(t *testing.T) {
	e := newPrivateEnv(t)
	h := hunt.Hunt{ID: "late", Interval: 3600 * time.Second, Offset: sec(e.mid(3600)), Query: eventsQuery, MaxFindings: hunt.MaxFindingsCeiling}
	r := e.runner("pod-a", testSet("x", h), nil)
	var mu sync.Mutex
	var reports []RunReport
	r.opts.OnRun = func(rep RunReport) { mu.Lock(); reports = append(reports, rep); mu.Unlock() }
	// The first attempt lands and is answered 9 s later; a second, which the read-back of the
	// first's row must prevent, would be held 9 s before it runs.
	e.srv.SetFaults(t,
		ctl.FaultRule{Name: "landed", Kind: ctl.KindInsert, Match: matchCommit, Times: 1, Effect: ctl.DelayAnswer, Delay: 9 * time.Second},
		ctl.FaultRule{Name: "held", Kind: ctl.KindInsert, Match: matchCommit, Times: 1, Effect: ctl.DelayStart, Delay: 9 * time.Second})
	e.tickUntil(r, "a run to end", func() bool { mu.Lock(); defer mu.Unlock(); return len(reports) > 0 })
	if e.firedCount("landed") == 0 {
		t.Fatal("the late answer never fired")
	}
	if n := e.firedCount("held"); n != 0 {
		t.Errorf("a second commit statement was sent after the first landed (%d)", n)
	}
	mu.Lock()
	if len(reports) != 1 || reports[0].Status != hunt.RunSucceeded {
		t.Errorf("outcomes %+v, want one success", reports)
	}
	mu.Unlock()
	if runs := e.runs("late"); len(runs) != 1 || runs[0].Status != hunt.RunSucceeded {
		t.Errorf("hunt_runs %+v, want one succeeded and nothing else", runs)
	}
}

// A late hunt_state row never undoes a newer fire's outcome: pod A commits fire N and its
// success state row is held on the way; pod B runs fire N+1, which fails, and records the
// failure and its backoff; A's row then lands (or is retried) and is refused by the fence on
// the fire: the hunt stays failed, backing off.
func TestLateStateRowKeepsTheNextFiresFailure(t *testing.T) {
	e := newPrivateEnv(t)
	var sched atomic.Int64
	sched.Store(e.now)
	h := hunt.Hunt{ID: "flip", Interval: 60 * time.Second, Offset: sec(e.mid(60))}
	fire := e.latest(h)
	// Fire N's window succeeds, fire N+1's fails.
	h.Query = fmt.Sprintf("SELECT throwIf({window_end:DateTime64(3)} > toDateTime64(%d, 3, 'UTC'), 'boom') AS x FROM numbers(1) "+
		"WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}", fire)
	hs := testSet("x", h)
	e.setWatermark(h.ID, fire-60)
	// An earlier failure, so that A's success is a health transition and writes a state row.
	if err := e.store().SetState(e.ctx, store.State{HuntID: h.ID, Status: hunt.RunFailed, LastError: "earlier", LastFire: fire - 60}); err != nil {
		t.Fatal(err)
	}
	e.srv.SetFaults(t, ctl.FaultRule{Name: "held", Kind: ctl.KindInsert, Match: `INSERT INTO \S*hunt_state`, Times: 1,
		Effect: ctl.DelayStart, Delay: 2 * time.Minute})
	mod := func(o *Options) {
		o.Lease = 30 * time.Second
		o.ScheduleClock = func(time.Time) time.Time { return time.Unix(sched.Load(), 0) }
	}
	a := e.runner("pod-a", hs, mod)
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		e.waitFor("A to commit fire N", func() bool {
			if err := a.tick(e.ctx); err != nil {
				t.Error(err)
			}
			a.exec.wg.Wait()
			wm, _ := e.watermarkOf(h.ID)
			return wm == fire
		})
	}()
	e.waitFor("A's success state row to be held", func() bool { return e.firedCount("held") > 0 })
	sched.Add(60)
	b := e.runner("pod-b", hs, mod)
	e.tickUntil(b, "B's failure of fire N+1", func() bool {
		return e.count("SELECT count() FROM hunt_run WHERE hunt_id = ? AND status = 'failed'", h.ID) > 0
	})
	e.srv.ClearFaults(t) // A's held row executes now
	<-aDone
	chtest.Eventually(t, time.Minute, "A's state write to end", func() bool {
		for _, st := range e.srv.StatementLog(t) {
			if st.Fault == "held" && !st.Done {
				return false
			}
		}
		return true
	})
	snap, err := e.store().Snapshot(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := snap.Hunts[h.ID]
	if st.Status != hunt.RunFailed || st.LastFire != fire+60 || st.ConsecutiveFailures == 0 || !st.HasRetryAfter {
		t.Fatalf("state %+v after A's late row of fire N, want fire N+1's failure with its backoff", st)
	}
}

// findingsHook calls during as a run stores its findings (after its query, before its commit).
type findingsHook struct {
	StateStore
	during func()
}

func (f findingsHook) InsertFindings(ctx context.Context, fs store.Findings) error {
	f.during()
	return f.StateStore.InsertFindings(ctx, fs)
}

// An overrun is its fire's own fact, on its commit row: it counts once (store.OverrunCounts),
// and a healthy hunt that overruns writes no hunt_state row for it. The next fire came due
// while the run was storing its findings.
func TestOverrunRidesOnTheCommitRow(t *testing.T) {
	e := newEnv(t)
	h := hunt.Hunt{ID: "over", Interval: 60 * time.Second, Offset: sec(e.mid(60)), Query: eventsQuery}
	r, sched := e.steppedRunner(h)
	var overrun atomic.Bool // one-shot: the next fire comes due during one run only
	r.useStore(findingsHook{StateStore: r.store, during: func() {
		if overrun.CompareAndSwap(true, false) {
			sched.Add(h.IntervalSeconds())
		}
	}})
	committed := func(fire int64) func() bool {
		return func() bool { wm, ok := e.watermarkOf(h.ID); return ok && wm >= fire }
	}
	// A loaded machine can acknowledge a claim too late to count: tick until the fire commits.
	e.tickUntil(r, "the first fire to commit", committed(e.latest(h)))
	overran := e.latest(h) + h.IntervalSeconds() // the next fire, whose run the one after overtakes
	states := func() uint64 { return e.count("SELECT count() FROM hunt_state WHERE hunt_id = ?", h.ID) }
	before := states()
	if before != 0 {
		t.Fatalf("%d hunt_state rows after the first success, want none: a hunt without a row is healthy", before)
	}
	sched.Add(h.IntervalSeconds())
	overrun.Store(true)
	e.tickUntil(r, "the overrunning fire to commit", committed(overran))
	if n := e.count("SELECT count() FROM hunt_watermark WHERE hunt_id = ? AND overran = 1 AND watermark = toDateTime(?, 'UTC')", h.ID, overran); n != 1 {
		t.Fatalf("%d commit rows of fire %d marked overran, want 1", n, overran)
	}
	if n := e.count("SELECT count() FROM hunt_watermark WHERE hunt_id = ? AND overran = 1", h.ID); n != 1 {
		t.Fatalf("%d overran commit rows, want 1: the first fire did not overrun", n)
	}
	if got := states(); got != before {
		t.Fatalf("%d hunt_state rows after the overrun, want %d: a healthy hunt overrunning writes none", got, before)
	}
	counts, err := store.New(e.db.Conn, e.db.Name).OverrunCounts(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if counts[h.ID] != 1 {
		t.Fatalf("overrun count %d, want 1", counts[h.ID])
	}
}
