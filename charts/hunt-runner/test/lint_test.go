package charttest

import (
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"
	"sigs.k8s.io/yaml"
)

// Helm's own lint (what `helm lint --strict` runs): Chart.yaml, values against the schema,
// templates rendering and parsing as YAML, deprecated APIs. Warnings count as failures.
func TestHelmLint(t *testing.T) {
	for _, values := range []string{
		base,
		base + "huntRunner: {autoscaling: {enabled: true, minReplicaCount: 0}}\nmetrics: {serviceMonitor: {enabled: true}}\nnetworkPolicy: {enabled: true}\n",
	} {
		vals := map[string]any{}
		if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
			t.Fatal(err)
		}
		lint := action.NewLint()
		lint.Strict = true
		lint.Namespace = namespace
		res := lint.Run([]string{chartDir}, vals)
		if res.TotalChartsLinted != 1 {
			t.Fatalf("linted %d charts", res.TotalChartsLinted)
		}
		for _, m := range res.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("helm lint: %s", m)
			}
		}
		for _, err := range res.Errors {
			t.Errorf("helm lint error: %v", err)
		}
	}
}

// values.schema.json rejects typos (additionalProperties: false at every level) and wrong types
// before any template runs, and accepts every documented value.
func TestValuesSchema(t *testing.T) {
	ch := loadChart(t)
	cases := []struct{ name, values, want string }{
		{"top-level typo", "huntRuner: {enabled: true}", "huntRuner"},
		{"nested typo", "huntRunner: {autoscaling: {minReplicas: 0}}", "minReplicas"},
		{"typo deep in fallback", "huntRunner: {autoscaling: {fallback: {failureTreshold: 3}}}", "failureTreshold"},
		{"string for an integer", `huntRunner: {autoscaling: {maxReplicaCount: "5"}}`, "maxReplicaCount"},
		{"negative minimum", "huntRunner: {autoscaling: {minReplicaCount: -1}}", "minReplicaCount"},
		{"fallback behaviour enum", "huntRunner: {autoscaling: {fallback: {behavior: holdCurrent}}}", "behavior"},
		{"source enum", "huntRunner: {autoscaling: {source: prometheus}}", "source"},
		{"hunts source enum", "hunts: {source: s3}", "source"},
		{"hook style enum", "hooks: {style: flux}", "style"},
		{"log level enum", "logLevel: verbose", "logLevel"},
		{"bool as string", `huntRunner: {enabled: "yes"}`, "enabled"},
		{"shim address with scheme", `huntRunner: {autoscaling: {shimAddress: "http://shim:8081"}}`, "shimAddress"},
		{"duration", "huntRunner: {tick: 5}", "tick"},
		{"bad duration", "huntRunner: {lease: 5minutes}", "lease"},
		{"spread fraction above 1", "hunts: {spreadFraction: 1.5}", "spreadFraction"},
		{"URL scheme", `clickhouse: {url: "tcp://ch:9000"}`, "url"},
		{"hunt file name", `hunts: {configMap: {files: {"../x.yaml": "id: x"}}}`, "../x.yaml"},
		{"port range", "shim: {port: 70000}", "port"},
		{"scale-down policy type", "huntRunner: {autoscaling: {behavior: {scaleDown: {policies: [{type: Replicas, value: 1, periodSeconds: 60}]}}}}", "type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vals := map[string]any{}
			if err := yaml.Unmarshal([]byte(c.values), &vals); err != nil {
				t.Fatal(err)
			}
			merged, err := chartutil.CoalesceValues(ch, vals)
			if err != nil {
				t.Fatal(err)
			}
			err = chartutil.ValidateAgainstSchema(ch, merged)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want a schema error naming %q, got %v", c.want, err)
			}
			// And the whole render path refuses it too.
			if _, err := renderChart(t, base+"---\n"+c.values); err == nil {
				t.Fatal("render accepted values the schema rejects")
			}
		})
	}
}
