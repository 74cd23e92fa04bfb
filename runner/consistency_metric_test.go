package runner

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/internal/serve"
)

// hunt_runner_consistency_info shows the mode cmd/run resolved, and nothing before it is set.
func TestConsistencyInfoGauge(t *testing.T) {
	tel, err := serve.NewTelemetry(context.Background(), serve.TelemetryOptions{Service: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	m, err := NewMetrics(tel.Meter, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	scrape := func() string {
		rec := httptest.NewRecorder()
		tel.MetricsHandler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		b, _ := io.ReadAll(rec.Body)
		return string(b)
	}
	if body := scrape(); strings.Contains(body, "hunt_runner_consistency_info{") {
		t.Fatalf("consistency exported before it was set:\n%s", body)
	}
	m.SetConsistency("quorum")
	body := scrape()
	found := false
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "hunt_runner_consistency_info{") && strings.Contains(line, `mode="quorum"`) && strings.HasSuffix(line, " 1") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no hunt_runner_consistency_info{mode=\"quorum\"} 1 in:\n%s", body)
	}
	var nilMetrics *Metrics
	nilMetrics.SetConsistency("quorum") // a runner without metrics must not panic
}
