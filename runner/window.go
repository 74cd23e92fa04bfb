package runner

import (
	"time"

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

// runWindow is the window of fire for h given the watermark its claim verified.
func runWindow(h *Hunt, watermark int64, hasWatermark bool, fire int64) window {
	s := schedule.RunSpan(watermark, hasWatermark, fire, h.Interval, h.maxCatchupSeconds())
	return window{
		Span:      s,
		DataStart: time.Unix(s.Start, 0).UTC().Add(-h.Delay),
		DataEnd:   time.Unix(s.End, 0).UTC().Add(-h.Delay),
	}
}
