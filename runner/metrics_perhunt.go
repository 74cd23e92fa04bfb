package runner

import (
	"sync"

	"github.com/hunt-runner/hunt-runner/hunt"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Per-hunt series are opt-in and capped, so a pod's exposition does not grow with the hunts it
// loads: by default every metric is a total (by outcome and kind, or by hunt set), and the
// detail of each hunt lives in the status API and in ClickHouse (hunt_runs, hunt_state).
//
// WithPerHunt(n) (run's --metrics-per-hunt) itemises at most n hunts. The rule: when a set
// is loaded, its hunts are admitted in id order while fewer than n are admitted, and an
// admitted hunt stays admitted for the life of the process (a counter series that came and
// went would break rate()). Pods that loaded the same sets itemise the same hunts. What an
// itemised hunt adds is a hunt_id label on the counters and the planner's behind gauge, and
// the health gauges of metrics_health.go; runs of the others are still counted in the series
// without hunt_id, so sums over hunt_id are the totals in either mode.
// hunt_runner_metrics_hunts_omitted says how many loaded hunts have no series of their own.
const (
	MetricsPerHuntDefault = 0    // no per-hunt series
	MetricsPerHuntMax     = 2000 // the most hunts WithPerHunt may itemise
	// seriesLimitFloor is the SDK's own default per-instrument limit, kept for every
	// instrument whose series do not grow with hunts.
	seriesLimitFloor = 2000
)

// runOutcomes and runKinds are the label values of hunt_runner_runs_total and
// hunt_runner_run_duration_seconds: their product per itemised hunt bounds the largest
// instrument (MetricsSeriesLimit).
var (
	runOutcomes = []hunt.RunStatus{hunt.RunSucceeded, hunt.RunFailed, hunt.RunLost, hunt.RunCancelled, hunt.RunUnknown,
		hunt.RunNoData, hunt.RunOverBudget}
	runKinds = []hunt.Kind{hunt.KindScheduled, hunt.KindRequest, hunt.KindBackfill}
)

// MetricsSeriesLimit is the per-instrument series limit the OpenTelemetry SDK must be given
// (serve.TelemetryOptions.SeriesLimit) for a Metrics itemising perHunt hunts: above anything
// the runner's instruments can produce, so the SDK never folds series into its
// otel_metric_overflow series, which would lose them silently.
func MetricsSeriesLimit(perHunt int) int {
	return seriesLimitFloor + (perHunt+1)*len(runOutcomes)*len(runKinds)
}

// MetricsOption configures NewMetrics.
type MetricsOption func(*Metrics)

// WithPerHunt itemises at most n hunts (see MetricsPerHuntMax); 0 (MetricsPerHuntDefault)
// exports totals only.
func WithPerHunt(n int) MetricsOption {
	return func(m *Metrics) { m.perHunt.max = n }
}

// perHunt decides which hunts have series of their own.
type perHunt struct {
	max int

	mu       sync.Mutex
	admitted map[string]bool
	sets     map[*Runner]*hunt.Set // the set each runner last planned
	omitted  int                   // hunts of those sets not admitted
	loaded   int                   // hunts of those sets
}

// load admits set's hunts (r's newest set) by the rule above; a set already seen costs a
// pointer compare.
func (p *perHunt) load(r *Runner, set *hunt.Set) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sets[r] == set {
		return
	}
	if p.sets == nil {
		p.sets, p.admitted = map[*Runner]*hunt.Set{}, map[string]bool{}
	}
	p.sets[r] = set
	for i := 0; i < len(set.Hunts) && len(p.admitted) < p.max; i++ {
		p.admitted[set.Hunts[i].ID] = true // Hunts are sorted by id
	}
	p.loaded, p.omitted = 0, 0
	for _, s := range p.sets {
		p.loaded += len(s.Hunts)
		for i := range s.Hunts {
			if !p.admitted[s.Hunts[i].ID] {
				p.omitted++
			}
		}
	}
}

// itemised says whether id has series of its own.
func (p *perHunt) itemised(id string) bool {
	if p.max == 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.admitted[id]
}

// itemisedIDs are the hunts that have series of their own (at most max).
func (p *perHunt) itemisedIDs() []string {
	if p.max == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.admitted))
	for id := range p.admitted {
		out = append(out, id)
	}
	return out
}

// attrs are kv, with id's hunt_id when id is itemised.
func (p *perHunt) attrs(id string, kv ...attribute.KeyValue) metric.MeasurementOption {
	if p.itemised(id) {
		kv = append(kv, attribute.String("hunt_id", id))
	}
	return metric.WithAttributes(kv...)
}

// counts are what the loaded and omitted gauges report.
func (p *perHunt) counts() (loaded, omitted int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.loaded, p.omitted
}

// huntsLoaded tells the metrics which set r plans now.
func (m *Metrics) huntsLoaded(r *Runner, set *hunt.Set) {
	if m == nil || set == nil {
		return
	}
	m.perHunt.load(r, set)
}
