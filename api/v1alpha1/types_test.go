package v1alpha1

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// TestCRDMatchesGoTypes keeps manifests/crds in step with these types: every
// JSON field of the Go types is in the CRD schema and the other way round.
func TestCRDMatchesGoTypes(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "manifests", "crds", "kargo-latch.io_stagepauses.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Group    string
			Names    struct{ Kind, Plural string }
			Versions []struct {
				Name   string
				Schema struct {
					OpenAPIV3Schema schemaNode `json:"openAPIV3Schema"`
				}
			}
		}
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	if crd.Spec.Group != GroupVersion.Group || crd.Spec.Versions[0].Name != GroupVersion.Version ||
		crd.Spec.Names.Kind != "StagePause" || crd.Spec.Names.Plural != StagePausesResource.Resource {
		t.Fatalf("CRD names %s/%s %s %s do not match the Go API", crd.Spec.Group, crd.Spec.Versions[0].Name, crd.Spec.Names.Kind, crd.Spec.Names.Plural)
	}
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	for path, goType := range map[string]reflect.Type{
		"spec":   reflect.TypeFor[StagePauseSpec](),
		"status": reflect.TypeFor[StagePauseStatus](),
	} {
		want := jsonFields(goType)
		got := keys(root.Properties[path].Properties)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s fields differ between Go (-) and the CRD (+):\n%s", path, diff)
		}
	}
}

type schemaNode struct {
	Properties map[string]schemaNode `json:"properties"`
}

func jsonFields(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		name := strings.Split(f.Tag.Get("json"), ",")[0]
		if name != "" && name != "-" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

func keys(m map[string]schemaNode) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestStageLabelValueIsAlwaysAValidLabelValue(t *testing.T) {
	long := strings.Repeat("stage.", 40) + "prod" // 244 characters, a valid Stage name
	for stage, want := range map[string]string{
		"prod":                  "prod",
		AllStages:               "all",
		strings.Repeat("a", 63): strings.Repeat("a", 63),
	} {
		if got := StageLabelValue(stage); got != want {
			t.Errorf("StageLabelValue(%q) = %q, want %q", stage, got, want)
		}
	}
	for _, stage := range []string{strings.Repeat("a", 64), long, long + "x", strings.Repeat("a-", 40) + "b"} {
		got := StageLabelValue(stage)
		if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
			t.Errorf("StageLabelValue(%d characters) = %q: %v", len(stage), got, errs)
		}
	}
	if StageLabelValue(long) == StageLabelValue(long+"x") {
		t.Error("two long names share a label value")
	}
}

// A copy's status.shards is its own: the controller changes the copy it
// computes a status in, never the cached object.
func TestDeepCopyKeepsShardsApart(t *testing.T) {
	p := &StagePause{Status: StagePauseStatus{Stages: 3, Shards: map[string]int32{"a": 2, "default": 1}}}
	c := p.DeepCopy()
	c.Status.Shards["a"] = 5
	delete(c.Status.Shards, "default")
	if p.Status.Shards["a"] != 2 || p.Status.Shards["default"] != 1 {
		t.Errorf("changing the copy changed the original's shards: %v", p.Status.Shards)
	}
	if (&StagePauseStatus{}).DeepCopy().Shards != nil {
		t.Error("the copy of a status without shards has a map")
	}
}
