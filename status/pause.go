package status

import (
	"sort"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/store"
)

// Pause is who paused a hunt, why, since and until when (hunt-runner pause).
type Pause struct {
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
	Since  string `json:"since,omitempty"`
	Until  string `json:"until,omitempty"` // RFC 3339; empty: until resumed
}

// pausesOf returns the hunts paused at the snapshot's now, by id. Pause state travels in the
// snapshot (store.HuntState.Paused…), the same read the runners plan from, so status and
// the runners agree on it; a pause whose end has passed is not listed.
func pausesOf(snap store.Snapshot) map[string]*Pause {
	out := map[string]*Pause{}
	for id, st := range snap.Hunts {
		if !st.PausedAt(snap.Now) {
			continue
		}
		p := &Pause{By: st.PausedBy, Reason: st.PauseReason, Since: rfc(st.PausedSince)}
		if !st.PausedUntil.IsZero() {
			p.Until = rfc(st.PausedUntil)
		}
		out[id] = p
	}
	return out
}

// Backfill is the progress of one backfill still to run: its chunks cover [From, Done).
type Backfill struct {
	ID           string `json:"id"`
	From         string `json:"from"`
	To           string `json:"to"`
	Done         string `json:"done"`
	ChunkSeconds int64  `json:"chunk_seconds"`
	Chunks       int64  `json:"chunks"`
	ChunksDone   int64  `json:"chunks_done"`
	RequestedBy  string `json:"requested_by"`
}

// backfillsOf lists the pending backfills of hunt in the snapshot, oldest request first.
func backfillsOf(snap store.Snapshot, hunt string) []Backfill {
	var out []Backfill
	for _, b := range snap.Backfills {
		if b.HuntID != hunt {
			continue
		}
		ceil := func(n int64) int64 { return (n + b.Chunk - 1) / b.Chunk }
		out = append(out, Backfill{ID: b.ID, From: rfcSec(b.From), To: rfcSec(b.To), Done: rfcSec(b.Done()),
			ChunkSeconds: b.Chunk, Chunks: ceil(b.To - b.From), ChunksDone: ceil(b.Done() - b.From), RequestedBy: b.RequestedBy})
	}
	return out
}

func sortEntries(es []hunt.Hunt) {
	sort.Slice(es, func(i, j int) bool { return es[i].ID < es[j].ID })
}

// Snooze is a live snooze of a hunt's notifications (`hunt-runner snooze`): runs and findings
// go on, deliveries are recorded muted.
type Snooze struct {
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
	Since  string `json:"since"`
	Until  string `json:"until,omitempty"` // RFC 3339; empty: until unsnoozed
}

// markSnoozes sets the snooze of every hunt of r that one mutes at r's now.
func (r *Report) markSnoozes(snoozes map[string]store.Snooze) {
	for i := range r.Hunts {
		z, ok := snoozes[r.Hunts[i].HuntID]
		if !ok || !z.LiveAt(r.now) {
			continue
		}
		s := &Snooze{By: z.By, Reason: z.Reason, Since: rfc(z.Updated)}
		if !z.Until.IsZero() {
			s.Until = rfc(z.Until)
		}
		r.Hunts[i].Snooze = s
	}
}
