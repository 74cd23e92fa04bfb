package runner

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// HuntHealth is one hunt's health as read from ClickHouse (status.Read), the same on every
// pod: alerts aggregate its totals with max by (namespace). Lag counts a hunt that never committed from
// its first owed fire, which the planner's hunt_runner_behind_seconds (the fires this pod
// plans) does not know.
type HuntHealth struct {
	Interval            int64     // seconds
	Lag                 int64     // seconds the oldest owed fire has been owed
	LastSuccess         time.Time // zero: never succeeded
	ConsecutiveFailures uint32
	NoData              bool // state no_data: a declared source is silent
	OverBudget          bool // state over_budget: the newest run was stopped by its read budget
}

// BehindIntervals is how many of its intervals a hunt's lag must exceed for
// hunt_runner_hunts_behind to count it (the HuntBehind alert).
const BehindIntervals = 2

// Reload outcomes of hunt_runner_reloads_total.
const (
	ReloadOK    = "ok"    // the source was read (single files may still have problems)
	ReloadError = "error" // the source could not be read; the previous set is kept
)

// healthGauges are the instruments the ops pack's alerts need beyond the loop's own. The
// totals, always exported, over every hunt SetHuntHealth was given:
//
//	hunt_runner_hunts_failing                             hunts with at least one consecutive failure
//	hunt_runner_consecutive_failures_max                  the most consecutive failures of any hunt
//	hunt_runner_hunts_behind                              hunts owing a fire for more than BehindIntervals intervals
//	hunt_runner_hunts_never_succeeded                     hunts owing a fire for more than an interval, never committed
//	hunt_runner_lag_intervals_max                         the largest lag of any hunt, in that hunt's intervals
//	hunt_runner_hunts_no_data                             hunts in state no_data (a declared source is silent)
//	hunt_runner_hunts_over_budget                         hunts in state over_budget (stopped by the read budget)
//	hunt_runner_hunt_files_invalid                        problems in the hunt files loaded, offline and server-side
//	hunt_runner_hunts_stale                               hunts held at their last good definition
//	hunt_runner_reloads_total{outcome}                    ok|error
//
// and per itemised hunt only (WithPerHunt):
//
//	hunt_runner_hunt_interval_seconds{hunt_id}
//	hunt_runner_hunt_lag_seconds{hunt_id}                 from the first owed fire when never committed
//	hunt_runner_last_success_timestamp_seconds{hunt_id}  absent until the hunt's first success
//	hunt_runner_never_succeeded{hunt_id}                  1 while an owed hunt has no success
//	hunt_runner_consecutive_failures{hunt_id}
type healthGauges struct {
	reloads metric.Int64Counter

	mu    sync.Mutex
	hunts map[string]HuntHealth
	files func() (HuntFiles, bool)
}

// HuntFiles is what the hunt-file gauges report: the problems of the set the runner holds
// (the loader's, so the server check's refusals count as the offline check's do) and the hunts
// it keeps at their last good definition because their file broke.
type HuntFiles struct {
	Invalid int
	Stale   int
}

func (m *Metrics) registerHealth(meter metric.Meter) error {
	g := &m.health
	var err error
	if g.reloads, err = meter.Int64Counter("hunt_runner_reloads",
		metric.WithDescription("Reads of the hunt source by outcome: ok, error.")); err != nil {
		return err
	}
	// Both outcomes exist from the start, so rates and increase() have a series before the
	// first reload (a fresh dashboard has no hole, HuntSourceUnreadable compares both).
	for _, o := range []string{ReloadOK, ReloadError} {
		g.reloads.Add(context.Background(), 0, metric.WithAttributes(attribute.String("outcome", o)))
	}
	interval, err := meter.Int64ObservableGauge("hunt_runner_hunt_interval", metric.WithUnit("s"),
		metric.WithDescription("Each hunt's interval, to compare lag with."))
	if err != nil {
		return err
	}
	lag, err := meter.Int64ObservableGauge("hunt_runner_hunt_lag", metric.WithUnit("s"),
		metric.WithDescription("Seconds each hunt's oldest owed fire has been owed, read from ClickHouse; a hunt that never committed counts from its first owed fire."))
	if err != nil {
		return err
	}
	lastSuccess, err := meter.Float64ObservableGauge("hunt_runner_last_success_timestamp", metric.WithUnit("s"),
		metric.WithDescription("Unix time of each hunt's newest committed run."))
	if err != nil {
		return err
	}
	never, err := meter.Int64ObservableGauge("hunt_runner_never_succeeded",
		metric.WithDescription("1 while a hunt owes a fire and has never committed a run."))
	if err != nil {
		return err
	}
	failures, err := meter.Int64ObservableGauge("hunt_runner_consecutive_failures",
		metric.WithDescription("Failed attempts of each hunt since its last success (hunt_state)."))
	if err != nil {
		return err
	}
	invalid, err := meter.Int64ObservableGauge("hunt_runner_hunt_files_invalid",
		metric.WithDescription("Problems in the hunt files loaded, offline and server-side; a broken file keeps its hunt at the last good definition, or out."))
	if err != nil {
		return err
	}
	stale, err := meter.Int64ObservableGauge("hunt_runner_hunts_stale",
		metric.WithDescription("Hunts this runner keeps at their last good definition because their file now has a problem: the edit is not live."))
	if err != nil {
		return err
	}
	failing, err := meter.Int64ObservableGauge("hunt_runner_hunts_failing",
		metric.WithDescription("Hunts whose newest attempts failed: at least one consecutive failure (hunt_state)."))
	if err != nil {
		return err
	}
	failuresMax, err := meter.Int64ObservableGauge("hunt_runner_consecutive_failures_max",
		metric.WithDescription("The most consecutive failures of any hunt (hunt_state)."))
	if err != nil {
		return err
	}
	behindN, err := meter.Int64ObservableGauge("hunt_runner_hunts_behind",
		metric.WithDescription(fmt.Sprintf("Hunts whose oldest owed fire has been owed for more than %d of their intervals.", BehindIntervals)))
	if err != nil {
		return err
	}
	neverN, err := meter.Int64ObservableGauge("hunt_runner_hunts_never_succeeded",
		metric.WithDescription("Hunts that have owed a fire for more than an interval and never committed a run."))
	if err != nil {
		return err
	}
	lagMax, err := meter.Float64ObservableGauge("hunt_runner_lag_intervals_max",
		metric.WithDescription("The largest lag of any hunt, in that hunt's intervals (0 when every hunt is caught up)."))
	if err != nil {
		return err
	}
	noData, err := meter.Int64ObservableGauge("hunt_runner_hunts_no_data",
		metric.WithDescription("Hunts in state no_data: their newest run committed while a declared source had been silent past its max_silence."))
	if err != nil {
		return err
	}
	overBudget, err := meter.Int64ObservableGauge("hunt_runner_hunts_over_budget",
		metric.WithDescription("Hunts in state over_budget: their newest run was stopped by its read budget (max_rows_read, max_bytes_read)."))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		g.mu.Lock()
		defer g.mu.Unlock()
		var t healthTotals
		for id, h := range g.hunts {
			t.add(h)
			if !m.perHunt.itemised(id) {
				continue
			}
			a := metric.WithAttributes(attribute.String("hunt_id", id))
			o.ObserveInt64(interval, h.Interval, a)
			o.ObserveInt64(lag, h.Lag, a)
			o.ObserveInt64(failures, int64(h.ConsecutiveFailures), a)
			n := int64(0)
			if h.LastSuccess.IsZero() {
				if h.Lag > 0 {
					n = 1
				}
			} else {
				o.ObserveFloat64(lastSuccess, float64(h.LastSuccess.UnixMilli())/1000, a)
			}
			o.ObserveInt64(never, n, a)
		}
		if g.hunts != nil {
			o.ObserveInt64(failing, t.failing)
			o.ObserveInt64(failuresMax, t.failuresMax)
			o.ObserveInt64(behindN, t.behind)
			o.ObserveInt64(neverN, t.never)
			o.ObserveFloat64(lagMax, t.lagMax)
			o.ObserveInt64(noData, t.noData)
			o.ObserveInt64(overBudget, t.overBudget)
		}
		if g.files != nil {
			if f, ok := g.files(); ok {
				o.ObserveInt64(invalid, int64(f.Invalid))
				o.ObserveInt64(stale, int64(f.Stale))
			}
		}
		return nil
	}, interval, lag, lastSuccess, never, failures, invalid, stale, failing, failuresMax, behindN, neverN, lagMax, noData, overBudget)
	return err
}

// healthTotals are the totals of the hunt-health gauges.
type healthTotals struct {
	failing, failuresMax, behind, never int64
	noData, overBudget                  int64
	lagMax                              float64
}

func (t *healthTotals) add(h HuntHealth) {
	if h.NoData {
		t.noData++
	}
	if h.OverBudget {
		t.overBudget++
	}
	if h.ConsecutiveFailures > 0 {
		t.failing++
	}
	t.failuresMax = max(t.failuresMax, int64(h.ConsecutiveFailures))
	if h.Interval <= 0 {
		return
	}
	if h.Lag > BehindIntervals*h.Interval {
		t.behind++
	}
	if h.LastSuccess.IsZero() && h.Lag > h.Interval {
		t.never++
	}
	t.lagMax = max(t.lagMax, float64(h.Lag)/float64(h.Interval))
}

// SetHuntHealth replaces the per-hunt health (hunts missing from h disappear from the gauges).
func (m *Metrics) SetHuntHealth(h map[string]HuntHealth) {
	if m == nil {
		return
	}
	m.health.mu.Lock()
	m.health.hunts = h
	m.health.mu.Unlock()
}

// Reloaded counts one reload of the hunt source.
func (m *Metrics) Reloaded(ctx context.Context, outcome string) {
	if m == nil {
		return
	}
	m.health.reloads.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String("outcome", outcome)))
}

// ObserveHuntFiles has the hunt-file gauges read f at every collection (false: nothing loaded
// yet, so nothing is reported). f reads the set the runner holds, not one read of the source,
// so a problem only the server finds, and a hunt kept at its last good definition, count.
func (m *Metrics) ObserveHuntFiles(f func() (HuntFiles, bool)) {
	if m == nil {
		return
	}
	m.health.mu.Lock()
	m.health.files = f
	m.health.mu.Unlock()
}
