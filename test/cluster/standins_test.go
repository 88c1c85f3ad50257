package cluster

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/kargo-latch/kargo-latch/kargo"
)

var update = flag.Bool("update", false, "rewrite test/crds from Kargo's real CRDs")

// TestStandInCRDsFollowKargo: each stand-in in test/crds is what
// StandInCRD derives from Kargo's real CRD of the same file name, so that
// the stand-ins keep Kargo's names, printer columns, status subresource and
// field types as Kargo changes them. Needs Kargo's real CRDs, which CI has;
// -update rewrites the stand-ins from them.
func TestStandInCRDsFollowKargo(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	real, err := RealKargoCRDDir(root, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if real == "" {
		if InCI(os.Getenv) {
			t.Fatal("CI must check the stand-in CRDs against Kargo's real ones: ../shared/kargo-crds is missing and KARGO_CRDS_DIR is not set")
		}
		t.Skip("needs Kargo's real CRDs (../shared/kargo-crds or KARGO_CRDS_DIR) to compare the stand-ins with")
	}
	standIns := filepath.Join(root, "test", "crds")
	for _, name := range StandInCRDFiles {
		b, err := os.ReadFile(filepath.Join(real, name))
		if err != nil {
			t.Fatal(err)
		}
		want, err := StandInCRD(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		path := filepath.Join(standIns, name)
		if *update {
			if err := os.WriteFile(path, want, 0o644); err != nil { //nolint:gosec // a stand-in's path in the repository, named by the test
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test ./test/cluster -run TestStandInCRDsFollowKargo -update writes it)", err)
		}
		if string(got) != string(want) {
			var g, w any
			_ = yaml.Unmarshal(got, &g)
			_ = yaml.Unmarshal(want, &w)
			t.Errorf("test/crds/%s is not what Kargo's CRD in %s gives; rewrite it with\n"+
				"  go test ./test/cluster -run TestStandInCRDsFollowKargo -update\n(-have +want):\n%s", name, real, cmp.Diff(g, w))
		}
	}
	// No other files: InstallCRDs installs every one in the directory.
	files, err := filepath.Glob(filepath.Join(standIns, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !slices.Contains(StandInCRDFiles, filepath.Base(f)) {
			t.Errorf("test/crds/%s is not among StandInCRDFiles", filepath.Base(f))
		}
	}
}

// TestStandInCRDsCoverWhatKargoLatchUses: the stand-ins define every Kargo
// resource the operator, the CLI and the demo read or write, so that the
// demo plays in a clone without Kargo's real CRDs.
func TestStandInCRDsCoverWhatKargoLatchUses(t *testing.T) {
	t.Parallel()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	have, err := crdNames(filepath.Join(root, "test", "crds"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{
		kargo.StagesResource.Resource, kargo.PromotionsResource.Resource,
		kargo.FreightsResource.Resource, kargo.WarehousesResource.Resource,
		"projects", "projectconfigs",
	} {
		if name := r + "." + kargo.GroupVersion.Group; !slices.Contains(have, name) {
			t.Errorf("no stand-in CRD %s in test/crds (have %v)", name, have)
		}
	}
}

// TestStandInCRDShape: a stand-in keeps the CRD's names, scope,
// subresources and printer columns, and its schema's shape to
// standInDepth levels, with deeper objects kept whole and Kargo's finer
// rules left out.
func TestStandInCRDShape(t *testing.T) {
	t.Parallel()
	real := `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.kargo.akuity.io
  annotations: {controller-gen.kubebuilder.io/version: v0.19.0}
spec:
  group: kargo.akuity.io
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget, shortNames: [wdg]}
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {jsonPath: .spec.stage, name: Stage, type: string}
    schema:
      openAPIV3Schema:
        type: object
        description: A widget.
        required: [spec]
        properties:
          spec:
            type: object
            x-kubernetes-validations: [{rule: "true"}]
            properties:
              stage: {type: string, minLength: 1, pattern: "^[a-z]+$", description: the stage}
              a:
                type: object
                properties:
                  b:
                    type: object
                    properties:
                      c: {type: object, properties: {d: {type: string}}}
                      n: {type: integer, format: int64, default: 3}
                      l: {type: array, items: {type: object, properties: {e: {type: string}}}}
`
	got, err := StandInCRD([]byte(real))
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(got, &obj); err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := yaml.Unmarshal([]byte(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.kargo.akuity.io
  labels: {kargo-latch.io/stand-in: "true"}
spec:
  group: kargo.akuity.io
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget, shortNames: [wdg]}
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {jsonPath: .spec.stage, name: Stage, type: string}
    schema:
      openAPIV3Schema:
        type: object
        required: [spec]
        properties:
          spec:
            type: object
            properties:
              stage: {type: string}
              a:
                type: object
                properties:
                  b:
                    type: object
                    properties:
                      c: {type: object, x-kubernetes-preserve-unknown-fields: true}
                      n: {type: integer, format: int64, default: 3}
                      l: {type: array, items: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`), &want); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, obj); d != "" {
		t.Errorf("stand-in (-want +got):\n%s", d)
	}
}

// crdNames reads the names of the CRDs (plural.group) in a directory's YAML
// files.
func crdNames(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, doc := range strings.Split(string(b), "\n---") {
			var obj struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if obj.Kind == "CustomResourceDefinition" {
				names[obj.Metadata.Name] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(names)), nil
}
