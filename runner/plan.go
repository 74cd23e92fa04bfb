package runner

import (
	"sort"
	"sync"
	"time"

	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/watermark"
)

// dueFire is one fire the tick will try to claim.
type dueFire struct {
	Hunt      *Hunt
	Fire      int64
	Requested bool  // a run-now request, not a scheduled fire
	Overdue   int64 // seconds since the oldest fire this run settles became owed
	FirstRun  bool  // the hunt has never committed a fire
}

// plan is the outcome of planning one tick.
type plan struct {
	Due      []dueFire        // most overdue first
	Overruns []dueFire        // newly seen overruns (each (hunt, fire) once)
	Behind   map[string]int64 // hunt id → seconds behind (0 when caught up)
	Leased   int              // hunts owed but leased by someone (peer or an earlier fire)
	BackOff  int              // hunts owed but in backoff
	Busy     int              // hunts owed but already held by this runner
}

// planner turns a snapshot into due fires. It keeps the little state that must outlive a tick:
// per-hunt backoff and which overruns were already counted. It does no I/O and reads no clock:
// server time comes in the snapshot and local time (for backoff) as an argument, so tests drive
// it deterministically.
type planner struct {
	mu          sync.Mutex // plan runs on the tick goroutine, failed/succeeded on run goroutines
	tick        time.Duration
	backoff     map[string]time.Time // hunt id → local time before which it is not claimed
	overrunSeen map[string]int64     // hunt id → newest fire already counted as an overrun
}

func newPlanner(tick time.Duration) *planner {
	return &planner{tick: tick, backoff: map[string]time.Time{}, overrunSeen: map[string]int64{}}
}

// backoffDelay is how long a hunt waits after its n-th consecutive failure: tick, 2×tick, 4×tick …
// capped at the hunt's interval (never less than one tick).
func backoffDelay(tick time.Duration, interval int64, failures uint32) time.Duration {
	limit := time.Duration(interval) * time.Second
	if limit < tick {
		limit = tick
	}
	if failures == 0 {
		return 0
	}
	d := tick
	for i := uint32(1); i < failures && d < limit; i++ {
		d *= 2
	}
	if d > limit {
		d = limit
	}
	return d
}

// failed starts (or extends) the backoff of a hunt after a failed run.
func (p *planner) failed(h *Hunt, failures uint32, localNow time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := backoffDelay(p.tick, h.Interval, failures)
	p.backoff[h.ID] = localNow.Add(d)
	return d
}

// succeeded clears a hunt's backoff.
func (p *planner) succeeded(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.backoff, id)
}

// plan computes the due fires at the snapshot's server time. busy reports hunts this runner
// already holds (queued or running); it may be nil.
func (p *planner) plan(snap watermark.Snapshot, set *HuntSet, localNow time.Time, busy func(string) bool) plan {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := snap.Now.Unix()
	out := plan{Behind: make(map[string]int64, len(set.Hunts))}
	loaded := make(map[string]struct{}, len(set.Hunts))
	for i := range set.Hunts {
		h := &set.Hunts[i]
		loaded[h.ID] = struct{}{}
		if h.Interval <= 0 {
			continue
		}
		st := snap.Hunts[h.ID]
		latest := schedule.LatestFire(now, h.Interval, h.Offset)
		df := dueFire{Hunt: h}
		switch {
		case !st.HasWatermark || st.Watermark < latest:
			oldest := latest
			if st.HasWatermark {
				oldest = schedule.NextFire(st.Watermark, h.Interval, h.Offset)
				if oldest > latest {
					oldest = latest
				}
			}
			df.Fire, df.Overdue, df.FirstRun = latest, now-oldest, !st.HasWatermark
			out.Behind[h.ID] = now - oldest
		case st.HasRequest && st.RequestedFire > st.Watermark && st.RequestedFire <= now:
			// Nothing scheduled is owed: run the request over [watermark, request).
			df.Fire, df.Requested, df.Overdue = st.RequestedFire, true, now-st.RequestedFire
			out.Behind[h.ID] = 0
		default:
			out.Behind[h.ID] = 0
			continue
		}
		if busy != nil && busy(h.ID) {
			out.Busy++
			continue
		}
		// Freeness against the snapshot's exact server time. The due SQL compares with now()
		// in whole seconds, so for up to a second after a release it still counts the hunt as
		// leased while the runner already sees it free; the runner is never the stricter one.
		if st.HasLease && st.LeaseUntil.After(snap.Now) {
			out.Leased++
			// A prior fire still running while a newer one is owed is an overrun; a live lease on
			// the very fire we owe is a healthy peer doing its job.
			if st.LeaseFire < df.Fire && !df.Requested && p.overrunSeen[h.ID] < df.Fire {
				p.overrunSeen[h.ID] = df.Fire
				out.Overruns = append(out.Overruns, df)
			}
			continue
		}
		if until, ok := p.backoff[h.ID]; ok {
			if localNow.Before(until) {
				out.BackOff++
				continue
			}
		}
		out.Due = append(out.Due, df)
	}
	// Forget state of hunts that are no longer loaded so removed hunts do not leak memory.
	for id := range p.backoff {
		if _, ok := loaded[id]; !ok {
			delete(p.backoff, id)
		}
	}
	for id := range p.overrunSeen {
		if _, ok := loaded[id]; !ok {
			delete(p.overrunSeen, id)
		}
	}
	sort.SliceStable(out.Due, func(i, j int) bool {
		a, b := out.Due[i], out.Due[j]
		// A hunt that never ran goes first: its overdue time restarts with every interval, so
		// under load it would otherwise lose to hunts already behind, forever.
		if a.FirstRun != b.FirstRun {
			return a.FirstRun
		}
		if a.Overdue != b.Overdue {
			return a.Overdue > b.Overdue
		}
		if a.Requested != b.Requested {
			return !a.Requested
		}
		return a.Hunt.ID < b.Hunt.ID
	})
	return out
}
