package charttest

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.yaml from the chart")

// The full manifests of the two resting states, pinned so that a review sees every change to
// what operators install (go test -run Golden -update rewrites them).
func TestGoldenManifests(t *testing.T) {
	cases := map[string]string{
		"defaults":    base,
		"autoscaling": "huntRunner: {autoscaling: {enabled: true}}\nshim: {clickhouse: {existingSecret: hunt-scaler}}\nclickhouse: {url: \"clickhouse://clickhouse.db.svc.cluster.local:9000\", existingSecret: hunt-runner-clickhouse}\n",
	}
	for name, values := range cases {
		t.Run(name, func(t *testing.T) {
			got := renderAll(t, values)
			path := filepath.Join("testdata", name+".golden.yaml")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -run Golden -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("rendered %s differs from %s (go test -run Golden -update to accept):\n%s", name, path, firstDiff(string(want), string(got)))
			}
		})
	}
}

// renderAll renders every template, in file order, NOTES included.
func renderAll(t *testing.T, values string) []byte {
	t.Helper()
	ch := loadChart(t)
	vals := map[string]any{}
	if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
		t.Fatal(err)
	}
	rv, err := chartutil.ToRenderValues(ch, vals,
		chartutil.ReleaseOptions{Name: releaseName, Namespace: namespace, IsInstall: true, Revision: 1},
		chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	out, err := engine.Render(ch, rv)
	if err != nil {
		t.Fatal(err)
	}
	files := make([]string, 0, len(out))
	for f, body := range out {
		if strings.TrimSpace(body) != "" {
			files = append(files, f)
		}
	}
	sort.Strings(files)
	var b bytes.Buffer
	for _, f := range files {
		b.WriteString("# Source: " + f + "\n")
		for _, l := range strings.Split(strings.TrimSpace(out[f]), "\n") {
			b.WriteString(strings.TrimRight(l, " \t") + "\n")
		}
		b.WriteString("---\n")
	}
	return b.Bytes()
}

func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return "line " + strconv.Itoa(i+1) + ":\n- " + wl + "\n+ " + gl
		}
	}
	return ""
}
