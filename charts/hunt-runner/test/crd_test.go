package charttest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// crdValidator checks an object against one version of a CRD shipped in the KEDA module: the
// OpenAPI schema (types, enums, minimums, required fields) and the CEL rules
// (x-kubernetes-validations), as the API server would on create.
type crdValidator struct {
	schema validation.SchemaValidator
	cel    *cel.Validator
	ss     *structuralschema.Structural
}

var (
	kedaDirOnce sync.Once
	kedaDir     string
	kedaDirErr  error
)

// kedaModuleDir finds github.com/kedacore/keda/v2 in the module cache: its zip ships
// config/crd/bases, the CRDs the KEDA release installs.
func kedaModuleDir(t testing.TB) string {
	t.Helper()
	kedaDirOnce.Do(func() {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/kedacore/keda/v2").Output()
		if err != nil {
			kedaDirErr = err
			return
		}
		kedaDir = strings.TrimSpace(string(out))
	})
	if kedaDirErr != nil || kedaDir == "" {
		t.Fatalf("locate the KEDA module: %v", kedaDirErr)
	}
	return kedaDir
}

func loadCRDValidator(t testing.TB, file, version string) *crdValidator {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(kedaModuleDir(t), "config", "crd", "bases", file))
	if err != nil {
		t.Fatalf("read KEDA CRD: %v", err)
	}
	var crd apiextv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatalf("decode KEDA CRD %s: %v", file, err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != version || v.Schema == nil {
			continue
		}
		var internal apiextensions.JSONSchemaProps
		if err := apiextv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
			t.Fatalf("convert schema: %v", err)
		}
		sv, _, err := validation.NewSchemaValidator(&internal)
		if err != nil {
			t.Fatalf("schema validator: %v", err)
		}
		ss, err := structuralschema.NewStructural(&internal)
		if err != nil {
			t.Fatalf("structural schema: %v", err)
		}
		return &crdValidator{schema: sv, ss: ss, cel: cel.NewValidator(ss, true, celconfig.PerCallLimit)}
	}
	t.Fatalf("CRD %s has no version %s", file, version)
	return nil
}

// validate returns every schema and CEL violation of a rendered object (as YAML).
func (v *crdValidator) validate(t testing.TB, raw []byte) []string {
	t.Helper()
	// Decode as the API server does: integers stay int64 (CEL rules compare them as int).
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(js, &obj); err != nil {
		t.Fatalf("decode: %v", err)
	}
	var problems []string
	res := v.schema.Validate(obj)
	for _, e := range res.Errors {
		problems = append(problems, e.Error())
	}
	errs, _ := v.cel.Validate(context.Background(), field.NewPath(""), v.ss, obj, nil, celconfig.RuntimeCELCostBudget)
	for _, e := range errs {
		problems = append(problems, e.Error())
	}
	return problems
}

var (
	crdOnce                     sync.Once
	scaledObjectCRD, triggerCRD *crdValidator
)

func kedaCRDs(t testing.TB) (so, ta *crdValidator) {
	t.Helper()
	crdOnce.Do(func() {
		scaledObjectCRD = loadCRDValidator(t, "keda.sh_scaledobjects.yaml", "v1alpha1")
		triggerCRD = loadCRDValidator(t, "keda.sh_triggerauthentications.yaml", "v1alpha1")
	})
	if scaledObjectCRD == nil || triggerCRD == nil {
		t.Fatal("KEDA CRDs did not load")
	}
	return scaledObjectCRD, triggerCRD
}

// The validator must catch what it is there to catch, or its silence on the chart proves nothing.
func TestCRDValidatorRejectsBadScaledObjects(t *testing.T) {
	so, _ := kedaCRDs(t)
	base := `
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: x, namespace: y}
spec:
  scaleTargetRef: {name: x}
  minReplicaCount: %s
  maxReplicaCount: 3
  fallback: {failureThreshold: 3, replicas: 1, behavior: %s}
  triggers:
    - type: metrics-api
      metadata: {url: "http://s/keda/hunt-backlog", valueLocation: value, targetValue: "10"}
`
	cases := []struct {
		name, min, behavior, want string
	}{
		{"valid", "1", "currentReplicas", ""},
		{"fallback enum", "1", "holdCurrent", "spec.fallback.behavior"},
		{"min above max (CEL)", "4", "currentReplicas", "minReplicaCount must be less than or equal to maxReplicaCount"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			problems := so.validate(t, []byte(fmt.Sprintf(base, c.min, c.behavior)))
			if c.want == "" {
				if len(problems) != 0 {
					t.Fatalf("valid object rejected: %v", problems)
				}
				return
			}
			if !strings.Contains(strings.Join(problems, "\n"), c.want) {
				t.Fatalf("want a problem mentioning %q, got %v", c.want, problems)
			}
		})
	}
}
