package runner

import (
	"math"
	"sort"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/lease"
	"github.com/hunt-runner/hunt-runner/schedule"
	"github.com/hunt-runner/hunt-runner/store"
)

// Backfills replay a past range of a hunt in chunks (hunt-runner backfill). A backfill's
// chunks are claimed and committed under its own coordination key (store.Backfill.Key:
// "<hunt>#backfill-<id>") in hunt_lease and hunt_watermark, so the claim protocol and the
// compare-and-set commit apply unchanged, and the live lease and watermark are never read or
// written by them: the key's watermark is the backfill's progress, moving from the range's start
// to its end one chunk at a time, and the chunks tile the range exactly because each starts
// where the key's verified watermark stands. Findings are stored under the hunt itself, with
// the chunk's run id (hunt_findings_committed maps the key back to the hunt), and each chunk's
// audit row has kind 'backfill'.
//
// A backfill ranks below live fires: it takes only the claim capacity a tick leaves after
// them, at most backfillShare of the run slots across all backfills, and its queued chunks
// wait behind queued live fires. A failed chunk backs off like a hunt (retry_after in
// hunt_state, under the key, so every pod honours it) without touching the hunt's own health.
// A paused hunt's backfills wait too.

// backfillChunk is the backfill a won fire belongs to.
type backfillChunk struct {
	ID   string
	Key  string
	From int64 // the backfill's range start: the first chunk's start
}

// backfillShare is how many runs of this pod backfills may hold at once: a quarter of the
// slots, at least one.
func backfillShare(concurrency int) int { return max(1, concurrency/4) }

// key is the lease key a due fire is claimed under: the hunt's id, or its backfill's key.
func (d dueFire) key() string {
	if d.Backfill != nil {
		return d.Backfill.Key
	}
	return d.Hunt.ID
}

// key is the lease key of a job (see dueFire.key); the executor holds jobs by it, so a backfill
// chunk in flight never makes the hunt's live fires look busy.
func (j *job) key() string {
	if j.backfill != nil {
		return j.backfill.Key
	}
	return j.hunt.ID
}

// planBackfills returns the next chunk of up to room backfills, oldest request first, for hunts
// that are loaded and not paused, whose key is free, not in backoff and not held here.
func (r *Runner) planBackfills(snap store.Snapshot, set *hunt.Set, room int) []dueFire {
	if len(snap.Backfills) == 0 || room <= 0 {
		return nil
	}
	room = min(room, backfillShare(r.opts.Concurrency)-r.exec.heldBackfills())
	nowMs := snap.Now.UnixMilli()
	var out []dueFire
	for _, b := range snap.Backfills {
		if len(out) >= room {
			break
		}
		h := enabledHunt(set, b.HuntID)
		if h == nil || snap.Hunts[b.HuntID].PausedAt(snap.Now) || r.exec.isHeld(b.Key()) {
			continue
		}
		st := b.Progress.ScheduleState()
		if !st.LeaseFreeAt(nowMs) || st.BackingOffAt(nowMs) {
			continue
		}
		start := b.Done()
		if start >= b.To {
			continue
		}
		out = append(out, dueFire{Hunt: h, Fire: min(start+b.Chunk, b.To),
			Backfill: &backfillChunk{ID: b.ID, Key: b.Key(), From: b.From}})
	}
	return out
}

// enabledHunt returns the loaded hunt id if it is enabled (the runner runs no other), or nil.
func enabledHunt(s *hunt.Set, id string) *hunt.Hunt {
	if h, ok := s.Get(id); ok && h.Enabled {
		return h
	}
	return nil
}

// stateOf is the coordination state a won fire was planned on: the hunt's, or its backfill key's.
func stateOf(snap store.Snapshot, state func(string) store.HuntState, d dueFire) store.HuntState {
	if d.Backfill == nil {
		return state(d.Hunt.ID)
	}
	for _, b := range snap.Backfills {
		if b.ID == d.Backfill.ID {
			return b.Progress
		}
	}
	return store.HuntState{}
}

// backfillWindow is a chunk's window: from where its claim's verify read saw the backfill's
// progress (its range start before any chunk committed) to the chunk's end. It is
// schedule.RunSpan with the range's start as the first window's start and no catch-up cap:
// the chunk size is the operator's.
func backfillWindow(h *hunt.Hunt, b *backfillChunk, l lease.Lease, end int64) window {
	return dataWindow(h, schedule.RunSpan(l.Watermark, l.HasWatermark, end, end-b.From, math.MaxInt64))
}

// liveFirst orders a queue so that live fires run before backfill chunks (stable otherwise).
func liveFirst(q []*job) {
	sort.SliceStable(q, func(a, b int) bool { return q[a].backfill == nil && q[b].backfill != nil })
}
