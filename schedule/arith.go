package schedule

import (
	"crypto/sha256"
	"fmt"
	"math"
)

// DefaultSpreadFraction is the share of each interval over which spread phase offsets fall.
// 0.8 keeps every fire in the first 80% of its interval, as the earlier runner did, so a
// migrating deployment keeps its fire times.
const DefaultSpreadFraction = 0.8

// ValidateSpreadFraction reports whether f is usable as a spread fraction: in (0, 1].
func ValidateSpreadFraction(f float64) error {
	if math.IsNaN(f) || f <= 0 || f > 1 {
		return fmt.Errorf("spread fraction %v: must be in (0, 1]", f)
	}
	return nil
}

// PhaseOffset is the spread offset of a hunt: SHA-256 of the UTF-8 id read as a big-endian
// unsigned integer, modulo max(1, floor(interval·f)). It matches the earlier Python runner bit
// for bit (post-1682300-71da5fa4 at 60 s → 46). An interval below 1 gives 0; f is assumed
// valid (see ValidateSpreadFraction).
func PhaseOffset(id string, interval int64, f float64) int64 {
	if interval < 1 {
		return 0
	}
	window := int64(math.Floor(float64(interval) * f))
	if window <= 1 {
		return 0
	}
	if window > interval {
		window = interval
	}
	sum := sha256.Sum256([]byte(id))
	// Horner's rule over the digest bytes: r stays below window (< 2^63/256 for any interval
	// that fits the table's UInt32), so r*256+b never overflows.
	w := uint64(window)
	var r uint64
	for _, b := range sum {
		r = (r<<8 | uint64(b)) % w
	}
	return int64(r)
}

// floorMod is the mathematical modulo (result in [0, m)) for m > 0.
func floorMod(a, m int64) int64 {
	r := a % m
	if r < 0 {
		r += m
	}
	return r
}

// LatestFire is the newest fire at or before now of a schedule with the given interval and
// offset (offset is taken modulo interval). It is the fire a worker owes at now: a tick that
// lands before this interval's offset still owes the previous interval's fire.
// interval must be positive.
func LatestFire(now, interval, offset int64) int64 {
	boundary := now - floorMod(now, interval)
	current := boundary + floorMod(offset, interval)
	if now >= current {
		return current
	}
	return current - interval
}

// NextFire is the first fire strictly after now. interval must be positive.
func NextFire(now, interval, offset int64) int64 {
	return LatestFire(now, interval, offset) + interval
}

// Window is the half-open data window [start, end) a run of fire covers: it starts at the
// watermark, or one interval before the fire on a hunt's first run, and ends at the fire.
// Shifting by a hunt's delay is the caller's business; RunSpan adds the catch-up cap.
func Window(watermark int64, hasWatermark bool, fire, interval int64) (start, end int64) {
	if hasWatermark {
		return watermark, fire
	}
	return fire - interval, fire
}

// Span is the window one run covers, in schedule seconds: [Start, End), End becoming the
// watermark when the run commits. [GapStart, GapEnd) is a range the run skips because it lies
// beyond the catch-up cap; it is empty (GapEnd <= GapStart) on a healthy run.
type Span struct {
	Start, End       int64
	GapStart, GapEnd int64
}

// HasGap reports whether the run skips a range.
func (s Span) HasGap() bool { return s.GapEnd > s.GapStart }

// RunSpan is the span a run of fire covers: Window, cut to its newest maxCatchup seconds after
// an outage longer than that (the cut-off part is the gap, recorded rather than silently lost).
// A watermark at or beyond the fire cannot be owed; the empty span at the fire is the safe
// answer. maxCatchup must be positive (the runner resolves a hunt's default and floor).
func RunSpan(watermark int64, hasWatermark bool, fire, interval, maxCatchup int64) Span {
	start, end := Window(watermark, hasWatermark, fire, interval)
	start = min(start, end)
	s := Span{Start: start, End: end}
	if end-start > maxCatchup {
		s.GapStart, s.GapEnd = start, end-maxCatchup
		s.Start = end - maxCatchup
	}
	return s
}
