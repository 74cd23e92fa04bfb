package schedule

import (
	"fmt"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
)

// Row is one hunt_schedule row. A tombstone (a hunt removed or disabled) has Enabled false and
// IntervalSeconds and PhaseOffset 0.
type Row struct {
	HuntID          string
	IntervalSeconds uint32
	PhaseOffset     uint32
	Enabled         bool
	ConfigHash      string
	// Set is the hunt set that published the row (hunt_schedule.hunt_set). Materialise fills
	// it; rows given to Materialise may leave it empty.
	Set string
}

// Tombstone is the row that retires a hunt.
func Tombstone(huntID string) Row { return Row{HuntID: huntID} }

// Spec is a parsed schedule: an interval and, for cron schedules, a pinned offset. An unpinned
// schedule gets its offset from PhaseOffset.
type Spec struct {
	Interval time.Duration
	Offset   time.Duration // meaningful only when Pinned
	Pinned   bool
}

// Validate checks that the spec fits a hunt_schedule row.
func (s Spec) Validate() error {
	if s.Interval < time.Second || s.Interval > MaxInterval || s.Interval%time.Second != 0 {
		return fmt.Errorf("%w: interval %v must be whole seconds in [1s, %v]", ErrInvalidInterval, s.Interval, MaxInterval)
	}
	if s.Pinned && (s.Offset < 0 || s.Offset >= s.Interval || s.Offset%time.Second != 0) {
		return fmt.Errorf("%w: pinned offset %v must be whole seconds in [0, %v)", ErrInvalidCron, s.Offset, s.Interval)
	}
	return nil
}

// NewRow computes the hunt_schedule row of an enabled hunt: the interval, and the pinned offset
// or the spread offset for fraction f.
func NewRow(huntID string, spec Spec, f float64, configHash string) (Row, error) {
	if err := spec.Validate(); err != nil {
		return Row{}, fmt.Errorf("hunt %q: %w", huntID, err)
	}
	if err := ValidateSpreadFraction(f); err != nil {
		return Row{}, err
	}
	interval := int64(spec.Interval / time.Second)
	offset := PhaseOffset(huntID, interval, f)
	if spec.Pinned {
		offset = int64(spec.Offset / time.Second)
	}
	return Row{HuntID: huntID, IntervalSeconds: uint32(interval), PhaseOffset: uint32(offset), Enabled: true, ConfigHash: configHash}, nil
}

// RowsOf are the hunt_schedule rows of a loaded set, in hunt id order: each enabled hunt's
// interval and the offset its loader resolved (spread or pinned by a cron, used as is), and a
// tombstone for each disabled hunt. An error names the hunt's file.
func RowsOf(set *hunt.Set) ([]Row, error) {
	rows := make([]Row, 0, len(set.Hunts))
	for _, h := range set.Hunts {
		if !h.Enabled {
			rows = append(rows, Row{HuntID: h.ID, ConfigHash: h.Hash})
			continue
		}
		// The fraction only matters for unpinned specs; the offset here is the loader's.
		r, err := NewRow(h.ID, Spec{Interval: h.Interval, Offset: h.Offset, Pinned: true}, DefaultSpreadFraction, h.Hash)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", h.File, err)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// Live reports whether the row schedules fires (enabled with a positive interval).
func (r Row) Live() bool { return r.Enabled && r.IntervalSeconds > 0 }
