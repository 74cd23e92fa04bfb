package charttest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	promqlengine "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
	"sigs.k8s.io/yaml"
)

// ruleExpr is the expression of the shipped alert named alert.
func ruleExpr(t *testing.T, alert string) string {
	t.Helper()
	pr := one[monitoringv1.PrometheusRule](t, mustRender(t, opsValues), "hr-hunt-runner")
	spec, err := yaml.Marshal(pr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == alert {
				return r.Expr
			}
		}
	}
	t.Fatalf("no alert %s", alert)
	return ""
}

// sample is one float sample of the in-memory store below.
type sample struct {
	t int64
	f float64
}

func (s sample) T() int64                      { return s.t }
func (s sample) ST() int64                     { return 0 }
func (s sample) F() float64                    { return s.f }
func (s sample) H() *histogram.Histogram       { return nil }
func (s sample) FH() *histogram.FloatHistogram { return nil }
func (s sample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s sample) Copy() chunks.Sample           { return s }

type listSet struct {
	s []storage.Series
	i int
}

func (s *listSet) Next() bool                        { s.i++; return s.i <= len(s.s) }
func (s *listSet) At() storage.Series                { return s.s[s.i-1] }
func (s *listSet) Err() error                        { return nil }
func (s *listSet) Warnings() annotations.Annotations { return nil }

// gaugeSeries is a constant gauge: one sample a minute for ten minutes.
type gaugeSeries struct {
	labels labels.Labels
	value  float64
}

// firing evaluates expr with Prometheus' engine over constant series and says whether it
// returns anything at the end (the alert's "for" is its own matter).
func firing(t *testing.T, expr string, in ...gaugeSeries) bool {
	t.Helper()
	q := &storage.MockQuerier{SelectMockFunction: func(_ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
		out := &listSet{}
	next:
		for _, s := range in {
			for _, m := range ms {
				if !m.Matches(s.labels.Get(m.Name)) {
					continue next
				}
			}
			var samples []chunks.Sample
			for m := int64(0); m <= 10; m++ {
				samples = append(samples, sample{t: m * 60_000, f: s.value})
			}
			out.s = append(out.s, storage.NewListSeries(s.labels, samples))
		}
		return out
	}}
	engine := promqlengine.NewEngine(promqlengine.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	query, err := engine.NewInstantQuery(context.Background(), &storage.MockQueryable{MockQuerier: q}, nil, expr, time.Unix(600, 0))
	if err != nil {
		t.Fatal(err)
	}
	res := query.Exec(context.Background())
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	v, err := res.Vector()
	if err != nil {
		t.Fatal(err)
	}
	return len(v) > 0
}

// TestHuntFilesInvalidFiresForProblemsAndStaleHunts: the shipped alert fires for a hunt file
// problem (a server-side one counts in the same gauge) and for a hunt held at its last good
// definition, and stays quiet when both are 0.
func TestHuntFilesInvalidFiresForProblemsAndStaleHunts(t *testing.T) {
	expr := ruleExpr(t, "HuntFilesInvalid")
	gauge := func(name string, v float64) gaugeSeries {
		return gaugeSeries{labels.FromStrings("__name__", name, "job", "hr-hunt-runner", "namespace", namespace, "pod", "p1"), v}
	}
	for _, c := range []struct {
		name           string
		invalid, stale float64
		want           bool
	}{
		{"healthy", 0, 0, false},
		{"a problem (offline or server-side)", 1, 0, true},
		{"a hunt at its last good definition", 0, 1, true},
	} {
		if got := firing(t, expr, gauge("hunt_runner_hunt_files_invalid", c.invalid), gauge("hunt_runner_hunts_stale", c.stale)); got != c.want {
			t.Errorf("%s: HuntFilesInvalid fires %v, want %v\n%s", c.name, got, c.want, expr)
		}
	}
}

// TestNoRunnerAndDeadLetterAlertsFire: HuntNoRunnerSeen fires with no runner target at all
// (where HuntRunnerDown cannot) and not while one answers; HuntNotificationsDeadLettered fires
// on a dead letter and not at 0.
func TestNoRunnerAndDeadLetterAlertsFire(t *testing.T) {
	runner := func(name string, v float64) gaugeSeries {
		return gaugeSeries{labels.FromStrings("__name__", name, "job", "hr-hunt-runner", "namespace", namespace, "pod", "p1"), v}
	}
	noRunner := ruleExpr(t, "HuntNoRunnerSeen")
	if !firing(t, noRunner) {
		t.Errorf("HuntNoRunnerSeen silent with no runner at all: %s", noRunner)
	}
	if firing(t, noRunner, runner("up", 1)) {
		t.Errorf("HuntNoRunnerSeen fires while a runner answers: %s", noRunner)
	}
	other := gaugeSeries{labels.FromStrings("__name__", "up", "job", "someone-else", "namespace", namespace), 1}
	if !firing(t, noRunner, other) {
		t.Errorf("HuntNoRunnerSeen counts another job's target: %s", noRunner)
	}
	dead := ruleExpr(t, "HuntNotificationsDeadLettered")
	if firing(t, dead, runner("hunt_runner_notify_dead", 0)) || !firing(t, dead, runner("hunt_runner_notify_dead", 2)) {
		t.Errorf("HuntNotificationsDeadLettered: %s", dead)
	}
}

// TestHuntAlertsFireOnTheTotals: the hunt alerts fire on the default exposition's totals (no
// per-hunt series) from any one pod, and stay quiet while the totals are 0.
func TestHuntAlertsFireOnTheTotals(t *testing.T) {
	gauge := func(name, pod string, v float64) gaugeSeries {
		return gaugeSeries{labels.FromStrings("__name__", name, "job", "hr-hunt-runner", "namespace", namespace, "pod", pod), v}
	}
	for _, c := range []struct {
		alert, metric string
		quiet, loud   float64
	}{
		{"HuntFailing", "hunt_runner_consecutive_failures_max", 2, 3}, // failuresBeforeAlert: 3
		{"HuntBehind", "hunt_runner_hunts_behind", 0, 1},
		{"HuntNeverSucceeded", "hunt_runner_hunts_never_succeeded", 0, 1},
		{"HuntNoData", "hunt_runner_hunts_no_data", 0, 1},
		{"HuntOverBudget", "hunt_runner_hunts_over_budget", 0, 1},
	} {
		expr := ruleExpr(t, c.alert)
		if firing(t, expr, gauge(c.metric, "p1", c.quiet), gauge(c.metric, "p2", c.quiet)) {
			t.Errorf("%s fires at %s = %v: %s", c.alert, c.metric, c.quiet, expr)
		}
		if !firing(t, expr, gauge(c.metric, "p1", c.quiet), gauge(c.metric, "p2", c.loud)) {
			t.Errorf("%s silent at %s = %v on one pod: %s", c.alert, c.metric, c.loud, expr)
		}
	}
}
