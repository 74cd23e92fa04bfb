package runner

import (
	"fmt"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store"
)

// TestPlanAgreesWithSchedulePredicate ties the planner to schedule.IsDue, which the parity
// test in package schedule proves equal to the due SQL on the engine: what KEDA counts as due
// is exactly what a runner holding no hunts tries to claim, backoff (persisted retry_after)
// and requests for a fire still to come included. It also checks that the planner's fire and
// behind come from schedule (Owed, Behind).
func TestPlanAgreesWithSchedulePredicate(t *testing.T) {
	type hs = store.HuntState
	cases, dueNoBackoff, heldByBackoff := 0, 0, 0
	for _, iv := range []int64{1, 2, 30, 60, 3600} {
		for _, off := range []int64{0, iv / 2, iv - 1} {
			for _, now := range []int64{base, base + off - 1, base + off, base + off + 1, base + iv - 1, base + 7*iv + off} {
				latest := schedule.LatestFire(now, iv, off)
				var states []hs
				for _, wm := range []*int64{nil, ptr[int64](0), ptr(latest - 1), ptr(latest), ptr(latest + 1), ptr(latest + iv)} {
					for _, lease := range []*time.Time{nil, ptr(at(now - 1)), ptr(at(now)), ptr(at(now).Add(time.Millisecond)), ptr(at(now + 1))} {
						for _, req := range []*int64{nil, ptr(now), ptr(latest), ptr(now - 3*iv), ptr(now + 1)} {
							for _, retry := range []*time.Time{nil, ptr(at(0)), ptr(at(now).Add(-time.Millisecond)), ptr(at(now)), ptr(at(now).Add(time.Millisecond)), ptr(at(now + iv))} {
								var st hs
								if wm != nil {
									st.Watermark, st.HasWatermark = *wm, true
								}
								if lease != nil {
									// On the latest fire, or on the one before (spent once the
									// watermark reaches it), in turn.
									st.LeaseUntil, st.HasLease, st.LeaseFire = *lease, true, latest-iv*int64(len(states)%2)
								}
								if req != nil {
									st.RequestedFire, st.HasRequest = *req, true
								}
								if retry != nil {
									// The snapshot's reading of the column: 0 means none.
									st.RetryAfter, st.HasRetryAfter = *retry, retry.Unix() > 0
								}
								states = append(states, st)
							}
						}
					}
				}
				hunts := make([]hunt.Hunt, len(states))
				snapStates := make(map[string]hs, len(states))
				for i, st := range states {
					hunts[i] = testHunt(fmt.Sprintf("h%d", i), iv, off)
					snapStates[hunts[i].ID] = st
				}
				p := newPlanner(time.Second).plan(snap(now, snapStates), set(hunts...), time.Time{}, nil)
				planned := map[string]dueFire{}
				for _, d := range p.Due {
					planned[d.Hunt.ID] = d
				}
				for i, st := range states {
					row := schedule.Row{HuntID: hunts[i].ID, IntervalSeconds: uint32(iv), PhaseOffset: uint32(off), Enabled: true}
					// Built field by field here, not with the planner's converter, so that a
					// field the planner drops shows up as a difference.
					sst := schedule.State{
						Watermark: st.Watermark, HasWatermark: st.HasWatermark,
						LeaseUntilMs: st.LeaseUntil.UnixMilli(), LeaseFire: st.LeaseFire, HasLease: st.HasLease,
						RequestedFire: st.RequestedFire, HasRequest: st.HasRequest,
					}
					if st.HasRetryAfter {
						sst.RetryAfterMs, sst.HasRetryAfter = st.RetryAfter.UnixMilli(), true
					}
					want := schedule.IsDue(now, row, sst)
					d, got := planned[hunts[i].ID]
					if got != want {
						t.Errorf("I=%d P=%d now=base%+d state=%+v: planned %v, schedule.IsDue %v", iv, off, now-base, st, got, want)
					}
					if fire, requested, _ := schedule.Owed(now, row, sst); got && (d.Fire != fire || d.Requested != requested) {
						t.Errorf("I=%d P=%d now=base%+d state=%+v: planned fire %d requested %v, schedule.Owed %d %v", iv, off, now-base, st, d.Fire, d.Requested, fire, requested)
					}
					if b := schedule.Behind(now, row, sst); p.Behind[hunts[i].ID] != b {
						t.Errorf("I=%d P=%d now=base%+d state=%+v: behind %d, schedule.Behind %d", iv, off, now-base, st, p.Behind[hunts[i].ID], b)
					}
					if want && !st.HasRetryAfter {
						dueNoBackoff++
					}
					if !want && sst.BackingOff(now) && sst.LeaseFree(now) {
						heldByBackoff++
					}
					cases++
				}
			}
		}
	}
	if cases < 10000 || dueNoBackoff == 0 || heldByBackoff == 0 {
		t.Fatalf("only %d cases (%d due, %d held by backoff alone)", cases, dueNoBackoff, heldByBackoff)
	}
}

func ptr[T any](v T) *T { return &v }

// TestPersistedBackoffOnTheEngine: a failed run's backoff lives in hunt_state, so a peer that
// never saw the failure does not claim the hunt, and the due count (the KEDA backlog) leaves it
// out, until retry_after; from retry_after on, the count includes it again. The backoff is a
// minute (the failing pod's tick), far longer than the checks take, and its end is checked by
// evaluating the due SQL at retry_after rather than by waiting for it.
func TestPersistedBackoffOnTheEngine(t *testing.T) {
	e := newEnv(t)
	broken := hunt.Hunt{ID: "broken", Interval: 3600 * time.Second, Offset: 0,
		Query: "SELECT throwIf(number = 0, 'boom') AS x FROM numbers(1) WHERE {window_start:DateTime64(3)} < {window_end:DateTime64(3)}"}
	hs := testSet("set-1", broken)
	e.exec("INSERT INTO hunt_schedule (hunt_id, interval_seconds, phase_offset, enabled, config_hash, updated) SELECT 'broken', 3600, 0, 1, 'h', now64(6)")
	due := func(nowExpr string) uint64 { return e.count(store.DueCountSQL(e.db.Name, nowExpr)) }
	if n := due("now()"); n != 1 {
		t.Fatalf("before any run: due %d, want 1", n)
	}

	a := e.runner("pod-a", hs, func(o *Options) { o.Tick = time.Minute })
	e.tickAndWait(a)
	if br := e.runs("broken"); len(br) != 1 || br[0].Status != hunt.RunFailed {
		t.Fatalf("pod-a runs %+v, want one failed", br)
	}
	snap, err := store.New(e.db.Conn, e.db.Name).Snapshot(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := snap.Hunts["broken"]
	if !st.HasRetryAfter || !st.RetryAfter.After(snap.Now) || st.RetryAfter.Sub(snap.Now) > time.Minute {
		t.Fatalf("retry_after %v (set %v) at server now %v: want within the next minute", st.RetryAfter, st.HasRetryAfter, snap.Now)
	}
	if st.HasLease && st.LeaseUntil.After(snap.Now) {
		t.Fatalf("the failed run kept its lease until %v: the test would not isolate backoff", st.LeaseUntil)
	}

	// A peer honours it.
	b := e.runner("pod-b", hs, nil)
	e.tickAndWait(b)
	if n := len(e.runs("broken")); n != 1 {
		t.Fatalf("a peer ran a hunt in backoff: %d runs", n)
	}
	// The backlog, at the first whole second at which the released lease is over (the SQL's
	// now is whole seconds, so it sees a release up to a second late) and the backoff is not.
	free := (max(st.LeaseUntil.UnixMilli(), snap.Now.UnixMilli()) + 999) / 1000
	if free*1000 >= st.RetryAfter.UnixMilli() {
		t.Fatalf("lease until %v, retry_after %v: no second to check the backoff alone", st.LeaseUntil, st.RetryAfter)
	}
	if n := due(fmt.Sprintf("toDateTime(%d, 'UTC')", free)); n != 0 {
		t.Fatalf("the backlog counts a hunt in backoff: due %d", n)
	}
	// The bound, on the server: the SQL compares with a whole-second now, so a retry_after
	// inside a second holds the hunt through that second; at retry_after exactly it is due.
	ms := st.RetryAfter.UnixMilli()
	sec := ms / 1000
	atSec := func(s int64) uint64 { return due(fmt.Sprintf("toDateTime(%d, 'UTC')", s)) }
	wantAtSec := uint64(0)
	if ms%1000 == 0 {
		wantAtSec = 1
	}
	if n0, n1, n2 := atSec(sec-1), atSec(sec), atSec(sec+1); n0 != 0 || n1 != wantAtSec || n2 != 1 {
		t.Fatalf("retry_after %d ms: due at %d s, %d s, %d s = %d, %d, %d; want 0, %d, 1", ms, sec-1, sec, sec+1, n0, n1, n2, wantAtSec)
	}
}
