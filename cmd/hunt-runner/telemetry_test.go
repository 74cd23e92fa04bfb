package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/hunt-runner/hunt-runner/runner"
)

// TestRunnerTelemetryHoldsWhatPerHuntMetricsProduce: the telemetry of `run` at the largest
// --metrics-per-hunt lets one instrument hold runner.MetricsSeriesLimit series, more than the
// SDK's default limit of 2,000, without folding any into otel_metric_overflow.
func TestRunnerTelemetryHoldsWhatPerHuntMetricsProduce(t *testing.T) {
	ctx := context.Background()
	tel, err := runnerTelemetry(ctx, "test", runner.MetricsPerHuntMax)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(ctx) }()
	c, err := tel.Meter.Int64Counter("probe")
	if err != nil {
		t.Fatal(err)
	}
	n := runner.MetricsSeriesLimit(runner.MetricsPerHuntMax) - 1 // the SDK keeps one for the overflow series
	for i := range n {
		c.Add(ctx, 1, metric.WithAttributes(attribute.String("k", fmt.Sprint(i))))
	}
	rec := httptest.NewRecorder()
	tel.MetricsHandler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	if got := strings.Count(body, "\nprobe_total{"); got != n || strings.Contains(body, "otel_metric_overflow") {
		t.Errorf("%d of %d series exported, overflow series: %v", got, n, strings.Contains(body, "otel_metric_overflow"))
	}
}
