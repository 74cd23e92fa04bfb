package runner

import (
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/schedule"
)

// window is the span one run covers (schedule.Span: [Start, End) in schedule seconds, End
// becoming the watermark on success, and the skipped [GapStart, GapEnd) after an outage longer
// than max_catchup) plus the data the query reads, [DataStart, DataEnd): the same span shifted
// back by the hunt's delay.
type window struct {
	schedule.Span
	DataStart, DataEnd time.Time
}

func (w window) hasGap() bool { return w.HasGap() }

// runWindowAfter is the window of fire for h given the watermark its claim verified, committed
// while the hunt's interval was inForce seconds (hunt_watermark.interval_seconds, carried by
// the lease; 0 when unknown), with the catch-up cap of catchupCap.
func runWindowAfter(h *hunt.Hunt, watermark int64, hasWatermark bool, inForce, fire int64) window {
	return dataWindow(h, schedule.RunSpan(watermark, hasWatermark, fire, h.IntervalSeconds(), catchupCap(h, inForce)))
}

// dataWindow is s with the data h reads for it: the span shifted back by the hunt's delay.
func dataWindow(h *hunt.Hunt, s schedule.Span) window {
	return window{Span: s, DataStart: time.Unix(s.Start, 0).UTC().Add(-h.Delay), DataEnd: time.Unix(s.End, 0).UTC().Add(-h.Delay)}
}

// catchupCap is the longest window, in seconds, of the run that follows a watermark committed
// under interval inForce. After the interval was shortened (1h to 1m), the first run covers
// what the old interval still owed, up to an hour here with no outage at all; capped with the
// new interval (24 minutes by default) it would record the rest as a gap. So the cap is the one
// that was in force when the watermark was written, plus one new interval (the change can land
// just after an old fire was due), whenever that is the larger. Once a run commits under the
// new interval, its own cap applies.
func catchupCap(h *hunt.Hunt, inForce int64) int64 {
	c := h.MaxCatchupSeconds()
	if inForce > h.IntervalSeconds() {
		old := *h
		old.Interval = time.Duration(inForce) * time.Second
		c = max(c, old.MaxCatchupSeconds()+h.IntervalSeconds())
	}
	return c
}
