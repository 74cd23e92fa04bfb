package runner

import (
	"context"
	"flag"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/serve"
)

var updateMetricNames = flag.Bool("update-metric-names", false, "rewrite the chart test's list of exported runner metrics")

// exportedMetrics is the list the chart's tests check every alert and dashboard panel
// against: a rule on a metric the runner does not export would never fire.
var exportedMetrics = filepath.Join("..", "charts", "hunt-runner", "test", "testdata", "exported-metrics", "runner.txt")

// TestExportedMetricNames records once with every instrument and compares the series names
// the runner exports with the chart test's list.
func TestExportedMetricNames(t *testing.T) {
	ctx := context.Background()
	tel, err := serve.NewTelemetry(ctx, serve.TelemetryOptions{Service: "test"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(tel.Meter, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	m.runDone(ctx, "h", hunt.RunSucceeded, time.Second, 3)
	m.claims(ctx, "won", 1)
	m.findingsDropped(ctx, "h", 1)
	m.findingsTruncated(ctx, "h", 1)
	m.gap(ctx, "h")
	m.overrun(ctx, "h")
	m.clickhouseError(ctx, "claim")
	m.tickDone(ctx, time.Second)
	m.claimInserted(ctx, 200*time.Millisecond)
	m.setReplicaDelay(time.Second)
	m.observe(&Runner{behind: map[string]int64{"h": 1}, setHash: "a", pubHash: "b", foreign: map[string]string{"f": "other"}})
	m.SetHuntHealth(map[string]HuntHealth{"h": {Interval: 60, LastSuccess: time.Now()}, "n": {Interval: 60, Lag: 5, ConsecutiveFailures: 2}})
	m.Reloaded(ctx, ReloadOK)
	m.ObserveHuntFiles(func() (HuntFiles, bool) { return HuntFiles{Invalid: 2, Stale: 1}, true })

	rec := httptest.NewRecorder()
	tel.MetricsHandler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	got := seriesNames(body)
	for _, want := range []string{`hunt_runner_never_succeeded{hunt_id="n"} 1`, `hunt_runner_never_succeeded{hunt_id="h"} 0`,
		`hunt_runner_consecutive_failures{hunt_id="n"} 2`, `hunt_runner_hunt_files_invalid 2`, `hunt_runner_hunts_stale 1`, `hunt_runner_reloads_total{outcome="ok"} 1`,
		`hunt_runner_hunt_lag_seconds{hunt_id="n"} 5`, `hunt_runner_hunt_interval_seconds{hunt_id="h"} 60`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if !strings.Contains(body, `hunt_runner_reloads_total{outcome="error"} 0`) {
		t.Error("the reload counter's error outcome is not initialised")
	}
	if strings.Contains(body, `hunt_runner_last_success_timestamp_seconds{hunt_id="n"}`) {
		t.Error("a hunt that never succeeded has a last success time")
	}
	compareNames(t, exportedMetrics, got, *updateMetricNames)
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
