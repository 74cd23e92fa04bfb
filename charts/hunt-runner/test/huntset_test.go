package charttest

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// huntSet reaches the runner (its published-hash check) and the materialise hook (what it
// publishes and tombstones), and only those: the shim counts every set in the database.
func TestHuntSetReachesRunnerAndMaterialise(t *testing.T) {
	for values, want := range map[string]string{base: "default", base + "---\nhuntSet: team-b\n": "team-b"} {
		r := mustRender(t, values)
		runner := one[appsv1.Deployment](t, r, runnerName).Spec.Template.Spec.Containers[0]
		mat := one[batchv1.Job](t, r, matName).Spec.Template.Spec.Containers[0]
		for name, c := range map[string]corev1.Container{"runner": runner, "materialise": mat} {
			if e := env(c, "HUNT_RUNNER_HUNT_SET"); e == nil || e.Value != want {
				t.Errorf("%s HUNT_RUNNER_HUNT_SET = %+v, want %q", name, e, want)
			}
		}
	}
	r := mustRender(t, base+"---\nhuntSet: team-b\nshim: {enabled: true}\n")
	if e := env(one[appsv1.Deployment](t, r, shimName).Spec.Template.Spec.Containers[0], "HUNT_RUNNER_HUNT_SET"); e != nil {
		t.Errorf("the shim was narrowed to a hunt set: %+v", e)
	}
	if _, err := renderChart(t, base+"---\nhuntSet: \"team b\"\n"); err == nil {
		t.Error("a hunt set name with a space rendered")
	}
	if _, err := renderChart(t, base+"---\nschema: {findingsTTL: 36h}\n"); err == nil {
		t.Error("schema.findingsTTL 36h rendered")
	}
}
