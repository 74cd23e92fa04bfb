package runner

import (
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// Shortening an interval (1h to 1m) with no outage: the first run after the change covers the
// rest of the old interval, no gap, however late in it the change lands; a real outage under the
// old interval still leaves the gap the old cap gave; and once a run commits under the new
// interval, the new cap applies again.
func TestCatchupCapUsesTheIntervalInForce(t *testing.T) {
	const hour, minute = 3600, 60
	oneMinute := hunt.Hunt{Interval: sec(minute)}
	wm := base // the last hourly fire that committed
	for _, fire := range []int64{wm + minute, wm + 35*minute, wm + hour, wm + hour + minute} {
		w := runWindowAfter(&oneMinute, wm, true, hour, fire)
		if w.HasGap() || w.Start != wm || w.End != fire {
			t.Fatalf("1h -> 1m, fire %+ds after the watermark: window %+v, want [watermark, fire) with no gap", fire-wm, w.Span)
		}
	}
	// Without the recorded interval (rows before layout 3), the new interval's cap applies:
	// the behaviour the cap above replaces.
	if w := runWindowAfter(&oneMinute, wm, true, 0, wm+hour); !w.HasGap() || w.GapEnd != wm+hour-24*minute {
		t.Fatalf("no recorded interval: window %+v, want the 24-minute cap", w.Span)
	}
	// An outage of two days under the hourly interval still gaps at the old cap (24 h) plus one
	// new interval.
	fire := wm + 48*hour
	if w := runWindowAfter(&oneMinute, wm, true, hour, fire); w.GapStart != wm || w.Start != fire-24*hour-minute {
		t.Fatalf("two-day outage: window %+v, want a gap up to 24h1m before the fire", w.Span)
	}
	// An explicit max_catchup as long as the old interval leaves no gap either.
	explicit := hunt.Hunt{Interval: sec(minute), MaxCatchup: time.Hour}
	if w := runWindowAfter(&explicit, wm, true, hour, wm+hour+30); w.HasGap() {
		t.Fatalf("max_catchup 1h, 1h -> 1m: window %+v, want no gap", w.Span)
	}
	// Next run, committed under 1m: the 1m cap is back.
	if w := runWindowAfter(&oneMinute, wm, true, minute, wm+hour); !w.HasGap() {
		t.Fatalf("watermark committed under 1m: window %+v, want the 24-minute cap", w.Span)
	}
	// A longer interval (1m -> 1h) keeps its own, larger cap.
	oneHour := hunt.Hunt{Interval: sec(hour)}
	if got := catchupCap(&oneHour, minute); got != 24*hour {
		t.Fatalf("1m -> 1h cap %d, want %d", got, 24*hour)
	}
}
