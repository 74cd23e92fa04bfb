package charttest

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// opsValues turns on the ops pack with the shim, so every alert has its scrape job.
const opsValues = base + "---\n" + `huntRunner: {autoscaling: {enabled: true}}
metrics: {serviceMonitor: {enabled: true}, dashboard: {enabled: true}, prometheusRule: {enabled: true, labels: {release: kps}}}
`

// The alerts issue 15 asks for, plus the hunt source and the shim's query health.
var wantAlerts = []string{"HuntFailing", "HuntNeverSucceeded", "HuntBehind", "HuntNoData", "HuntOverBudget", "HuntGapRecorded", "HuntRunnerDown",
	"HuntRunnerPublishedSetOutOfDate", "HuntFilesInvalid", "HuntSourceUnreadable", "HuntShimHoldingStaleValue",
	"HuntShimQueryFailing", "HuntNoRunnerSeen", "HuntNotificationsDeadLettered"}

// exported are the series the runner and the shim export with default flags: runner and
// shim tests keep testdata/exported-metrics in step with the code (TestExportedMetricNames),
// plus Prometheus' own up. runner-per-hunt.txt, the series only --metrics-per-hunt adds, is
// left out: the shipped alerts and dashboard must work without it.
func exported(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{"up": "any"}
	for _, file := range []string{"runner", "shim", "notify"} {
		who := file
		if file == "notify" {
			who = "runner" // the runner process exports notify's series
		}
		b, err := os.ReadFile(filepath.Join("testdata", "exported-metrics", file+".txt"))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range strings.Fields(string(b)) {
			out[n] = who
		}
	}
	return out
}

var promql = parser.NewParser(parser.Options{})

// selectors parses expr with Prometheus' parser and returns its vector selectors.
func selectors(t *testing.T, where, expr string) []*parser.VectorSelector {
	t.Helper()
	e, err := promql.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %v\n%s", where, err, expr)
		return nil
	}
	var out []*parser.VectorSelector
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs)
		}
		return nil
	})
	return out
}

func TestOpsPackOffByDefault(t *testing.T) {
	r := mustRender(t, base)
	if len(all[monitoringv1.PrometheusRule](r)) != 0 || r.has("ConfigMap", "hr-hunt-runner-dashboard") {
		t.Errorf("the ops pack renders by default: %s", r.summary())
	}
}

// The rules render, pass Prometheus' own rule-file parser (expressions, durations, label and
// annotation templates), cover every alert, select only this release's jobs, and use only
// series the runner and the shim export.
func TestPrometheusRuleParsesAndUsesExportedMetrics(t *testing.T) {
	r := mustRender(t, opsValues)
	pr := one[monitoringv1.PrometheusRule](t, r, "hr-hunt-runner")
	if pr.Labels["release"] != "kps" {
		t.Errorf("labels %v lack the ruleSelector label", pr.Labels)
	}
	// A rule file is the spec's groups; Prometheus Operator hands them to Prometheus as is.
	spec, err := yaml.Marshal(pr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(spec, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("rulefmt: %v", err)
	}
	if groups == nil {
		t.Fatalf("no rule groups:\n%s", spec)
	}
	names := exported(t)
	jobs := map[string]string{"runner": "hr-hunt-runner", "shim": "hr-hunt-runner-shim", "any": "hr-hunt-runner"}
	var alerts []string
	for _, g := range groups.Groups {
		for _, rule := range g.Rules {
			alerts = append(alerts, rule.Alert)
			for _, vs := range selectors(t, rule.Alert, rule.Expr) {
				who, ok := names[vs.Name]
				if !ok {
					t.Errorf("%s uses %s, which neither the runner nor the shim exports", rule.Alert, vs.Name)
					continue
				}
				var job, ns string
				for _, m := range vs.LabelMatchers {
					switch m.Name {
					case "job":
						job = m.Value
					case "namespace":
						ns = m.Value
					}
				}
				if job != jobs[who] || ns != namespace {
					t.Errorf("%s selects %s from job %q namespace %q, want job %q namespace %q", rule.Alert, vs.Name, job, ns, jobs[who], namespace)
				}
			}
			if strings.Contains(rule.Expr, "hunt_id") || strings.Contains(rule.Annotations["summary"]+rule.Annotations["description"], "hunt_id") {
				t.Errorf("%s needs per-hunt series, which runners export only with --metrics-per-hunt: %s", rule.Alert, rule.Expr)
			}
			if rule.Annotations["summary"] == "" || rule.Labels["severity"] == "" {
				t.Errorf("%s lacks a summary or a severity", rule.Alert)
			}
		}
	}
	slices.Sort(alerts)
	want := slices.Sorted(slices.Values(wantAlerts))
	if !slices.Equal(alerts, want) {
		t.Errorf("alerts %v, want %v", alerts, want)
	}
	if !r.has("Service", "hr-hunt-runner-shim") || !r.has("Service", "hr-hunt-runner") {
		t.Errorf("the jobs the rules select are not this release's Services: %s", r.summary())
	}
}

// A broken expression must fail the parser the test relies on.
func TestRuleParserRejectsABrokenExpression(t *testing.T) {
	bad := []byte("groups:\n- name: x\n  rules:\n  - alert: X\n    expr: max by (hunt_id (hunt_runner_consecutive_failures)\n")
	if _, errs := rulefmt.Parse(bad, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler)); len(errs) == 0 {
		t.Fatal("rulefmt accepted a broken expression")
	}
}

var grafanaVars = regexp.MustCompile(`\$\{?__rate_interval\}?|\$\{?__interval\}?`)

// The dashboard ships in a ConfigMap the Grafana sidecar loads, is valid JSON, and every
// panel's queries parse and use only exported series.
func TestDashboardConfigMapLoadsAndUsesExportedMetrics(t *testing.T) {
	r := mustRender(t, opsValues)
	cm := one[corev1.ConfigMap](t, r, "hr-hunt-runner-dashboard")
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("labels %v: the Grafana sidecar will not load it", cm.Labels)
	}
	var dash struct {
		UID    string
		Title  string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal([]byte(cm.Data["hunt-runner.json"]), &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if dash.UID == "" || len(dash.Panels) < 10 {
		t.Fatalf("dashboard %q with %d panels", dash.UID, len(dash.Panels))
	}
	names := exported(t)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.Contains(tg.Expr, "hunt_id") {
				t.Errorf("panel %q needs per-hunt series, which runners export only with --metrics-per-hunt: %s", p.Title, tg.Expr)
			}
			expr := grafanaVars.ReplaceAllString(tg.Expr, "5m")
			expr = strings.NewReplacer("$namespace", "hunts", "$job", "hr-hunt-runner").Replace(expr)
			for _, vs := range selectors(t, p.Title, expr) {
				used[vs.Name] = true
				if _, ok := names[vs.Name]; !ok {
					t.Errorf("panel %q uses %s, which neither the runner nor the shim exports", p.Title, vs.Name)
				}
			}
		}
	}
	for _, m := range []string{"hunt_runner_hunts_behind", "hunt_runner_hunts_failing", "hunt_runner_consecutive_failures_max",
		"hunt_runner_hunts_never_succeeded", "hunt_runner_lag_intervals_max", "hunt_runner_runs_total", "hunt_shim_query_up"} {
		if !used[m] {
			t.Errorf("no panel shows %s", m)
		}
	}
	r2 := mustRender(t, opsValues+"---\nmetrics: {dashboard: {namespace: monitoring, annotations: {grafana_folder: Security}}}\n")
	cm = one[corev1.ConfigMap](t, r2, "hr-hunt-runner-dashboard")
	if cm.Namespace != "monitoring" || cm.Annotations["grafana_folder"] != "Security" {
		t.Errorf("dashboard namespace %q annotations %v", cm.Namespace, cm.Annotations)
	}
}
