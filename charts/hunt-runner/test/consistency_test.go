package charttest

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// clickhouse.consistency reaches every container that connects to ClickHouse: the runner, the
// shim and the Jobs must agree, or a Job's writes would be hidden from quorum reads.
func TestConsistencyValueReachesEveryClickHouseContainer(t *testing.T) {
	r := mustRender(t, base+"---\n"+"clickhouse: {consistency: quorum}\nhuntRunner: {autoscaling: {enabled: true}}\n")
	var containers []corev1.Container
	for _, d := range all[appsv1.Deployment](r) {
		containers = append(containers, d.Spec.Template.Spec.Containers...)
	}
	for _, j := range all[batchv1.Job](r) {
		containers = append(containers, j.Spec.Template.Spec.Containers...)
	}
	n := 0
	for _, c := range containers {
		if env(c, "HUNT_RUNNER_CLICKHOUSE_URL") == nil {
			continue
		}
		n++
		if e := env(c, "HUNT_RUNNER_CONSISTENCY"); e == nil || e.Value != "quorum" {
			t.Errorf("container %s: HUNT_RUNNER_CONSISTENCY %+v, want quorum", c.Name, e)
		}
	}
	if n < 3 { // runner, shim, materialise at least
		t.Fatalf("only %d containers connect to ClickHouse; objects: %s", n, r.summary())
	}
	d := one[appsv1.Deployment](t, mustRender(t, base), runnerName)
	if e := env(d.Spec.Template.Spec.Containers[0], "HUNT_RUNNER_CONSISTENCY"); e == nil || e.Value != "auto" {
		t.Errorf("default consistency %+v, want auto", e)
	}
	if _, err := renderChart(t, base+"---\n"+"clickhouse: {consistency: strong}\n"); err == nil || !strings.Contains(err.Error(), "consistency") {
		t.Errorf("an unknown consistency was accepted: %v", err)
	}
}
