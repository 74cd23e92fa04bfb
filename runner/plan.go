package runner

import (
	"sort"
	"sync"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store"
)

// dueFire is one fire the tick will try to claim.
type dueFire struct {
	Hunt      *hunt.Hunt
	Fire      int64
	Requested bool           // a run-now request, not a scheduled fire
	Overdue   int64          // seconds since the oldest fire this run settles became owed
	FirstRun  bool           // the hunt has never committed a fire
	Backfill  *backfillChunk // a backfill's chunk (backfill.go), claimed under its own key
}

// plan is the outcome of planning one tick.
type plan struct {
	Due     []dueFire        // most overdue first
	Behind  map[string]int64 // hunt id → seconds behind (0 or absent when caught up)
	Leased  int              // hunts owed but leased by someone (peer or an earlier fire)
	BackOff int              // hunts owed but in backoff
	Paused  int              // hunts owed but paused
	Busy    int              // hunts owed but already held by this runner
}

// planner turns a snapshot into due fires. The due decision and its arithmetic are package
// schedule's (the predicate the due SQL shares); the planner adds what only a runner knows:
// which hunts it already holds, and which fire to claim and in what order. Overruns are counted
// by the run that commits the fire (Runner.record), once for the cluster. Backoff is not its own: a failed run persists retry_after in hunt_state and
// every pod reads it back in the snapshot. It does no I/O and reads no clock: server time comes
// in the snapshot, so tests drive it deterministically.
//
// It also keeps what the last plan left behind, which metrics read between ticks: mu guards
// that, and only that.
type planner struct {
	tick time.Duration

	mu     sync.Mutex
	behind map[string]int64 // from the last plan: the hunts it planned (the others caught up)
	set    *hunt.Set        // the set last planned
}

func newPlanner(tick time.Duration) *planner {
	return &planner{tick: tick, behind: map[string]int64{}}
}

// remember keeps p's view of how far behind each hunt of set is, for metrics.
func (pl *planner) remember(p plan, set *hunt.Set) {
	pl.mu.Lock()
	pl.behind, pl.set = p.Behind, set
	pl.mu.Unlock()
}

// last is the last plan's behind map (not to be modified) and the hash of its set.
func (pl *planner) last() (behind map[string]int64, setHash string) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.set != nil {
		setHash = pl.set.Hash
	}
	return pl.behind, setHash
}

// behindOf is how far behind the last plan left hunt id, and whether the runner plans it at
// all: a planned hunt the plan left out was caught up.
func (pl *planner) behindOf(id string) (int64, bool) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if s, ok := pl.behind[id]; ok {
		return s, true
	}
	if pl.set == nil {
		return 0, false
	}
	h, ok := pl.set.Get(id)
	return 0, ok && planned(h)
}

// backoffRule is the backoff as hunt_state derives it (store.State): the n-th consecutive
// failure waits base × 2^(n−1), at most limit.
func backoffRule(tick time.Duration, interval int64) (base, limit time.Duration) {
	return tick, max(time.Duration(interval)*time.Second, tick)
}

// backoffDelay is how long a hunt waits after its n-th consecutive failure: tick, 2×tick, 4×tick …
// capped at the hunt's interval (never less than one tick); backoffRule in Go.
func backoffDelay(tick time.Duration, interval int64, failures uint32) time.Duration {
	_, limit := backoffRule(tick, interval)
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

// scheduleRow is h as the predicate sees it: a loaded hunt is enabled.
func scheduleRow(h *hunt.Hunt) schedule.Row {
	return schedule.Row{HuntID: h.ID, IntervalSeconds: uint32(h.IntervalSeconds()), PhaseOffset: uint32(h.OffsetSeconds()), Enabled: true}
}

// scheduleState is the predicate's view of a snapshot entry. A hunt that never committed but
// has failed owes at least from the fire its last failure tried: that is the oldest owed fire
// the snapshot knows of (the fire it was first owed is not persisted).
func scheduleState(st store.HuntState) schedule.State {
	out := st.ScheduleState()
	if !st.HasWatermark && st.ConsecutiveFailures > 0 && st.LastFire > 0 {
		out.FirstOwed, out.HasFirstOwed = st.LastFire, true
	}
	return out
}

// plan computes the due fires at the snapshot's server time, the schedule read at at (which
// fire is owed, and how far behind; zero: the snapshot's time, see Options.ScheduleClock).
// busy reports hunts this runner already holds (queued or running); it may be nil. The local
// clock is not read.
func (p *planner) plan(snap store.Snapshot, set *hunt.Set, at time.Time, busy func(string) bool) plan {
	return p.planOn(snap.Now, func(id string) store.HuntState { return snap.Hunts[id] }, set, set.Enabled(), at, busy)
}

// planOn is plan at server time serverNow over hunts, some of set's enabled hunts, with the
// state of each as state gives it (a snapshot's entry, or the runner's memory of it). The
// hunts left out must be caught up by their state: they would be neither due nor behind, so
// Behind has no entry for them.
func (p *planner) planOn(serverNow time.Time, state func(string) store.HuntState, set *hunt.Set, hunts []*hunt.Hunt,
	at time.Time, busy func(string) bool) plan {
	if at.IsZero() {
		at = serverNow
	}
	now, nowMs := at.Unix(), serverNow.UnixMilli()
	out := plan{Behind: make(map[string]int64, len(hunts))}
	for _, h := range hunts {
		if h.IntervalSeconds() <= 0 {
			continue
		}
		hs := state(h.ID)
		row, st := scheduleRow(h), scheduleState(hs)
		behind := schedule.Behind(now, row, st)
		out.Behind[h.ID] = behind
		fire, requested, owed := schedule.Owed(now, row, st)
		if !owed {
			continue
		}
		df := dueFire{Hunt: h, Fire: fire, Requested: requested, Overdue: behind, FirstRun: !hs.HasWatermark}
		if requested {
			df.Overdue = now - fire
		}
		if busy != nil && busy(h.ID) {
			out.Busy++
			continue
		}
		// On the snapshot's exact server time: the due SQL compares with now() in whole
		// seconds, so for up to a second after a lease or backoff ends it still counts the
		// hunt as held while the runner already sees it free; the runner is never the stricter.
		if schedule.DueOn(now, nowMs, row, st) {
			out.Due = append(out.Due, df)
			continue
		}
		if st.PausedAt(nowMs) {
			out.Paused++
			continue
		}
		if !st.LeaseFreeAt(nowMs) {
			out.Leased++
			continue
		}
		out.BackOff++
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
