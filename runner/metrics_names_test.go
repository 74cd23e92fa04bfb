package runner

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/serve"
)

var updateMetricNames = flag.Bool("update-metric-names", false, "rewrite the chart test's lists of exported runner metrics")

// exportedMetrics is the list the chart's tests check every alert and dashboard panel
// against: a rule on a metric the runner does not export by default would never fire.
// perHuntMetrics are the names only --metrics-per-hunt adds, which the chart must not use.
var (
	exportedMetrics = filepath.Join("..", "charts", "hunt-runner", "test", "testdata", "exported-metrics", "runner.txt")
	perHuntMetrics  = filepath.Join("..", "charts", "hunt-runner", "test", "testdata", "exported-metrics", "runner-per-hunt.txt")
)

// recordEverything records once with every instrument, hunt "h" and "n" in the health map.
func recordEverything(ctx context.Context, m *Metrics) {
	r := metricsRunner(map[string]int64{"h": 1, "n": 7}, "a", "b", map[string]string{"f": "other"})
	m.observe(r)
	m.huntsLoaded(r, &hunt.Set{Hash: "a", Hunts: []hunt.Hunt{{ID: "f"}, {ID: "h"}, {ID: "n"}}})
	m.runDone(ctx, "h", hunt.KindScheduled, hunt.RunSucceeded, time.Second, 3)
	m.runDone(ctx, "n", hunt.KindBackfill, hunt.RunFailed, time.Second, 0)
	m.claims(ctx, claimWon, 1)
	m.capDeferredFires(ctx, capStagePlan, 1)
	m.findingsDropped(ctx, "h", 1)
	m.findingsTruncated(ctx, "h", 1)
	m.gap(ctx, "h")
	m.overrun(ctx, "h")
	m.clickhouseError(ctx, stageClaim)
	m.tickDone(ctx, time.Second)
	m.claimInserted(ctx, 200*time.Millisecond)
	m.setReplicaDelay(time.Second)
	m.SetHuntHealth(map[string]HuntHealth{"h": {Interval: 60, LastSuccess: time.Now()}, "n": {Interval: 60, Lag: 150, ConsecutiveFailures: 2},
		"o": {Interval: 60, Lag: 90, ConsecutiveFailures: 1, NoData: true, OverBudget: true}})
	m.Reloaded(ctx, ReloadOK)
	m.ObserveHuntFiles(func() (HuntFiles, bool) { return HuntFiles{Invalid: 2, Stale: 1}, true })
}

func newTestMetrics(t *testing.T, opts ...MetricsOption) (*Metrics, func() string) {
	t.Helper()
	tel, err := serve.NewTelemetry(context.Background(), serve.TelemetryOptions{Service: "test"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(tel.Meter, time.Second, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m, func() string { return scrape(t, tel) }
}

// TestExportedMetricNames: by default no series carries hunt_id, the totals count what the
// per-hunt series did, and the series names are the chart test's list.
func TestExportedMetricNames(t *testing.T) {
	m, scrape := newTestMetrics(t)
	recordEverything(context.Background(), m)
	body := scrape()
	if strings.Contains(body, `hunt_id="`) {
		t.Errorf("the default exposition has per-hunt series:\n%s", body)
	}
	for _, want := range []string{`hunt_runner_hunts_failing 2`, `hunt_runner_consecutive_failures_max 2`,
		`hunt_runner_hunts_behind 1`, `hunt_runner_hunts_never_succeeded 2`, `hunt_runner_lag_intervals_max 2.5`,
		`hunt_runner_hunt_files_invalid 2`, `hunt_runner_hunts_stale 1`, `hunt_runner_reloads_total{outcome="ok"} 1`,
		`hunt_runner_hunts_no_data 1`, `hunt_runner_hunts_over_budget 1`,
		`hunt_runner_runs_total{kind="scheduled",outcome="succeeded"} 1`, `hunt_runner_runs_total{kind="backfill",outcome="failed"} 1`,
		`hunt_runner_run_duration_seconds_count{kind="scheduled",outcome="succeeded"} 1`,
		`hunt_runner_rows_written_total 3`, `hunt_runner_gaps_total 1`, `hunt_runner_behind_seconds 7`,
		`hunt_runner_hunts_foreign{hunt_set="other"} 1`, `hunt_runner_hunts_loaded 3`, `hunt_runner_metrics_hunts_omitted 3`} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("metrics lack %s", want)
		}
	}
	if !strings.Contains(body, `hunt_runner_reloads_total{outcome="error"} 0`) {
		t.Error("the reload counter's error outcome is not initialised")
	}
	if t.Failed() {
		t.Log(body)
	}
	compareNames(t, exportedMetrics, seriesNames(body), *updateMetricNames)
}

// TestPerHuntMetricNames: with per-hunt series opted into, an itemised hunt has today's
// per-hunt series next to the totals, and what they add is the chart test's second list.
func TestPerHuntMetricNames(t *testing.T) {
	m, scrape := newTestMetrics(t, WithPerHunt(10))
	recordEverything(context.Background(), m)
	body := scrape()
	for _, want := range []string{`hunt_runner_never_succeeded{hunt_id="n"} 1`, `hunt_runner_never_succeeded{hunt_id="h"} 0`,
		`hunt_runner_consecutive_failures{hunt_id="n"} 2`, `hunt_runner_hunt_lag_seconds{hunt_id="n"} 150`,
		`hunt_runner_hunt_interval_seconds{hunt_id="h"} 60`, `hunt_runner_runs_total{hunt_id="h",kind="scheduled",outcome="succeeded"} 1`,
		`hunt_runner_behind_seconds{hunt_id="n"} 7`, `hunt_runner_behind_seconds 7`, `hunt_runner_gaps_total{hunt_id="h"} 1`,
		`hunt_runner_hunt_foreign{hunt_id="f",hunt_set="other"} 1`, `hunt_runner_hunts_failing 2`, `hunt_runner_metrics_hunts_omitted 0`} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(body, `hunt_id="o"`) {
		t.Error("a hunt the runner has not loaded has per-hunt series")
	}
	if strings.Contains(body, `hunt_runner_last_success_timestamp_seconds{hunt_id="n"}`) {
		t.Error("a hunt that never succeeded has a last success time")
	}
	if strings.Contains(body, `hunt_runner_run_duration_seconds_count{hunt_id=`) {
		t.Error("run durations have a histogram per hunt")
	}
	if t.Failed() {
		t.Log(body)
	}
	m0, scrape0 := newTestMetrics(t)
	recordEverything(context.Background(), m0)
	def := seriesNames(scrape0())
	var only []string
	for _, n := range seriesNames(body) {
		if !slices.Contains(def, n) {
			only = append(only, n)
		}
	}
	compareNames(t, perHuntMetrics, only, *updateMetricNames)
}

// TestPerHuntCapIsStickyAndCounted: at most n hunts are itemised, the first in id order of the
// set loaded, and they stay itemised when a later set sorts others first; the runs of the
// rest count in the series without hunt_id (so sums stay the totals) and in the omitted gauge.
func TestPerHuntCapIsStickyAndCounted(t *testing.T) {
	ctx := context.Background()
	m, scrape := newTestMetrics(t, WithPerHunt(2))
	r := metricsRunner(nil, "", "", nil)
	m.observe(r)
	m.huntsLoaded(r, &hunt.Set{Hash: "1", Hunts: []hunt.Hunt{{ID: "b"}, {ID: "c"}, {ID: "d"}}})
	m.huntsLoaded(r, &hunt.Set{Hash: "2", Hunts: []hunt.Hunt{{ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "d"}, {ID: "e"}}})
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		m.runDone(ctx, id, hunt.KindScheduled, hunt.RunSucceeded, time.Second, 1)
	}
	body := scrape()
	for _, want := range []string{`hunt_runner_runs_total{hunt_id="b",kind="scheduled",outcome="succeeded"} 1`,
		`hunt_runner_runs_total{hunt_id="c",kind="scheduled",outcome="succeeded"} 1`,
		`hunt_runner_runs_total{kind="scheduled",outcome="succeeded"} 3`,
		`hunt_runner_rows_written_total 3`, `hunt_runner_hunts_loaded 5`, `hunt_runner_metrics_hunts_omitted 3`} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("metrics lack %s", want)
		}
	}
	if n := strings.Count(body, "hunt_runner_runs_total{hunt_id="); n != 2 {
		t.Errorf("%d hunts itemised, want the cap of 2:\n%s", n, body)
	}
	if t.Failed() {
		t.Log(body)
	}
}

// TestNewMetricsRefusesPerHuntPastTheCap: the cap is what MetricsSeriesLimit is sized for.
func TestNewMetricsRefusesPerHuntPastTheCap(t *testing.T) {
	tel, err := serve.NewTelemetry(context.Background(), serve.TelemetryOptions{Service: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{-1, MetricsPerHuntMax + 1} {
		if _, err := NewMetrics(tel.Meter, time.Second, WithPerHunt(n)); err == nil {
			t.Errorf("per-hunt metrics for %d hunts accepted", n)
		}
	}
}

// TestNoSeriesFoldedAtTheCap: the most series per-hunt metrics can produce (every itemised
// hunt and the rest, every outcome and kind) all reach the exposition under
// MetricsSeriesLimit, where the SDK's default limit folds them into otel_metric_overflow.
func TestNoSeriesFoldedAtTheCap(t *testing.T) {
	ctx := context.Background()
	hunts := make([]hunt.Hunt, MetricsPerHuntMax+1)
	for i := range hunts {
		hunts[i].ID = fmt.Sprintf("h%05d", i)
	}
	want := (MetricsPerHuntMax + 1) * len(runOutcomes) * len(runKinds)
	for _, c := range []struct {
		limit    int
		overflow bool
	}{{MetricsSeriesLimit(MetricsPerHuntMax), false}, {0, true}} {
		tel, err := serve.NewTelemetry(ctx, serve.TelemetryOptions{Service: "test", SeriesLimit: c.limit})
		if err != nil {
			t.Fatal(err)
		}
		m, err := NewMetrics(tel.Meter, time.Second, WithPerHunt(MetricsPerHuntMax))
		if err != nil {
			t.Fatal(err)
		}
		r := metricsRunner(nil, "", "", nil)
		m.observe(r)
		m.huntsLoaded(r, &hunt.Set{Hash: "all", Hunts: hunts})
		for _, h := range hunts {
			for _, o := range runOutcomes {
				for _, k := range runKinds {
					m.runDone(ctx, h.ID, k, o, time.Second, 0)
				}
			}
		}
		body := scrape(t, tel)
		got := strings.Count(body, "\nhunt_runner_runs_total{")
		if folded := strings.Contains(body, "otel_metric_overflow"); folded != c.overflow || (!folded && got != want) {
			t.Errorf("series limit %d: %d runs series (want %d), overflow series %v (want %v)", c.limit, got, want, folded, c.overflow)
		}
	}
}

// seriesNames are the distinct series names of a Prometheus text exposition, sorted.
func seriesNames(body string) []string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		if name != "target_info" && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// compareNames checks that every name the list holds is still exported; a name added since
// is only logged, so a new metric does not break the build until the chart wants it.
func compareNames(t *testing.T, file string, got []string, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(file, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run with -update-metric-names)", err)
	}
	listed := strings.Fields(string(b))
	for _, name := range listed {
		if !slices.Contains(got, name) {
			t.Errorf("%s lists %s, which is no longer exported: the chart's alerts and dashboard may use it", file, name)
		}
	}
	for _, name := range got {
		if !slices.Contains(listed, name) {
			t.Logf("%s is exported but not in %s (-update-metric-names adds it)", name, file)
		}
	}
}

// A fresh runner's totals are all there at 0, with every label value they take, so that a new
// dashboard has no holes and the first failure, gap or error is an increase Prometheus sees.
func TestCountersInitialised(t *testing.T) {
	_, scrape := newTestMetrics(t)
	body := scrape()
	var want []string
	for _, k := range runKinds {
		for _, o := range runOutcomes {
			want = append(want, fmt.Sprintf(`hunt_runner_runs_total{kind="%s",outcome="%s"} 0`, k, o))
		}
	}
	for _, o := range claimOutcomes {
		want = append(want, fmt.Sprintf(`hunt_runner_claims_total{outcome="%s"} 0`, o))
	}
	for _, s := range errorStages {
		want = append(want, fmt.Sprintf(`hunt_runner_clickhouse_errors_total{stage="%s"} 0`, s))
	}
	want = append(want, `hunt_runner_cap_deferred_total{stage="plan"} 0`, `hunt_runner_cap_deferred_total{stage="claim"} 0`)
	want = append(want, "hunt_runner_rows_written_total 0", "hunt_runner_gaps_total 0", "hunt_runner_findings_dropped_total 0",
		"hunt_runner_findings_truncated_total 0", "hunt_runner_findings_severity_fallback_total 0", "hunt_runner_overruns_total 0")
	for _, w := range want {
		if !strings.Contains(body, w+"\n") {
			t.Errorf("a fresh runner's metrics lack %s", w)
		}
	}
	if t.Failed() {
		t.Log(body)
	}
}

// metricsRunner is a runner with only what metrics read: the last plan (behind, of a set of
// hash setHash, none if ""), the published hash and the hunts other sets publish.
func metricsRunner(behind map[string]int64, setHash, pubHash string, foreign map[string]string) *Runner {
	r := &Runner{planner: newPlanner(time.Second), owners: &ownership{foreign: map[string]string{}},
		exec: newExecutor(Options{Concurrency: 1}, nil, nil), pub: &publication{hash: pubHash}}
	if foreign != nil {
		r.owners.foreign = foreign
	}
	if setHash != "" {
		r.planner.remember(plan{Behind: behind}, &hunt.Set{Hash: setHash})
	}
	return r
}
