package charttest

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestRunnerStatusAuth: with huntRunner.status.existingSecret the runner requires its token
// (the file mounted from the Secret's key); by default it is told explicitly that the page is
// served without one; with neither the chart refuses, naming both values.
func TestRunnerStatusAuth(t *testing.T) {
	d := one[appsv1.Deployment](t, mustRender(t, base+"---\nhuntRunner: {status: {existingSecret: hr-status, tokenKey: bearer}}\n"), runnerName)
	c := d.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--status-token-file=/etc/hunt-runner/status-auth/token") || slices.Contains(c.Args, "--status-unauthenticated") {
		t.Errorf("args %v", c.Args)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.Name == "status-auth" && m.MountPath == "/etc/hunt-runner/status-auth" && m.ReadOnly)
	}
	found := false
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "status-auth" && v.Secret != nil && v.Secret.SecretName == "hr-status" && len(v.Secret.Items) == 1 &&
			v.Secret.Items[0].Key == "bearer" && v.Secret.Items[0].Path == "token" {
			found = true
		}
	}
	if !mounted || !found {
		t.Errorf("the token Secret is not mounted: mounts %v volumes %v", c.VolumeMounts, d.Spec.Template.Spec.Volumes)
	}
	def := one[appsv1.Deployment](t, mustRender(t, base), runnerName).Spec.Template.Spec.Containers[0]
	if !slices.Contains(def.Args, "--status-unauthenticated") {
		t.Errorf("default args %v lack the explicit --status-unauthenticated", def.Args)
	}
	_, err := renderChart(t, base+"---\nhuntRunner: {status: {unauthenticated: false}}\n")
	if err == nil || !strings.Contains(err.Error(), "huntRunner.status.existingSecret") || !strings.Contains(err.Error(), "unauthenticated: true") {
		t.Errorf("neither a token nor unauthenticated: %v", err)
	}
}
