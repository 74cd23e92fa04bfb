package charttest

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestConfigChangesRollTheRunner: what the runner reads only at start (the notify config, the
// chart-made password Secret) is in a checksum annotation of its pod template, so helm upgrade
// rolls the pods; the hunt files, reloaded live, are not (a restart would lose a broken file's
// last good definition).
func TestConfigChangesRollTheRunner(t *testing.T) {
	annotations := func(values string) map[string]string {
		t.Helper()
		return one[appsv1.Deployment](t, mustRender(t, base+"---\n"+values), runnerName).Spec.Template.Annotations
	}
	notifyA := "notify: {config: \"sinks: [{name: a, type: webhook, url: 'http://a'}]\\nroutes: [{sinks: [a]}]\\n\"}\n"
	notifyB := "notify: {config: \"sinks: [{name: b, type: webhook, url: 'http://b'}]\\nroutes: [{sinks: [b]}]\\n\"}\n"
	for _, c := range []struct {
		name, key, a, b string
		rolls           bool
	}{
		{"notify config", "checksum/notify", notifyA, notifyB, true},
		{"password", "checksum/secrets", "clickhouse: {password: one}\n", "clickhouse: {password: two}\n", true},
		{"hunt files", "checksum/notify", "hunts: {configMap: {files: {a.yaml: 'id: a'}}}\n", "hunts: {configMap: {files: {a.yaml: 'id: b'}}}\n", false},
	} {
		a, b := annotations(c.a), annotations(c.b)
		if a[c.key] == "" {
			t.Errorf("%s: no %s annotation: %v", c.name, c.key, a)
		}
		changed := false
		for k, v := range a {
			changed = changed || b[k] != v
		}
		if changed != c.rolls {
			t.Errorf("%s: a change rolls the pods: %v, want %v (%v → %v)", c.name, changed, c.rolls, a, b)
		}
	}
}
