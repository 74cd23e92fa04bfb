package main

import (
	"context"
	"flag"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hunt-runner/hunt-runner/internal/serve"
	"github.com/hunt-runner/hunt-runner/notify"
)

var updateNotifyMetricNames = flag.Bool("update-notify-metric-names", false, "rewrite the chart test's list of notify metrics")

// TestNotifyExportedMetricNames keeps the chart test's list of the series a runner with
// notifications exports (its alerts and panels are checked against it) in step with notify's
// instruments. Counters appear with their first event, so the list names what a runner that
// delivered once exports; the gauges are there from the start.
func TestNotifyExportedMetricNames(t *testing.T) {
	tel, err := serve.NewTelemetry(context.Background(), serve.TelemetryOptions{Service: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := notify.NewMetrics(tel.Meter); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	tel.MetricsHandler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	var got []string
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		if strings.HasPrefix(name, "hunt_runner_notify") && !slices.Contains(got, name) {
			got = append(got, name)
		}
	}
	// The counters and the histogram, which have no series before their first event.
	got = append(got, "hunt_runner_notifications_total", "hunt_runner_notify_clickhouse_errors_total",
		"hunt_runner_notify_delivery_latency_seconds_bucket", "hunt_runner_notify_delivery_latency_seconds_count",
		"hunt_runner_notify_delivery_latency_seconds_sum")
	slices.Sort(got)
	got = slices.Compact(got)
	file := filepath.Join("..", "..", "charts", "hunt-runner", "test", "testdata", "exported-metrics", "notify.txt")
	if *updateNotifyMetricNames {
		if err := os.WriteFile(file, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run with -update-notify-metric-names)", err)
	}
	for _, name := range strings.Fields(string(b)) {
		if !slices.Contains(got, name) {
			t.Errorf("%s lists %s, which notify no longer exports", file, name)
		}
	}
	for _, want := range []string{"hunt_runner_notify_dead", "hunt_runner_notify_pending"} {
		if !slices.Contains(got, want) {
			t.Errorf("notify does not export %s from the start", want)
		}
	}
}
