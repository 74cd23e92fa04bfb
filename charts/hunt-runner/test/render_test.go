// Package charttest renders the hunt-runner Helm chart with the Helm v3 SDK, decodes every object
// strictly into its Kubernetes (or KEDA, or Prometheus Operator) Go type, validates KEDA objects
// against the CRD schema KEDA ships, and checks the chart's invariants. No cluster is needed.
package charttest

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const (
	chartDir    = ".."
	releaseName = "hr"
	namespace   = "hunts"
)

// object is one rendered manifest: where it came from, its raw YAML and its decoded Go value.
type object struct {
	Source string // template file
	Kind   string
	Name   string
	Raw    []byte
	Obj    any // pointer to the typed object
	Meta   *metav1.ObjectMeta
}

// rendered is a whole release.
type rendered struct {
	Objects []object
	Notes   string
}

func loadChart(t testing.TB) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return ch
}

// renderChart renders the chart with values given as YAML (merged over values.yaml by Helm, after
// schema validation), in the test namespace.
func renderChart(t testing.TB, valuesYAML string) (*rendered, error) {
	return renderIn(t, namespace, valuesYAML)
}

func renderIn(t testing.TB, ns, valuesYAML string) (*rendered, error) {
	t.Helper()
	ch := loadChart(t)
	// Documents separated by "---" are merged in order, like repeated -f flags.
	vals := map[string]any{}
	for _, doc := range strings.Split(valuesYAML, "\n---\n") {
		layer := map[string]any{}
		if err := yaml.Unmarshal([]byte(doc), &layer); err != nil {
			t.Fatalf("test values do not parse: %v", err)
		}
		vals = chartutil.MergeTables(layer, vals)
	}
	rv, err := chartutil.ToRenderValues(ch, vals,
		chartutil.ReleaseOptions{Name: releaseName, Namespace: ns, IsInstall: true, Revision: 1},
		chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	out, err := engine.Render(ch, rv)
	if err != nil {
		return nil, err
	}
	r := &rendered{}
	files := make([]string, 0, len(out))
	for f := range out {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		if strings.HasSuffix(f, "NOTES.txt") {
			r.Notes = out[f]
			continue
		}
		docs := releaseutil.SplitManifests(out[f])
		keys := make([]string, 0, len(docs))
		for k := range docs {
			keys = append(keys, k)
		}
		sort.Sort(releaseutil.BySplitManifestsOrder(keys))
		for _, k := range keys {
			doc := docs[k]
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			o, err := decode(f, []byte(doc))
			if err != nil {
				t.Fatalf("%s: %v\n%s", f, err, doc)
			}
			r.Objects = append(r.Objects, o)
		}
	}
	return r, nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// decode picks the Go type from kind and decodes strictly: an unknown or misspelt field, or a
// duplicate key, is an error (a cluster would silently drop or reject it).
func decode(source string, raw []byte) (object, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(raw, &tm); err != nil {
		return object{}, fmt.Errorf("type meta: %w", err)
	}
	var obj any
	switch tm.APIVersion + "/" + tm.Kind {
	case "apps/v1/Deployment":
		obj = &appsv1.Deployment{}
	case "v1/Service":
		obj = &corev1.Service{}
	case "v1/ServiceAccount":
		obj = &corev1.ServiceAccount{}
	case "v1/Secret":
		obj = &corev1.Secret{}
	case "v1/ConfigMap":
		obj = &corev1.ConfigMap{}
	case "v1/Pod":
		obj = &corev1.Pod{}
	case "batch/v1/Job":
		obj = &batchv1.Job{}
	case "batch/v1/CronJob":
		obj = &batchv1.CronJob{}
	case "policy/v1/PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	case "networking.k8s.io/v1/NetworkPolicy":
		obj = &networkingv1.NetworkPolicy{}
	case "keda.sh/v1alpha1/ScaledObject":
		obj = &kedav1alpha1.ScaledObject{}
	case "keda.sh/v1alpha1/TriggerAuthentication":
		obj = &kedav1alpha1.TriggerAuthentication{}
	case "monitoring.coreos.com/v1/ServiceMonitor":
		obj = &monitoringv1.ServiceMonitor{}
	case "monitoring.coreos.com/v1/PrometheusRule":
		obj = &monitoringv1.PrometheusRule{}
	default:
		return object{}, fmt.Errorf("unexpected object %s %s", tm.APIVersion, tm.Kind)
	}
	if err := yaml.UnmarshalStrict(raw, obj); err != nil {
		return object{}, fmt.Errorf("strict decode of %s: %w", tm.Kind, err)
	}
	meta := objectMeta(obj)
	return object{Source: source, Kind: tm.Kind, Name: meta.Name, Raw: raw, Obj: obj, Meta: meta}, nil
}

func objectMeta(obj any) *metav1.ObjectMeta {
	if m, ok := obj.(interface{ GetObjectMeta() metav1.Object }); ok {
		if om, ok := m.GetObjectMeta().(*metav1.ObjectMeta); ok {
			return om
		}
	}
	panic(fmt.Sprintf("no ObjectMeta on %T", obj))
}

// all returns the objects of one kind.
func all[T any](r *rendered) []*T {
	var out []*T
	for _, o := range r.Objects {
		if v, ok := o.Obj.(*T); ok {
			out = append(out, v)
		}
	}
	return out
}

// one returns the single object of a kind and name, failing the test otherwise.
func one[T any](t testing.TB, r *rendered, name string) *T {
	t.Helper()
	var found []*T
	for _, o := range r.Objects {
		if v, ok := o.Obj.(*T); ok && o.Name == name {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("want exactly one %T named %q, got %d (objects: %s)", zero, name, len(found), r.summary())
	}
	return found[0]
}

func (r *rendered) has(kind, name string) bool {
	for _, o := range r.Objects {
		if o.Kind == kind && o.Name == name {
			return true
		}
	}
	return false
}

func (r *rendered) summary() string {
	var s []string
	for _, o := range r.Objects {
		s = append(s, o.Kind+"/"+o.Name)
	}
	return strings.Join(s, ", ")
}

// mustRender renders values that must be accepted.
func mustRender(t testing.TB, valuesYAML string) *rendered {
	t.Helper()
	r, err := renderChart(t, valuesYAML)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return r
}
