package charttest

import (
	"encoding/base64"
	"path"
	"slices"
	"strings"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// base is the least a user must give: where ClickHouse is.
const base = `
clickhouse:
  url: clickhouse://clickhouse.db.svc.cluster.local:9000
`

const (
	runnerName = releaseName + "-hunt-runner"
	shimName   = runnerName + "-shim"
	matName    = runnerName + "-materialise"
	shimURL    = "http://" + shimName + "." + namespace + ".svc.cluster.local:8081/keda/hunt-backlog"
)

func env(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func TestRenderMatrix(t *testing.T) {
	cases := []struct {
		name   string
		values string
		check  func(t *testing.T, r *rendered)
	}{
		{
			name:   "defaults",
			values: base,
			check: func(t *testing.T, r *rendered) {
				d := one[appsv1.Deployment](t, r, runnerName)
				if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
					t.Errorf("replicas %v, want 1", d.Spec.Replicas)
				}
				if len(all[kedav1alpha1.ScaledObject](r)) != 0 || r.has("Deployment", shimName) {
					t.Errorf("autoscaling is off by default; got %s", r.summary())
				}
				if r.has("PodDisruptionBudget", runnerName) {
					t.Error("no PDB for a single replica")
				}
				if len(all[corev1.Secret](r)) != 0 {
					t.Error("no Secret unless a password is passed")
				}
				c := d.Spec.Template.Spec.Containers[0]
				if e := env(c, "HUNT_RUNNER_HUNTS_DIR"); e == nil || e.Value != "/etc/hunt-runner/hunts" {
					t.Errorf("hunts dir env %+v", e)
				}
				if env(c, "HUNT_RUNNER_CLICKHOUSE_PASSWORD") != nil || env(c, "HUNT_RUNNER_CLICKHOUSE_PASSWORD_FILE") != nil {
					t.Error("no password configured, none expected")
				}
				if env(c, "HUNT_RUNNER_HUNTS_USER") != nil {
					t.Error("no hunts identity configured, none expected")
				}
				one[corev1.ConfigMap](t, r, runnerName+"-hunts")
				one[corev1.ServiceAccount](t, r, runnerName)
				j := one[batchv1.Job](t, r, matName)
				if j.Annotations["helm.sh/hook"] != "post-install,post-upgrade" {
					t.Errorf("materialise hook %q", j.Annotations["helm.sh/hook"])
				}
				if !strings.Contains(r.Notes, "Job/"+matName) {
					t.Errorf("NOTES must say what was installed:\n%s", r.Notes)
				}
			},
		},
		{
			name: "autoscaling on",
			values: base + "---\n" + `
huntRunner:
  autoscaling:
    enabled: true
`,
			check: func(t *testing.T, r *rendered) {
				so := one[kedav1alpha1.ScaledObject](t, r, runnerName)
				if *so.Spec.MinReplicaCount != 1 || *so.Spec.MaxReplicaCount != 5 || *so.Spec.PollingInterval != 30 || *so.Spec.CooldownPeriod != 300 {
					t.Errorf("defaults: min %d max %d poll %d cooldown %d", *so.Spec.MinReplicaCount, *so.Spec.MaxReplicaCount, *so.Spec.PollingInterval, *so.Spec.CooldownPeriod)
				}
				tr := so.Spec.Triggers[0]
				want := map[string]string{"url": shimURL, "valueLocation": "value", "targetValue": "10", "timeout": "5s"}
				for k, v := range want {
					if tr.Metadata[k] != v {
						t.Errorf("trigger %s = %q, want %q", k, tr.Metadata[k], v)
					}
				}
				fb := so.Spec.Fallback
				if fb == nil || fb.FailureThreshold != 3 || fb.Replicas != 1 || fb.Behavior != kedav1alpha1.FallbackBehaviorCurrentReplicas {
					t.Errorf("fallback %+v", fb)
				}
				b := so.Spec.Advanced.HorizontalPodAutoscalerConfig.Behavior
				if b == nil || b.ScaleDown == nil || *b.ScaleDown.StabilizationWindowSeconds != 300 || b.ScaleDown.Policies[0].Value != 1 {
					t.Errorf("scale-down behavior %+v", b)
				}
				shim := one[appsv1.Deployment](t, r, shimName)
				runner := one[appsv1.Deployment](t, r, runnerName)
				if labels.SelectorFromSet(runner.Spec.Selector.MatchLabels).Matches(labels.Set(shim.Spec.Template.Labels)) {
					t.Error("the runner's selector must not match shim pods")
				}
				if args := shim.Spec.Template.Spec.Containers[0].Args; !slices.Equal(args, []string{"shim", "--listen=:8081", "--timeout=2s", "--otel-database=otel"}) {
					t.Errorf("shim args %v", args)
				}
				if u := env(shim.Spec.Template.Spec.Containers[0], "HUNT_RUNNER_CLICKHOUSE_USER"); u == nil || u.Value != "hunt_scaler" {
					t.Errorf("the shim must use the scaler identity, got %+v", u)
				}
				pdb := one[policyv1.PodDisruptionBudget](t, r, runnerName)
				if pdb.Spec.MaxUnavailable.IntValue() != 1 {
					t.Errorf("PDB %+v", pdb.Spec)
				}
			},
		},
		{
			name: "min 0 explicit survives",
			values: base + "---\n" + `
huntRunner:
  autoscaling:
    enabled: true
    minReplicaCount: 0
    cooldownPeriod: 0
`,
			check: func(t *testing.T, r *rendered) {
				so := one[kedav1alpha1.ScaledObject](t, r, runnerName)
				if *so.Spec.MinReplicaCount != 0 {
					t.Errorf("minReplicaCount %d: an explicit 0 must survive rendering", *so.Spec.MinReplicaCount)
				}
				if *so.Spec.CooldownPeriod != 0 {
					t.Errorf("cooldownPeriod %d: an explicit 0 must survive rendering", *so.Spec.CooldownPeriod)
				}
			},
		},
		{
			name: "source clickhouse",
			values: base + "---\n" + `
huntRunner:
  autoscaling:
    enabled: true
    source: clickhouse
    clickhouse:
      host: clickhouse.db.svc.cluster.local
      existingSecret: hunt-scaler
      tlsKey: tls
`,
			check: func(t *testing.T, r *rendered) {
				if r.has("Deployment", shimName) || r.has("Service", shimName) {
					t.Error("the native trigger needs no shim")
				}
				tr := one[kedav1alpha1.ScaledObject](t, r, runnerName).Spec.Triggers[0]
				if tr.Type != "clickhouse" || tr.Metadata["username"] != "hunt_scaler" || tr.Metadata["port"] != "9000" ||
					tr.Metadata["query"] != "SELECT value FROM hunt_runner.hunt_backlog_v1" || tr.Metadata["targetQueryValue"] != "10" {
					t.Errorf("trigger %+v", tr)
				}
				ta := one[kedav1alpha1.TriggerAuthentication](t, r, tr.AuthenticationRef.Name)
				params := map[string]string{}
				for _, s := range ta.Spec.SecretTargetRef {
					if s.Name != "hunt-scaler" {
						t.Errorf("secretTargetRef %+v", s)
					}
					params[s.Parameter] = s.Key
				}
				if params["password"] != "password" || params["tls"] != "tls" {
					t.Errorf("TriggerAuthentication parameters %v", params)
				}
			},
		},
		{
			name: "git source with cron re-materialise",
			values: base + "---\n" + `
hunts:
  source: git
  git:
    url: https://git.example.com/sec/hunts.git
    ref: v1.2.0
    path: hunts
    existingSecret: git-creds
    tokenKey: token
materialise:
  cronJob:
    enabled: true
`,
			check: func(t *testing.T, r *rendered) {
				for _, ps := range []corev1.PodSpec{
					one[appsv1.Deployment](t, r, runnerName).Spec.Template.Spec,
					one[batchv1.Job](t, r, matName).Spec.Template.Spec,
					one[batchv1.CronJob](t, r, matName).Spec.JobTemplate.Spec.Template.Spec,
				} {
					c := ps.Containers[0]
					for k, v := range map[string]string{
						"HUNT_RUNNER_GIT_URL": "https://git.example.com/sec/hunts.git", "HUNT_RUNNER_GIT_REF": "v1.2.0",
						"HUNT_RUNNER_GIT_PATH": "hunts", "HUNT_RUNNER_GIT_TOKEN_FILE": "/etc/hunt-runner/git/token",
						"HUNT_RUNNER_GIT_CACHE_DIR": "/var/cache/hunt-runner/git",
					} {
						if e := env(c, k); e == nil || e.Value != v {
							t.Errorf("%s = %+v, want %q", k, e, v)
						}
					}
					if env(c, "HUNT_RUNNER_HUNTS_DIR") != nil || env(c, "HUNT_RUNNER_GIT_SSH_KEY_FILE") != nil {
						t.Error("git source: no hunts dir, no unused credential files")
					}
				}
				if r.has("ConfigMap", runnerName+"-hunts") {
					t.Error("no hunts ConfigMap for a git source")
				}
			},
		},
		{
			name: "existing secret",
			values: base + "---\n" + `
clickhouse:
  existingSecret: ch-runner
  passwordKey: pw
`,
			check: func(t *testing.T, r *rendered) {
				if len(all[corev1.Secret](r)) != 0 {
					t.Error("an existing Secret must not be rendered again")
				}
				for _, ps := range []corev1.PodSpec{
					one[appsv1.Deployment](t, r, runnerName).Spec.Template.Spec,
					one[batchv1.Job](t, r, matName).Spec.Template.Spec,
				} {
					if name, key := passwordFileSecret(t, ps, "HUNT_RUNNER_CLICKHOUSE_PASSWORD_FILE"); name != "ch-runner" || key != "pw" {
						t.Errorf("password file from %s/%s", name, key)
					}
				}
			},
		},
		{
			name: "hunts identity",
			values: base + "---\n" + `
clickhouse:
  existingSecret: ch-runner
  hunts:
    user: hunt_hunts
    existingSecret: ch-hunts
    passwordKey: pw
`,
			check: func(t *testing.T, r *rendered) {
				ps := one[appsv1.Deployment](t, r, runnerName).Spec.Template.Spec
				if e := env(ps.Containers[0], "HUNT_RUNNER_HUNTS_USER"); e == nil || e.Value != "hunt_hunts" {
					t.Errorf("hunts user env %+v", e)
				}
				if name, key := passwordFileSecret(t, ps, "HUNT_RUNNER_HUNTS_PASSWORD_FILE"); name != "ch-hunts" || key != "pw" {
					t.Errorf("hunts password file from %s/%s", name, key)
				}
				if name, _ := passwordFileSecret(t, ps, "HUNT_RUNNER_CLICKHOUSE_PASSWORD_FILE"); name != "ch-runner" {
					t.Errorf("runner password file from %s", name)
				}
				// Only the runner runs hunts; the jobs keep their own identity.
				if env(one[batchv1.Job](t, r, matName).Spec.Template.Spec.Containers[0], "HUNT_RUNNER_HUNTS_USER") != nil {
					t.Error("the materialise Job has no use for the hunts identity")
				}
			},
		},
		{
			name: "plain passwords become Secrets",
			values: base + "---\n" + `
clickhouse:
  password: ` + passwordSentinel + `
shim:
  enabled: true
  clickhouse:
    password: ` + passwordSentinel + `-shim
`,
			check: func(t *testing.T, r *rendered) {
				s := one[corev1.Secret](t, r, runnerName+"-clickhouse")
				if string(s.Data["password"]) != passwordSentinel {
					t.Errorf("runner Secret data %q", s.Data["password"])
				}
				one[corev1.Secret](t, r, shimName+"-clickhouse")
				if name, _ := passwordFileSecret(t, one[appsv1.Deployment](t, r, shimName).Spec.Template.Spec, "HUNT_RUNNER_CLICKHOUSE_PASSWORD_FILE"); name != shimName+"-clickhouse" {
					t.Errorf("shim password file from %s", name)
				}
				for _, o := range r.Objects {
					if strings.Contains(string(o.Raw), base64.StdEncoding.EncodeToString([]byte(passwordSentinel))) && o.Kind != "Secret" {
						t.Errorf("%s/%s carries the encoded password", o.Kind, o.Name)
					}
				}
				if !strings.Contains(r.Notes, "WARNING") {
					t.Error("NOTES must warn about a plain password")
				}
			},
		},
		{
			name: "ServiceMonitor",
			values: base + "---\n" + `
shim:
  enabled: true
metrics:
  serviceMonitor:
    enabled: true
    labels: {release: prom}
`,
			check: func(t *testing.T, r *rendered) {
				for _, name := range []string{runnerName, shimName} {
					sm := one[monitoringv1.ServiceMonitor](t, r, name)
					svc := one[corev1.Service](t, r, name)
					if !labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(svc.Labels)) {
						t.Errorf("ServiceMonitor/%s does not select Service/%s", name, name)
					}
					if sm.Labels["release"] != "prom" || sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name || sm.Spec.Endpoints[0].Path != "/metrics" {
						t.Errorf("ServiceMonitor/%s %+v", name, sm.Spec)
					}
				}
			},
		},
		{
			name: "NetworkPolicy",
			values: base + "---\n" + `
huntRunner:
  autoscaling:
    enabled: true
hunts:
  source: git
  git: {url: "ssh://git@git.example.com/hunts.git", existingSecret: git-ssh, sshKeyKey: id, knownHostsKey: kh}
networkPolicy:
  enabled: true
  clickhouse:
    to:
      - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: db}}
`,
			check: func(t *testing.T, r *rendered) {
				nps := all[networkingv1.NetworkPolicy](r)
				if len(nps) != 3 {
					t.Fatalf("%d NetworkPolicies, want runner, shim and jobs", len(nps))
				}
				pods := map[string]map[string]string{
					"runner":      one[appsv1.Deployment](t, r, runnerName).Spec.Template.Labels,
					"shim":        one[appsv1.Deployment](t, r, shimName).Spec.Template.Labels,
					"materialise": one[batchv1.Job](t, r, matName).Spec.Template.Labels,
					"helm test":   one[corev1.Pod](t, r, runnerName+"-test").Labels,
				}
				for comp, l := range pods {
					n := 0
					for _, np := range nps {
						sel, err := metav1Selector(np)
						if err != nil {
							t.Fatal(err)
						}
						if sel.Matches(labels.Set(l)) {
							n++
							if len(np.Spec.Egress) < 2 {
								t.Errorf("NetworkPolicy/%s: egress must allow DNS and ClickHouse", np.Name)
							}
						}
					}
					if n != 1 {
						t.Errorf("%s pods are selected by %d NetworkPolicies, want 1", comp, n)
					}
				}
				runnerNP := one[networkingv1.NetworkPolicy](t, r, runnerName)
				if len(runnerNP.Spec.Egress) != 3 {
					t.Errorf("runner egress %d rules, want DNS, ClickHouse and git", len(runnerNP.Spec.Egress))
				}
				shimNP := one[networkingv1.NetworkPolicy](t, r, shimName)
				if shimNP.Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "keda" {
					t.Errorf("the shim must admit the KEDA namespace: %+v", shimNP.Spec.Ingress)
				}
			},
		},
		{
			name: "Argo CD mode with schema",
			values: base + "---\n" + `
hooks:
  style: argocd
clickhouse:
  existingSecret: ch-runner
schema:
  enabled: true
  topology: replicated
  clickhouse:
    user: hunt_admin
    existingSecret: ch-admin
`,
			check: func(t *testing.T, r *rendered) {
				for _, j := range all[batchv1.Job](r) {
					for k := range j.Annotations {
						if strings.HasPrefix(k, "helm.sh/hook") {
							t.Errorf("Job/%s: Argo CD mode must not carry %s", j.Name, k)
						}
					}
				}
				if h := one[batchv1.Job](t, r, matName).Annotations["argocd.argoproj.io/hook"]; h != "PostSync" {
					t.Errorf("materialise hook %q", h)
				}
				s := one[batchv1.Job](t, r, runnerName+"-schema")
				if s.Annotations["argocd.argoproj.io/hook"] != "PreSync" {
					t.Errorf("schema hook %q", s.Annotations["argocd.argoproj.io/hook"])
				}
				ps := s.Spec.Template.Spec
				if ps.ServiceAccountName != "" {
					t.Errorf("a pre-sync Job cannot use the release's ServiceAccount (not created yet), got %q", ps.ServiceAccountName)
				}
				c := ps.Containers[0]
				if !slices.Equal(c.Args, []string{"schema", "--topology=replicated", "--findings-ttl=90d"}) {
					t.Errorf("schema args %v", c.Args)
				}
				if e := env(c, "HUNT_RUNNER_CLICKHOUSE_USER"); e.Value != "hunt_admin" {
					t.Errorf("schema user %q", e.Value)
				}
				if name, _ := passwordFileSecret(t, ps, "HUNT_RUNNER_CLICKHOUSE_PASSWORD_FILE"); name != "ch-admin" {
					t.Errorf("schema password file from %s", name)
				}
			},
		},
		{
			name: "shim bearer auth, catalogue override, shim address",
			values: base + "---\n" + `
huntRunner:
  autoscaling:
    enabled: true
shim:
  auth: {enabled: true, existingSecret: shim-token}
  queries: |
    queries:
      extra: {sql: "SELECT 1"}
`,
			check: func(t *testing.T, r *rendered) {
				so := one[kedav1alpha1.ScaledObject](t, r, runnerName)
				tr := so.Spec.Triggers[0]
				if tr.Metadata["authMode"] != "bearer" || tr.AuthenticationRef == nil {
					t.Fatalf("trigger %+v", tr)
				}
				ta := one[kedav1alpha1.TriggerAuthentication](t, r, tr.AuthenticationRef.Name)
				if ta.Spec.SecretTargetRef[0].Parameter != "token" || ta.Spec.SecretTargetRef[0].Name != "shim-token" {
					t.Errorf("TriggerAuthentication %+v", ta.Spec)
				}
				shim := one[appsv1.Deployment](t, r, shimName)
				args := shim.Spec.Template.Spec.Containers[0].Args
				if !slices.Contains(args, "--token-file=/etc/hunt-runner/shim-auth/token") || !slices.Contains(args, "--queries=/etc/hunt-runner/shim/queries.yaml") {
					t.Errorf("shim args %v", args)
				}
				cm := one[corev1.ConfigMap](t, r, shimName+"-queries")
				if !strings.Contains(cm.Data["queries.yaml"], "SELECT 1") {
					t.Errorf("catalogue ConfigMap %v", cm.Data)
				}
				if shim.Spec.Template.Annotations["checksum/queries"] == "" {
					t.Error("a changed catalogue must roll the shim")
				}
			},
		},
		{
			name: "several steady replicas and a volume source",
			values: base + "---\n" + `
huntRunner:
  replicas: 3
  graceSeconds: 60
hunts:
  source: volume
  volume:
    source: {persistentVolumeClaim: {claimName: hunts, readOnly: true}}
    subPath: current/hunts
`,
			check: func(t *testing.T, r *rendered) {
				d := one[appsv1.Deployment](t, r, runnerName)
				if *d.Spec.Replicas != 3 || *d.Spec.Template.Spec.TerminationGracePeriodSeconds != 75 {
					t.Errorf("replicas %d, grace %d", *d.Spec.Replicas, *d.Spec.Template.Spec.TerminationGracePeriodSeconds)
				}
				one[policyv1.PodDisruptionBudget](t, r, runnerName)
				if e := env(d.Spec.Template.Spec.Containers[0], "HUNT_RUNNER_HUNTS_DIR"); e.Value != "/hunts/current/hunts" {
					t.Errorf("hunts dir %q", e.Value)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := mustRender(t, c.values)
			checkInvariants(t, r, namespace)
			checkCLIContract(t, r)
			c.check(t, r)
		})
	}
}

func metav1Selector(np *networkingv1.NetworkPolicy) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
}

// The trigger URL follows the release namespace (a hard-coded namespace once broke scaling).
func TestShimURLFollowsReleaseNamespace(t *testing.T) {
	for _, ns := range []string{"hunts", "security-prod"} {
		r, err := renderIn(t, ns, base+"huntRunner: {autoscaling: {enabled: true}}\n")
		if err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, r, ns)
		got := one[kedav1alpha1.ScaledObject](t, r, runnerName).Spec.Triggers[0].Metadata["url"]
		want := "http://" + shimName + "." + ns + ".svc.cluster.local:8081/keda/hunt-backlog"
		if got != want {
			t.Errorf("namespace %s: url %q, want %q", ns, got, want)
		}
	}
	r := mustRender(t, base+"huntRunner: {autoscaling: {enabled: true, shimAddress: \"shim.other:9000\"}}\n")
	if got := one[kedav1alpha1.ScaledObject](t, r, runnerName).Spec.Triggers[0].Metadata["url"]; got != "http://shim.other:9000/keda/hunt-backlog" {
		t.Errorf("shimAddress override: %q", got)
	}
}

// Combinations that must not render, each with a message that says why.
func TestRenderRefuses(t *testing.T) {
	cases := []struct{ name, values, want string }{
		{"autoscaling without materialise", base + "---\n" + "huntRunner: {autoscaling: {enabled: true}}\nmaterialise: {enabled: false}\n",
			"needs materialise.enabled: KEDA reads the due backlog from hunt_schedule"},
		{"no ClickHouse URL", "{}", "clickhouse.url is required"},
		{"password in the URL", "clickhouse: {url: \"clickhouse://u:secret@ch:9000\"}\n", "must not carry a password"},
		{"password in the URL query", "clickhouse: {url: \"http://ch:8123/?user=u&password=secret\"}\n", "must not carry a password"},
		{"password read as a port", "clickhouse: {url: \"clickhouse://alice:2024/Summer@ch:9000\"}\n", "must not carry a password"},
		{"password in the URL query, any case", "clickhouse: {url: \"http://ch:8123/?Password=secret\"}\n", "must not carry a password"},
		{"hunts user without a Secret", base + "---\n" + "clickhouse: {hunts: {user: hunt_hunts}}\n", "needs clickhouse.hunts.existingSecret"},
		{"min above max", base + "---\n" + "huntRunner: {autoscaling: {enabled: true, minReplicaCount: 6}}\n", "must not exceed maxReplicaCount"},
		{"native trigger without host", base + "---\n" + "huntRunner: {autoscaling: {enabled: true, source: clickhouse, clickhouse: {existingSecret: s}}}\n", "needs huntRunner.autoscaling.clickhouse.host"},
		{"native trigger without secret", base + "---\n" + "huntRunner: {autoscaling: {enabled: true, source: clickhouse, clickhouse: {host: ch}}}\n", "needs huntRunner.autoscaling.clickhouse.existingSecret"},
		{"termination grace below drain grace", base + "---\n" + "huntRunner: {graceSeconds: 30, terminationGracePeriodSeconds: 30}\n", "must exceed huntRunner.graceSeconds"},
		{"git without url", base + "---\n" + "hunts: {source: git}\n", "needs hunts.git.url"},
		{"git key without secret", base + "---\n" + "hunts: {source: git, git: {url: \"https://g/h.git\", tokenKey: token}}\n", "not set"},
		{"volume without source", base + "---\n" + "hunts: {source: volume}\n", "needs hunts.volume.source"},
		{"shim auth without secret", base + "---\n" + "shim: {enabled: true, auth: {enabled: true}}\n", "needs shim.auth.existingSecret"},
		{"schema with only a plain password", base + "---\n" + "clickhouse: {password: x}\nschema: {enabled: true}\n", "schema.clickhouse.existingSecret"},
		{"shim deadline not below KEDA's", base + "---\n" + "huntRunner: {autoscaling: {enabled: true, timeout: 2s}}\nshim: {timeout: 2000ms}\n", "must be below huntRunner.autoscaling.timeout"},
		{"autoscaling without runner", base + "---\n" + "huntRunner: {enabled: false, autoscaling: {enabled: true}}\n", "no runner Deployment to scale"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := renderChart(t, c.values)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error containing %q, got %v", c.want, err)
			}
		})
	}
}

// passwordFileSecret follows a *_PASSWORD_FILE env var of the pod's first container to the
// Secret volume mounted at its directory, and returns that Secret's name and key.
func passwordFileSecret(t *testing.T, ps corev1.PodSpec, envName string) (name, key string) {
	t.Helper()
	c := ps.Containers[0]
	e := env(c, envName)
	if e == nil || e.ValueFrom != nil {
		t.Fatalf("%s not set to a path: %+v", envName, e)
	}
	dir, file := path.Split(e.Value)
	for _, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) != path.Clean(dir) {
			continue
		}
		for _, v := range ps.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				for _, it := range v.Secret.Items {
					if it.Path == file {
						return v.Secret.SecretName, it.Key
					}
				}
			}
		}
	}
	t.Fatalf("%s=%s is not a file of a mounted Secret", envName, e.Value)
	return "", ""
}
