package runner

import (
	"container/heap"
	"math"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store"
)

// memory is what this runner last read of each loaded hunt's newest watermark, lease and
// hunt_state row, so that a tick reads from the server only the hunts that may be due
// (store.Store.SnapshotOf) rather than every loaded hunt, and plans only those. Each tick asks
// for the hunts that are new to it (never read), and for those whose fire has come by what it
// remembers (their watermark is below the latest fire) unless it remembers them in backoff;
// what a tick reads replaces what it remembered. Pauses, run-now requests and backfills are not
// remembered: the snapshot reads their tables in full every tick and names their hunts. A hunt
// remembered as caught up waits, ordered by the instant its next fire comes, and costs nothing
// until then: a tick's work follows the hunts that are owed, not the hunts that are loaded.
//
// It is safe because it can only be stale in one direction, and a stale answer is checked
// before it is acted on. Watermarks only rise, so a remembered watermark is at or below the
// true one: a hunt remembered as caught up is caught up, and one that a peer committed is
// remembered as owed, read, and corrected (one read, never a claim). A remembered backoff holds
// until its retry_after, and only a run writes hunt_state, which no pod may start in backoff.
// And nothing decided on what a tick read is trusted either: the claim re-checks on the server
// and its verify read is the authority on the lease and the window. A stale memory costs a
// read or a tick, never a second run.
//
// It is used by the tick's goroutine only.
type memory struct {
	hunts map[string]memo
	set   *hunt.Set // the set owed and later were built for
	// owed are the loaded hunts owed by what is remembered (or never read) at the last tick's
	// schedule instant; later are the others, by the instant they become owed. An entry of
	// later whose instant is not its hunt's memo's any more is stale, and skipped.
	owed  map[string]*hunt.Hunt
	later laterHeap
}

// memo is one hunt's remembered rows: only what the due predicate and Behind read, and owedAt,
// the schedule instant (epoch seconds) from which the hunt owes a fire: its next fire after
// the watermark, under the definition it was computed for.
type memo struct {
	watermark, leaseFire, leaseUntilMs, retryAfterMs, lastFire, owedAt int64
	failures                                                           uint32
	hasWatermark, hasLease, hasRetryAfter                              bool
}

func newMemory() *memory { return &memory{hunts: map[string]memo{}, owed: map[string]*hunt.Hunt{}} }

// planned is whether the runner plans h: enabled with a schedule.
func planned(h *hunt.Hunt) bool { return h.Enabled && h.IntervalSeconds() > 0 }

// load makes the memory follow set: on a new set it forgets hunts no longer loaded and
// re-orders the rest under their definitions now (an interval may have changed).
func (m *memory) load(set *hunt.Set) {
	if set == m.set {
		return
	}
	m.set = set
	m.owed, m.later = map[string]*hunt.Hunt{}, nil
	kept := make(map[string]memo, len(set.Hunts))
	for i := range set.Hunts {
		h := &set.Hunts[i]
		if !planned(h) {
			continue
		}
		k, ok := m.hunts[h.ID]
		if !ok {
			m.owed[h.ID] = h // never read
			continue
		}
		k.owedAt = owedAt(h, k)
		kept[h.ID] = k
		m.later = append(m.later, laterEntry{at: k.owedAt, id: h.ID})
	}
	m.hunts = kept
	heap.Init(&m.later)
}

// candidates are the loaded hunts whose rows a tick must read at server time now, the
// schedule read at at: never read, or owed by what is remembered and not in a remembered
// backoff.
func (m *memory) candidates(set *hunt.Set, at, now time.Time) []string {
	m.load(set)
	sec, nowMs := at.Unix(), now.UnixMilli()
	for len(m.later) > 0 && m.later[0].at <= sec {
		e := heap.Pop(&m.later).(laterEntry)
		if k, ok := m.hunts[e.id]; ok && k.owedAt == e.at {
			h, _ := set.Get(e.id)
			m.owed[e.id] = h
		}
	}
	out := make([]string, 0, len(m.owed))
	for id := range m.owed {
		if k, ok := m.hunts[id]; ok && k.hasRetryAfter && k.retryAfterMs > nowMs {
			continue // backoff: nothing can change before retry_after
		}
		out = append(out, id)
	}
	return out
}

// learn replaces what is remembered of every loaded hunt snap read, at the schedule instant at.
func (m *memory) learn(snap store.Snapshot, set *hunt.Set, at time.Time) {
	m.load(set)
	sec := at.Unix()
	for id, hs := range snap.Hunts {
		h, ok := set.Get(id)
		if !ok || !planned(h) { // the snapshot also names other sets' paused hunts
			continue
		}
		k := memoOf(hs)
		k.owedAt = owedAt(h, k)
		prev := m.hunts[id]
		m.hunts[id] = k
		if k.owedAt <= sec {
			m.owed[id] = h
			continue
		}
		// Every loaded hunt is owed or has an entry in later for its owedAt: one that was
		// owed (or never read) has none any more, and one whose instant moved a stale one.
		_, wasOwed := m.owed[id]
		delete(m.owed, id)
		if wasOwed || prev.owedAt != k.owedAt {
			heap.Push(&m.later, laterEntry{at: k.owedAt, id: id})
		}
	}
}

// attention are the hunts a tick plans: those owed by memory and those snap read. Every other
// loaded hunt is caught up by what is remembered (no pause, no request: those are read), so a
// plan of it would find nothing owed and nothing behind.
func (m *memory) attention(snap store.Snapshot, set *hunt.Set) []*hunt.Hunt {
	m.load(set)
	out := make([]*hunt.Hunt, 0, len(m.owed)+len(snap.Hunts))
	for _, h := range m.owed {
		out = append(out, h)
	}
	for id := range snap.Hunts {
		if _, ok := m.owed[id]; ok {
			continue
		}
		if h, ok := set.Get(id); ok && planned(h) {
			out = append(out, h)
		}
	}
	return out
}

// view is the state of each hunt a tick plans on: as snap read it, or as remembered.
func (m *memory) view(snap store.Snapshot) func(string) store.HuntState {
	return func(id string) store.HuntState {
		if hs, ok := snap.Hunts[id]; ok {
			return hs
		}
		return m.hunts[id].state()
	}
}

// owedAt is the schedule instant from which h owes a fire by k: the first fire after its
// watermark (at that instant the watermark is below the latest fire); with no watermark, now.
func owedAt(h *hunt.Hunt, k memo) int64 {
	if !k.hasWatermark {
		return math.MinInt64
	}
	return schedule.NextFire(k.watermark, h.IntervalSeconds(), h.OffsetSeconds())
}

func memoOf(hs store.HuntState) memo {
	k := memo{watermark: hs.Watermark, hasWatermark: hs.HasWatermark,
		leaseFire: hs.LeaseFire, hasLease: hs.HasLease, lastFire: hs.LastFire, failures: hs.ConsecutiveFailures,
		hasRetryAfter: hs.HasRetryAfter}
	if hs.HasLease {
		k.leaseUntilMs = hs.LeaseUntil.UnixMilli()
	}
	if hs.HasRetryAfter {
		k.retryAfterMs = hs.RetryAfter.UnixMilli()
	}
	return k
}

// state is k as a snapshot entry with no pause and no request (a hunt that has either is
// read every tick).
func (k memo) state() store.HuntState {
	hs := store.HuntState{Watermark: k.watermark, HasWatermark: k.hasWatermark,
		LeaseFire: k.leaseFire, HasLease: k.hasLease, LastFire: k.lastFire, ConsecutiveFailures: k.failures,
		HasRetryAfter: k.hasRetryAfter}
	if k.hasLease {
		hs.LeaseUntil = time.UnixMilli(k.leaseUntilMs)
	}
	if k.hasRetryAfter {
		hs.RetryAfter = time.UnixMilli(k.retryAfterMs)
	}
	return hs
}

// laterEntry is a hunt caught up until at (schedule seconds).
type laterEntry struct {
	at int64
	id string
}

// laterHeap orders hunts by the instant they become owed, soonest first (container/heap).
type laterHeap []laterEntry

func (h laterHeap) Len() int           { return len(h) }
func (h laterHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h laterHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *laterHeap) Push(x any)        { *h = append(*h, x.(laterEntry)) }
func (h *laterHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
