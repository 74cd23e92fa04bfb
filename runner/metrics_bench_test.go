package runner

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hunt-runner/hunt-runner/hunt"
	"github.com/hunt-runner/hunt-runner/internal/serve"
)

// BenchmarkMetricsExposition measures /metrics with 1,000, 10,000 and 100,000 loaded hunts
// and default flags (the telemetry `run` builds: runtime collectors and target_info), side by
// side in one run: every hunt planned, in the health map (a tenth failing, a tenth behind),
// and run once; a hundredth also failed, recorded a gap and dropped findings. It reports
// lines and bytes at each size and lines at 100,000 against the target of issue 29: at most
// 2 × the lines at 1,000 + 2,000 (the benchmark fails past it). For sizing the opt-in, it
// also reports lines at 100,000 hunts with --metrics-per-hunt at its most (MetricsPerHuntMax).
// ns/op is one scrape of each.
func BenchmarkMetricsExposition(b *testing.B) {
	sizes := []int{1_000, 10_000, 100_000}
	scrapes := make([]func() string, len(sizes), len(sizes)+1)
	for i, n := range sizes {
		scrapes[i] = loadedMetrics(b, n, MetricsPerHuntDefault)
	}
	scrapes = append(scrapes, loadedMetrics(b, sizes[2], MetricsPerHuntMax))
	lines := make([]int, len(scrapes))
	bytes := make([]int, len(scrapes))
	for b.Loop() {
		for i, scrape := range scrapes {
			body := scrape()
			lines[i], bytes[i] = strings.Count(body, "\n"), len(body)
		}
	}
	for i, n := range sizes {
		b.ReportMetric(float64(lines[i]), fmt.Sprintf("lines@%d", n))
		b.ReportMetric(float64(bytes[i]), fmt.Sprintf("bytes@%d", n))
	}
	b.ReportMetric(float64(lines[3]), fmt.Sprintf("lines@%d/per-hunt=%d", sizes[2], MetricsPerHuntMax))
	target := 2*lines[0] + 2000
	b.ReportMetric(float64(lines[2])/float64(lines[0]), "lines100k/lines1k")
	b.ReportMetric(float64(lines[2])/float64(target), "lines100k/target")
	if lines[2] > target {
		b.Errorf("%d lines at 100,000 hunts, target at most %d (2 × %d at 1,000 + 2,000)", lines[2], target, lines[0])
	}
}

// loadedMetrics is a Metrics itemising perHunt hunts, on the telemetry `run` builds for it,
// that has seen n loaded hunts; and its scrape.
func loadedMetrics(b *testing.B, n, perHunt int) func() string {
	b.Helper()
	ctx := context.Background()
	tel, err := serve.NewTelemetry(ctx, serve.TelemetryOptions{Service: "bench", Runtime: true, TargetInfo: true,
		SeriesLimit: MetricsSeriesLimit(perHunt)})
	if err != nil {
		b.Fatal(err)
	}
	m, err := NewMetrics(tel.Meter, time.Second, WithPerHunt(perHunt))
	if err != nil {
		b.Fatal(err)
	}
	set := &hunt.Set{Hash: fmt.Sprintf("set-%d", n), Hunts: make([]hunt.Hunt, n)}
	r := metricsRunner(nil, "", "", nil)
	behind := make(map[string]int64, n)
	health := make(map[string]HuntHealth, n)
	for i := range set.Hunts {
		id := fmt.Sprintf("hunt-%06d", i)
		set.Hunts[i] = hunt.Hunt{ID: id, Interval: 3600}
		behind[id] = int64(i % 7)
		h := HuntHealth{Interval: 3600, LastSuccess: time.Unix(1_700_000_000, 0)}
		if i%10 == 0 {
			h.ConsecutiveFailures = uint32(1 + i%5)
		}
		if i%10 == 1 {
			h.Lag = 3 * 3600
		}
		health[id] = h
	}
	r.planner.remember(plan{Behind: behind}, set)
	m.observe(r)
	m.huntsLoaded(r, set)
	m.SetHuntHealth(health)
	for i, h := range set.Hunts {
		m.runDone(ctx, h.ID, hunt.KindScheduled, hunt.RunSucceeded, time.Duration(i%300)*time.Second, uint64(i%3))
		if i%100 == 0 {
			m.runDone(ctx, h.ID, hunt.KindScheduled, hunt.RunFailed, time.Second, 0)
			m.gap(ctx, h.ID)
			m.findingsDropped(ctx, h.ID, 5)
		}
	}
	return func() string {
		rec := httptest.NewRecorder()
		tel.MetricsHandler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
}
