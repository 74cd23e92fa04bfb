package runner

import (
	"sync"
	"testing"

	"github.com/hunt-runner/hunt-runner/internal/chlocal/ctl"
)

// matchCommitReadBack is Advance's read-back by run id (Store.Committed).
const matchCommitReadBack = `count\(\) FROM \S*hunt_watermark\S* WHERE hunt_id = \{h:String\} AND run_id`

// A commit whose answer leaves its outcome unknown, or that the server refused before
// executing it, ends the way the row says: one commit, recorded succeeded and nothing else (no
// failed run, no failure count or backoff, no release row), its findings all visible.
//   - 319 (UNKNOWN_STATUS_OF_INSERT, a quorum timeout) after the commit landed: the read-back
//     finds the row.
//   - 289 (REPLICA_IS_NOT_IN_QUORUM) on the read-back: the outcome stays unknown, the commit is
//     sent again, refused by its own row (the run already committed), and read back.
//   - 286 (UNSATISFIED_QUORUM_FOR_PREVIOUS_WRITE) before executing, twice: retried with jitter.
func TestAmbiguousCommitEndsAsItsRow(t *testing.T) {
	srv := newPrivateEnv(t).srv
	for _, tc := range []struct {
		name string
		rule ctl.FaultRule
	}{
		{"319 after the commit landed", ctl.FaultRule{Name: "f", Kind: ctl.KindInsert, Match: matchCommit, Times: 1,
			Effect: ctl.FailAfter, Code: 319}},
		{"289 on the read-back", ctl.FaultRule{Name: "f", Kind: ctl.KindRead, Match: matchCommitReadBack, Times: 1,
			Effect: ctl.FailBefore, Code: 289}},
		{"286 before executing", ctl.FaultRule{Name: "f", Kind: ctl.KindInsert, Match: matchCommit, Times: 2,
			Effect: ctl.FailBefore, Code: 286}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setupEnv(t, srv.NewDB(t))
			e.srv = srv
			h := Hunt{ID: "amb", Interval: 3600, Offset: e.mid(3600), Query: eventsQuery, MaxFindings: MaxFindingsCeiling}
			r := e.runner("pod-a", &HuntSet{Hash: "x", Hunts: []Hunt{h}}, nil)
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
			if len(reports) != 1 || reports[0].Status != StatusSucceeded {
				t.Errorf("outcomes %+v, want one success", reports)
			}
			mu.Unlock()
			fire := e.latest(h)
			if n := e.count("SELECT count() FROM hunt_watermark WHERE hunt_id = 'amb'"); n != 1 {
				t.Errorf("%d commit rows, want 1", n)
			}
			if runs := e.runs("amb"); len(runs) != 1 || runs[0].Status != StatusSucceeded {
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
