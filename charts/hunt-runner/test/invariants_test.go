package charttest

import (
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// passwordSentinel is the plain password some cases pass; it must never appear in clear text in
// any rendered object (the chart-made Secret holds it base64-encoded in data, as Kubernetes does).
const passwordSentinel = "pw-SENTINEL-5b1c"

var requiredLabels = []string{
	"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
	"app.kubernetes.io/managed-by", "app.kubernetes.io/component", "app.kubernetes.io/part-of",
	"helm.sh/chart",
}

// checkInvariants asserts what must hold for every accepted set of values.
func checkInvariants(t *testing.T, r *rendered, ns string) {
	t.Helper()
	if len(r.Objects) == 0 {
		t.Fatal("nothing rendered")
	}
	seen := map[string]bool{}
	for _, o := range r.Objects {
		id := o.Kind + "/" + o.Name
		if seen[id] {
			t.Errorf("%s rendered twice", id)
		}
		seen[id] = true
		checkMeta(t, o, ns)
		if strings.Contains(string(o.Raw), passwordSentinel) {
			t.Errorf("%s (%s) contains the plain password", id, o.Source)
		}
	}
	for _, d := range all[appsv1.Deployment](r) {
		checkPodTemplate(t, "Deployment/"+d.Name, d.Spec.Template, true)
		if !labels.SelectorFromSet(d.Spec.Selector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("Deployment/%s: selector %v does not match its pod labels", d.Name, d.Spec.Selector.MatchLabels)
		}
		if d.Spec.Strategy.RollingUpdate == nil || d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 {
			t.Errorf("Deployment/%s: rollouts must never dip below the current count", d.Name)
		}
	}
	for _, j := range all[batchv1.Job](r) {
		checkPodTemplate(t, "Job/"+j.Name, j.Spec.Template, false)
		if j.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
			t.Errorf("Job/%s: restartPolicy %q", j.Name, j.Spec.Template.Spec.RestartPolicy)
		}
	}
	for _, p := range all[corev1.Pod](r) {
		checkPodTemplate(t, "Pod/"+p.Name, corev1.PodTemplateSpec{ObjectMeta: p.ObjectMeta, Spec: p.Spec}, false)
		if p.Annotations["helm.sh/hook"] != "test" {
			t.Errorf("Pod/%s: the only bare Pod is the helm test hook", p.Name)
		}
	}
	for _, c := range all[batchv1.CronJob](r) {
		checkPodTemplate(t, "CronJob/"+c.Name, c.Spec.JobTemplate.Spec.Template, false)
		if c.Spec.ConcurrencyPolicy != batchv1.ForbidConcurrent {
			t.Errorf("CronJob/%s: concurrencyPolicy %q, want Forbid", c.Name, c.Spec.ConcurrencyPolicy)
		}
	}
	checkServices(t, r)
	checkRunner(t, r)
	checkMaterialise(t, r)
	checkScaledObjects(t, r, ns)
	checkTriggerAuthentications(t, r)
}

func checkMeta(t *testing.T, o object, ns string) {
	t.Helper()
	id := o.Kind + "/" + o.Name
	if o.Meta.Namespace != ns {
		t.Errorf("%s: namespace %q, want the release namespace %q", id, o.Meta.Namespace, ns)
	}
	if errs := validation.IsDNS1123Subdomain(o.Name); len(errs) > 0 {
		t.Errorf("%s: bad name: %v", id, errs)
	}
	if o.Kind == "Service" {
		if errs := validation.IsDNS1035Label(o.Name); len(errs) > 0 {
			t.Errorf("%s: bad Service name: %v", id, errs)
		}
	}
	for _, l := range requiredLabels {
		if o.Meta.Labels[l] == "" {
			t.Errorf("%s: missing label %s", id, l)
		}
	}
	for k, v := range o.Meta.Labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			t.Errorf("%s: label key %q: %v", id, k, errs)
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("%s: label %s=%q: %v", id, k, v, errs)
		}
	}
}

func checkPodTemplate(t *testing.T, id string, pt corev1.PodTemplateSpec, longRunning bool) {
	t.Helper()
	ps := pt.Spec
	for _, l := range requiredLabels {
		if pt.Labels[l] == "" {
			t.Errorf("%s: pod template misses label %s", id, l)
		}
	}
	if ps.EnableServiceLinks == nil || *ps.EnableServiceLinks {
		t.Errorf("%s: enableServiceLinks must be false (Service env vars collide with HUNT_RUNNER_*)", id)
	}
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
		t.Errorf("%s: the service account token must not be mounted", id)
	}
	psc := ps.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod securityContext must run as non-root with RuntimeDefault seccomp: %+v", id, psc)
	}
	volumes := map[string]bool{}
	for _, v := range ps.Volumes {
		volumes[v.Name] = true
	}
	used := map[string]bool{}
	if len(ps.Containers) == 0 {
		t.Fatalf("%s: no containers", id)
	}
	for _, c := range ps.Containers {
		cid := id + " container " + c.Name
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) != 0 ||
			(sc.Privileged != nil && *sc.Privileged) {
			t.Errorf("%s: securityContext must forbid escalation, drop ALL and use a read-only root: %+v", cid, sc)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
			t.Errorf("%s: resource requests missing", cid)
		}
		if !strings.HasPrefix(c.Image, "ghcr.io/hunt-runner/hunt-runner:") {
			t.Errorf("%s: image %q", cid, c.Image)
		}
		for _, a := range c.Args {
			if strings.Contains(strings.ToLower(a), "password") {
				t.Errorf("%s: argument %q mentions a password; secrets never go on a command line", cid, a)
			}
		}
		for _, e := range c.Env {
			secretish := strings.Contains(e.Name, "PASSWORD") || strings.Contains(e.Name, "TOKEN")
			if secretish && !strings.HasSuffix(e.Name, "_FILE") {
				// Passwords are mounted files: an env var shows in /proc/<pid>/environ, in crash
				// reports and in `kubectl describe`.
				t.Errorf("%s: %s is a secret in the environment; mount it as a file and pass its path in %s_FILE", cid, e.Name, e.Name)
			}
			if !strings.HasPrefix(e.Name, "HUNT_RUNNER_") {
				t.Errorf("%s: unexpected env %s", cid, e.Name)
			}
		}
		hasTmp := false
		for _, m := range c.VolumeMounts {
			used[m.Name] = true
			if !volumes[m.Name] {
				t.Errorf("%s: mount %q has no volume", cid, m.Name)
			}
			if m.MountPath == "/tmp" {
				hasTmp = true
			}
		}
		if !hasTmp {
			t.Errorf("%s: no writable /tmp on a read-only root filesystem", cid)
		}
		if longRunning {
			ports := map[string]int32{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			for what, probe := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
				want := map[string]string{"liveness": "/healthz", "readiness": "/readyz"}[what]
				if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want {
					t.Errorf("%s: %s probe must GET %s: %+v", cid, what, want, probe)
					continue
				}
				if _, ok := ports[probe.HTTPGet.Port.String()]; !ok {
					t.Errorf("%s: %s probe port %s is not a declared port", cid, what, probe.HTTPGet.Port.String())
				}
			}
		}
	}
	for v := range volumes {
		if !used[v] {
			t.Errorf("%s: volume %q is never mounted", id, v)
		}
	}
}

// Every Service selects the pods of exactly one Deployment, and its target port is declared there.
func checkServices(t *testing.T, r *rendered) {
	t.Helper()
	for _, s := range all[corev1.Service](r) {
		sel := labels.SelectorFromSet(s.Spec.Selector)
		var matched []*appsv1.Deployment
		for _, d := range all[appsv1.Deployment](r) {
			if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				matched = append(matched, d)
			}
		}
		if len(matched) != 1 {
			t.Errorf("Service/%s selects %d Deployments, want 1", s.Name, len(matched))
			continue
		}
		for _, p := range s.Spec.Ports {
			if containerPort(matched[0].Spec.Template.Spec, p.TargetPort.String()) == 0 {
				t.Errorf("Service/%s: targetPort %s not declared by Deployment/%s", s.Name, p.TargetPort.String(), matched[0].Name)
			}
		}
	}
}

func containerPort(ps corev1.PodSpec, name string) int32 {
	for _, c := range ps.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort
			}
		}
	}
	return 0
}

func runnerDeployment(r *rendered) *appsv1.Deployment {
	for _, d := range all[appsv1.Deployment](r) {
		if d.Labels["app.kubernetes.io/component"] == "runner" {
			return d
		}
	}
	return nil
}

func checkRunner(t *testing.T, r *rendered) {
	t.Helper()
	d := runnerDeployment(r)
	if d == nil {
		return
	}
	c := d.Spec.Template.Spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "run" {
		t.Fatalf("runner args %v, want the run subcommand first", c.Args)
	}
	grace := -1
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--grace="); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(v, "s"))
			if err != nil {
				t.Fatalf("runner --grace=%s: %v", v, err)
			}
			grace = n
		}
	}
	tg := d.Spec.Template.Spec.TerminationGracePeriodSeconds
	if grace < 0 || tg == nil || *tg <= int64(grace) {
		t.Errorf("runner terminationGracePeriodSeconds %v must exceed --grace %ds", tg, grace)
	}
	scaled := len(all[kedav1alpha1.ScaledObject](r)) > 0
	if scaled && d.Spec.Replicas != nil {
		t.Errorf("runner Deployment sets replicas=%d while a ScaledObject owns the count", *d.Spec.Replicas)
	}
	if !scaled && d.Spec.Replicas == nil {
		t.Error("runner Deployment omits replicas while nothing else sets the count")
	}
}

func checkMaterialise(t *testing.T, r *rendered) {
	t.Helper()
	for _, j := range all[batchv1.Job](r) {
		if j.Labels["app.kubernetes.io/component"] != "materialise" {
			continue
		}
		args := j.Spec.Template.Spec.Containers[0].Args
		if !slices.Equal(args, []string{"materialise", "--changed-exit-code=0"}) {
			t.Errorf("Job/%s args %v: materialise must treat 'changed' as success", j.Name, args)
		}
		helm, argo := j.Annotations["helm.sh/hook"], j.Annotations["argocd.argoproj.io/hook"]
		if (helm == "") == (argo == "") {
			t.Errorf("Job/%s must be exactly one kind of hook (helm %q, argo %q)", j.Name, helm, argo)
		}
		if helm != "" && helm != "post-install,post-upgrade" || argo != "" && argo != "PostSync" {
			t.Errorf("Job/%s runs at the wrong time: helm %q argo %q", j.Name, helm, argo)
		}
	}
}

func checkScaledObjects(t *testing.T, r *rendered, ns string) {
	t.Helper()
	sos := all[kedav1alpha1.ScaledObject](r)
	if len(sos) == 0 {
		return
	}
	soCRD, _ := kedaCRDs(t)
	if !r.has("Job", releaseName+"-hunt-runner-materialise") {
		t.Error("a ScaledObject without the materialise Job would read a backlog of 0 forever")
	}
	for _, o := range r.Objects {
		if o.Kind != "ScaledObject" {
			continue
		}
		if p := soCRD.validate(t, o.Raw); len(p) > 0 {
			t.Errorf("ScaledObject/%s violates KEDA's CRD: %v", o.Name, p)
		}
	}
	for _, so := range sos {
		if err := kedav1alpha1.CheckFallbackValid(so); err != nil {
			t.Errorf("ScaledObject/%s: KEDA's CheckFallbackValid: %v", so.Name, err)
		}
		if err := kedav1alpha1.CheckReplicaCountBoundsAreValid(so); err != nil {
			t.Errorf("ScaledObject/%s: KEDA's CheckReplicaCountBoundsAreValid: %v", so.Name, err)
		}
		d := runnerDeployment(r)
		if d == nil || so.Spec.ScaleTargetRef == nil || so.Spec.ScaleTargetRef.Name != d.Name ||
			so.Spec.ScaleTargetRef.Kind != "Deployment" {
			t.Errorf("ScaledObject/%s must target the runner Deployment: %+v", so.Name, so.Spec.ScaleTargetRef)
		}
		if so.Spec.MinReplicaCount == nil || so.Spec.MaxReplicaCount == nil || so.Spec.PollingInterval == nil || so.Spec.CooldownPeriod == nil {
			t.Errorf("ScaledObject/%s must state min, max, polling and cooldown", so.Name)
		}
		if len(so.Spec.Triggers) != 1 {
			t.Fatalf("ScaledObject/%s: %d triggers", so.Name, len(so.Spec.Triggers))
		}
		tr := so.Spec.Triggers[0]
		if tr.MetricType != autoscalingv2.AverageValueMetricType {
			t.Errorf("trigger metricType %q: it must be written out as AverageValue", tr.MetricType)
		}
		if tr.AuthenticationRef != nil && !r.has("TriggerAuthentication", tr.AuthenticationRef.Name) {
			t.Errorf("trigger references TriggerAuthentication %q, which is not rendered", tr.AuthenticationRef.Name)
		}
		for k := range tr.Metadata {
			if lk := strings.ToLower(k); strings.Contains(lk, "password") || lk == "connectionstring" || lk == "token" {
				t.Errorf("trigger metadata carries a credential field %q", k)
			}
		}
		switch tr.Type {
		case "metrics-api":
			checkShimTrigger(t, r, tr, ns)
		case "clickhouse":
			if _, err := strconv.ParseFloat(tr.Metadata["targetQueryValue"], 64); err != nil {
				t.Errorf("clickhouse targetQueryValue: %v", err)
			}
			if !strings.Contains(tr.Metadata["query"], "hunt_backlog_v1") {
				t.Errorf("clickhouse query %q must read the hunt_backlog_v1 view", tr.Metadata["query"])
			}
			if tr.AuthenticationRef == nil {
				t.Error("clickhouse trigger needs a TriggerAuthentication for the password")
			}
		default:
			t.Errorf("unexpected trigger type %q", tr.Type)
		}
	}
}

// The metrics-api URL must reach the shim Service of this release, in the release namespace.
func checkShimTrigger(t *testing.T, r *rendered, tr kedav1alpha1.ScaleTriggers, ns string) {
	t.Helper()
	if tr.Metadata["valueLocation"] != "value" {
		t.Errorf("valueLocation %q", tr.Metadata["valueLocation"])
	}
	if _, err := strconv.ParseFloat(tr.Metadata["targetValue"], 64); err != nil {
		t.Errorf("targetValue: %v", err)
	}
	u, err := url.Parse(tr.Metadata["url"])
	if err != nil || u.Scheme != "http" || u.Path != "/keda/hunt-backlog" {
		t.Fatalf("trigger url %q", tr.Metadata["url"])
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		t.Fatalf("trigger url %q has no port: %v", u.Host, err)
	}
	svcName, rest, _ := strings.Cut(host, ".")
	if rest != ns+".svc.cluster.local" {
		t.Errorf("trigger host %q is not in the release namespace %q", host, ns)
	}
	svc := one[corev1.Service](t, r, svcName)
	if svc.Labels["app.kubernetes.io/component"] != "shim" {
		t.Errorf("trigger points at Service/%s, which is not the shim", svcName)
	}
	if len(svc.Spec.Ports) != 1 || strconv.Itoa(int(svc.Spec.Ports[0].Port)) != port {
		t.Errorf("trigger port %s does not match Service/%s ports %+v", port, svcName, svc.Spec.Ports)
	}
	if m := tr.Metadata["authMode"]; m != "" && m != "bearer" {
		t.Errorf("authMode %q", tr.Metadata["authMode"])
	}
}

func checkTriggerAuthentications(t *testing.T, r *rendered) {
	t.Helper()
	_, taCRD := kedaCRDs(t)
	for _, o := range r.Objects {
		if o.Kind != "TriggerAuthentication" {
			continue
		}
		if p := taCRD.validate(t, o.Raw); len(p) > 0 {
			t.Errorf("TriggerAuthentication/%s violates KEDA's CRD: %v", o.Name, p)
		}
		ta := o.Obj.(*kedav1alpha1.TriggerAuthentication)
		if len(ta.Spec.SecretTargetRef) == 0 {
			t.Errorf("TriggerAuthentication/%s reads no Secret", o.Name)
		}
	}
}
