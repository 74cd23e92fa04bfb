package shim

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
)

var updateMetricNames = flag.Bool("update-metric-names", false, "rewrite the chart test's list of exported shim metrics")

// TestExportedMetricNames records once with every instrument and checks the chart test's list
// of shim series (which its alerts and dashboard are checked against) is still exported.
func TestExportedMetricNames(t *testing.T) {
	m, err := NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	c := newCache(10, 10)
	c.entries["k"] = &entry{query: &Query{Name: BacklogQuery, MaxStale: time.Minute}, holding: true, good: true,
		goodAt: now.Add(-time.Hour)}
	if err := m.observeHeld(c, func() time.Time { return now }); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m.request(ctx, BacklogQuery, "fresh")
	m.held(ctx, BacklogQuery, ReasonUnreachable)
	m.queryDuration(ctx, BacklogQuery, time.Millisecond, false)

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	if !strings.Contains(body, `hunt_shim_query_up{query="hunt-backlog"} 0`) || !strings.Contains(body, `hunt_shim_held_stale{query="hunt-backlog"} 1`) {
		t.Errorf("metrics:\n%s", body)
	}
	var got []string
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		if !slices.Contains(got, name) {
			got = append(got, name)
		}
	}
	slices.Sort(got)
	file := filepath.Join("..", "charts", "hunt-runner", "test", "testdata", "exported-metrics", "shim.txt")
	if *updateMetricNames {
		if err := os.WriteFile(file, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run with -update-metric-names)", err)
	}
	for _, name := range strings.Fields(string(b)) {
		if !slices.Contains(got, name) {
			t.Errorf("%s lists %s, which is no longer exported", file, name)
		}
	}
}
