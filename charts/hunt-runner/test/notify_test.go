package charttest

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// notify.config becomes a ConfigMap the runner reads with --notify-config; notify.secrets are
// mounted read-only where the config names their files; without either nothing is rendered.
func TestNotifyConfigAndSecrets(t *testing.T) {
	r := mustRender(t, base+"---\n"+`
notify:
  config: |
    sinks:
      - name: soc
        type: webhook
        url: http://hooks.internal/hunts
        secret_file: /etc/hunt-runner/notify-secrets/hooks/soc
    routes:
      - sinks: [soc]
  secrets: [hooks]
`)
	checkInvariants(t, r, namespace)
	checkCLIContract(t, r)
	cm := one[corev1.ConfigMap](t, r, runnerName+"-notify")
	if !strings.Contains(cm.Data["notify.yaml"], "secret_file: /etc/hunt-runner/notify-secrets/hooks/soc") {
		t.Errorf("notify ConfigMap %v", cm.Data)
	}
	d := one[appsv1.Deployment](t, r, runnerName)
	c := d.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, "--notify-config=/etc/hunt-runner/notify/notify.yaml") {
		t.Errorf("runner args %v", c.Args)
	}
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	if m := mounts["notify-config"]; m.MountPath != "/etc/hunt-runner/notify" || !m.ReadOnly {
		t.Errorf("config mount %+v", m)
	}
	if m := mounts["notify-secret-hooks"]; m.MountPath != "/etc/hunt-runner/notify-secrets/hooks" || !m.ReadOnly {
		t.Errorf("secret mount %+v", m)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		vols[v.Name] = v
	}
	if v := vols["notify-config"]; v.ConfigMap == nil || v.ConfigMap.Name != runnerName+"-notify" {
		t.Errorf("config volume %+v", v)
	}
	if v := vols["notify-secret-hooks"]; v.Secret == nil || v.Secret.SecretName != "hooks" {
		t.Errorf("secret volume %+v", v)
	}

	plain := mustRender(t, base)
	if plain.has("ConfigMap", runnerName+"-notify") {
		t.Error("a notify ConfigMap without notify.config")
	}
	for _, a := range one[appsv1.Deployment](t, plain, runnerName).Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--notify-config") {
			t.Errorf("runner gets %s without notify.config", a)
		}
	}
}
