package runner

import (
	"fmt"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/watermark"
)

// TestPlanAgreesWithSchedulePredicate ties the planner to schedule.IsDue, which the parity
// test in package schedule proves equal to the due SQL on the engine: what KEDA counts as due
// is exactly what a runner with no backoff and no held hunts tries to claim. Requests lie at or
// before now (trigger refuses future fires).
func TestPlanAgreesWithSchedulePredicate(t *testing.T) {
	type hs = watermark.HuntState
	cases := 0
	for _, iv := range []int64{1, 2, 30, 60, 3600} {
		for _, off := range []int64{0, iv / 2, iv - 1} {
			for _, now := range []int64{base, base + off - 1, base + off, base + off + 1, base + iv - 1, base + 7*iv + off} {
				latest := schedule.LatestFire(now, iv, off)
				var states []hs
				for _, wm := range []*int64{nil, ptr[int64](0), ptr(latest - 1), ptr(latest), ptr(latest + 1), ptr(latest + iv)} {
					for _, lease := range []*time.Time{nil, ptr(at(now - 1)), ptr(at(now)), ptr(at(now).Add(time.Millisecond)), ptr(at(now + 1))} {
						for _, req := range []*int64{nil, ptr(now), ptr(latest), ptr(now - 3*iv)} {
							var st hs
							if wm != nil {
								st.Watermark, st.HasWatermark = *wm, true
							}
							if lease != nil {
								st.LeaseUntil, st.HasLease, st.LeaseFire = *lease, true, latest
							}
							if req != nil {
								st.RequestedFire, st.HasRequest = *req, true
							}
							states = append(states, st)
						}
					}
				}
				hunts := make([]Hunt, len(states))
				snapStates := make(map[string]hs, len(states))
				for i, st := range states {
					hunts[i] = hunt(fmt.Sprintf("h%d", i), iv, off)
					snapStates[hunts[i].ID] = st
				}
				p := newPlanner(time.Second).plan(snap(now, snapStates), set(hunts...), time.Unix(0, 0), nil)
				planned := map[string]bool{}
				for _, d := range p.Due {
					planned[d.Hunt.ID] = true
				}
				for i, st := range states {
					row := schedule.Row{HuntID: hunts[i].ID, IntervalSeconds: uint32(iv), PhaseOffset: uint32(off), Enabled: true}
					want := schedule.IsDue(now, row, schedule.State{
						Watermark: st.Watermark, HasWatermark: st.HasWatermark,
						LeaseUntilMs: st.LeaseUntil.UnixMilli(), HasLease: st.HasLease,
						RequestedFire: st.RequestedFire, HasRequest: st.HasRequest,
					})
					if planned[hunts[i].ID] != want {
						t.Errorf("I=%d P=%d now=base%+d state=%+v: planned %v, schedule.IsDue %v", iv, off, now-base, st, planned[hunts[i].ID], want)
					}
					cases++
				}
			}
		}
	}
	if cases < 10000 {
		t.Fatalf("only %d cases", cases)
	}
}

func ptr[T any](v T) *T { return &v }
