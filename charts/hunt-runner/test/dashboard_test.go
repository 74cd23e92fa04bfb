package charttest

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestDashboardFiltersEveryRunnerPanelAndHasNoHoles: every runner series is narrowed by the
// $job filter (it applied to one panel), every counter query answers 0 before the first event
// (a fresh install showed empty panels), and notifications have panels.
func TestDashboardFiltersEveryRunnerPanelAndHasNoHoles(t *testing.T) {
	cm := one[corev1.ConfigMap](t, mustRender(t, opsValues), "hr-hunt-runner-dashboard")
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal([]byte(cm.Data["hunt-runner.json"]), &dash); err != nil {
		t.Fatal(err)
	}
	names := exported(t)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			expr := grafanaVars.ReplaceAllString(tg.Expr, "5m")
			for _, vs := range selectors(t, p.Title, strings.NewReplacer("$namespace", "hunts", "$job", "hr-hunt-runner").Replace(expr)) {
				used[vs.Name] = true
				if names[vs.Name] != "runner" && vs.Name != "up" {
					continue
				}
				job := false
				for _, m := range vs.LabelMatchers {
					job = job || (m.Name == "job" && m.Value == "hr-hunt-runner")
				}
				if !job {
					t.Errorf("panel %q: %s without the $job filter: %s", p.Title, vs.Name, tg.Expr)
				}
				if strings.HasSuffix(vs.Name, "_total") && !strings.Contains(tg.Expr, "or vector(0)") {
					t.Errorf("panel %q: counter %s shows nothing before its first event: %s", p.Title, vs.Name, tg.Expr)
				}
			}
		}
	}
	for _, m := range []string{"hunt_runner_notifications_total", "hunt_runner_notify_pending", "hunt_runner_notify_dead",
		"hunt_runner_notify_delivery_latency_seconds_bucket", "hunt_runner_hunts_stale"} {
		if !used[m] {
			t.Errorf("no panel shows %s", m)
		}
	}
}
