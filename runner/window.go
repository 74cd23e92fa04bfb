package runner

import "time"

// window is the span one run covers. [Start, End) are schedule seconds: End becomes the
// watermark on success. The data the query reads is [DataStart, DataEnd), the same span shifted
// back by the hunt's delay. A run after an outage longer than max_catchup covers only the newest
// max_catchup; the skipped [GapStart, GapEnd) is recorded as a `gap` row, never silently lost.
type window struct {
	Start, End         int64
	DataStart, DataEnd time.Time
	GapStart, GapEnd   int64
}

func (w window) hasGap() bool { return w.GapEnd > w.GapStart }

// runWindow computes the window of fire for h given its watermark. It starts at the watermark,
// or one interval before the fire on a hunt's first run.
func runWindow(h *Hunt, watermark int64, hasWatermark bool, fire int64) window {
	start := fire - h.Interval
	if hasWatermark {
		start = watermark
	}
	if start > fire {
		// A watermark ahead of the fire cannot be owed; an empty window is the safe answer.
		start = fire
	}
	w := window{Start: start, End: fire}
	if mc := h.maxCatchupSeconds(); fire-start > mc {
		w.GapStart, w.GapEnd = start, fire-mc
		w.Start = fire - mc
	}
	w.DataStart = time.Unix(w.Start, 0).UTC().Add(-h.Delay)
	w.DataEnd = time.Unix(w.End, 0).UTC().Add(-h.Delay)
	return w
}
