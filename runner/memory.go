package runner

import (
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store"
)

// memory is what this runner last read of each loaded hunt's newest watermark, lease and
// hunt_state row, so that a tick reads from the server only the hunts that may be due
// (store.Store.SnapshotOf) rather than every loaded hunt. Each tick asks for the hunts that are
// new to it (never read), and for those whose fire has come by what it remembers (their
// watermark is below the latest fire) unless it remembers them in backoff; what a tick reads
// replaces what it remembered. Pauses, run-now requests and backfills are not remembered: the
// snapshot reads their tables in full every tick and names their hunts.
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
	set   *hunt.Set // the set the entries were last pruned to
}

// memo is one hunt's remembered rows: only what the due predicate and Behind read.
type memo struct {
	watermark, leaseFire, leaseUntilMs, retryAfterMs, lastFire int64
	failures                                                   uint32
	hasWatermark, hasLease, hasRetryAfter                      bool
}

func newMemory() *memory { return &memory{hunts: map[string]memo{}} }

// candidates are the loaded hunts whose rows a tick must read at server time now, the
// schedule read at at: new to the memory, or owed by what it remembers and not in a
// remembered backoff.
func (m *memory) candidates(set *hunt.Set, at, now time.Time) []string {
	var out []string
	sec, nowMs := at.Unix(), now.UnixMilli()
	for i := range set.Hunts {
		h := &set.Hunts[i]
		if !h.Enabled || h.IntervalSeconds() <= 0 {
			continue
		}
		k, ok := m.hunts[h.ID]
		if !ok {
			out = append(out, h.ID)
			continue
		}
		st := scheduleState(k.state())
		if _, _, owed := schedule.Owed(sec, scheduleRow(h), st); owed && !st.BackingOffAt(nowMs) {
			out = append(out, h.ID)
		}
	}
	return out
}

// learn replaces what is remembered of every hunt snap read, and forgets hunts no longer
// loaded when the set changed.
func (m *memory) learn(snap store.Snapshot, set *hunt.Set) {
	for id, hs := range snap.Hunts {
		if h, ok := set.Get(id); ok && h.Enabled { // the snapshot also names other sets' paused hunts
			m.hunts[id] = memoOf(hs)
		}
	}
	if set == m.set {
		return
	}
	m.set = set
	for id := range m.hunts {
		if h, ok := set.Get(id); !ok || !h.Enabled {
			delete(m.hunts, id)
		}
	}
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
