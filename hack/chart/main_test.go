package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestGeneratedChartFilesAreCurrent fails when the chart's README or its
// copy of a CRD was not regenerated after a change to values.yaml or
// manifests/crds.
func TestGeneratedChartFilesAreCurrent(t *testing.T) {
	root := filepath.Join("..", "..")
	files, err := generate(root)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range files {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%v; run `make generate`", err)
			continue
		}
		if diff := cmp.Diff(string(want), string(got)); diff != "" {
			t.Errorf("%s is stale; run `make generate` (-want +got):\n%s", path, diff)
		}
	}
	// A copy whose source is gone would still be installed by the chart.
	copies, err := filepath.Glob(filepath.Join(root, chartDir, "files", "crds", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range copies {
		if _, ok := files[c]; !ok {
			t.Errorf("%s has no source in %s; delete it", c, crdSources)
		}
	}
}

func TestReadmeTablesFollowTheParams(t *testing.T) {
	values := []byte(`## @section Image
image:
  ## @param image.repository Image repository | registry
  repository: kargo-latch
  ## @param image.tag Tag
  tag: ""
## @section Controller
controller:
  ## @param controller.resources Resources
  resources:
    limits: {cpu: "1"}
`)
	got, err := renderReadme([]byte("# chart\n\nHand-written.\n\n## Parameters\n\nold tables\n"), values)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# chart\n\nHand-written.\n\n## Parameters\n",
		"### Image\n",
		"| `image.repository` | Image repository \\| registry | `kargo-latch` |\n",
		"| `image.tag` | Tag | `\"\"` |\n",
		"### Controller\n",
		"| `controller.resources` | Resources | `{\"limits\":{\"cpu\":\"1\"}}` |\n",
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("README lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(string(got), "old tables") {
		t.Errorf("the generated part was not replaced:\n%s", got)
	}
}

func TestEveryValueNeedsAParam(t *testing.T) {
	for name, values := range map[string]string{
		"undocumented value": "## @section S\na:\n  ## @param a.b B\n  b: 1\n  c: 2\n",
		"param of no value":  "## @section S\n## @param a.x X\na:\n  ## @param a.b B\n  b: 1\n",
		"param twice":        "## @section S\n## @param a A\n## @param a A\na: 1\n",
		"no description":     "## @section S\n## @param a\na: 1\n",
		"no section":         "## @param a A\na: 1\n",
	} {
		if _, err := renderReadme([]byte("## Parameters\n"), []byte(values)); err == nil {
			t.Errorf("%s: rendered without an error", name)
		}
	}
}
