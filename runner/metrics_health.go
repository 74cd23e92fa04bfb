package runner

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// HuntHealth is one hunt's health as read from ClickHouse (status.Read), the same on every
// pod: alerts aggregate it with max by (hunt_id). Lag counts a hunt that never committed from
// its first owed fire, which the planner's hunt_runner_behind_seconds (the fires this pod
// plans) does not know.
type HuntHealth struct {
	Interval            int64     // seconds
	Lag                 int64     // seconds the oldest owed fire has been owed
	LastSuccess         time.Time // zero: never succeeded
	ConsecutiveFailures uint32
}

// Reload outcomes of hunt_runner_reloads_total.
const (
	ReloadOK    = "ok"    // the source was read (single files may still have problems)
	ReloadError = "error" // the source could not be read; the previous set is kept
)

// healthGauges are the instruments the ops pack's alerts need beyond the loop's own:
//
//	hunt_runner_hunt_interval_seconds{hunt_id}
//	hunt_runner_hunt_lag_seconds{hunt_id}                 from the first owed fire when never committed
//	hunt_runner_last_success_timestamp_seconds{hunt_id}  absent until the hunt's first success
//	hunt_runner_never_succeeded{hunt_id}                  1 while an owed hunt has no success
//	hunt_runner_consecutive_failures{hunt_id}
//	hunt_runner_hunt_files_invalid                        problems in the hunt files loaded, offline and server-side
//	hunt_runner_hunts_stale                               hunts held at their last good definition
//	hunt_runner_reloads_total{outcome}                    ok|error
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
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		g.mu.Lock()
		defer g.mu.Unlock()
		for id, h := range g.hunts {
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
		if g.files != nil {
			if f, ok := g.files(); ok {
				o.ObserveInt64(invalid, int64(f.Invalid))
				o.ObserveInt64(stale, int64(f.Stale))
			}
		}
		return nil
	}, interval, lag, lastSuccess, never, failures, invalid, stale)
	return err
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
