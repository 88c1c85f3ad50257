// Command chart generates the files of charts/kargo-latch that are made
// from others, so that they cannot drift:
//   - the "Parameters" part of its README, from the `## @param` comments of
//     its values.yaml (the convention of Kargo's own chart, read by
//     readme-generator-for-helm; this is a Go one so that `make test`
//     needs nothing but Go);
//   - its copies of the CRDs in manifests/crds, which its templates read.
//
// Run it with `make generate`; a test fails when the output is stale.
package main

import (
	"fmt"
	"os"
	"path/filepath"
)

const (
	chartDir   = "charts/kargo-latch"
	crdSources = "manifests/crds"
)

func main() {
	files, err := generate(".")
	if err == nil {
		for path, content := range files {
			if err = os.WriteFile(path, content, 0o600); err != nil {
				break
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chart:", err)
		os.Exit(1)
	}
}

// generate returns the generated files, by path, for the repository at root.
func generate(root string) (map[string][]byte, error) {
	out := map[string][]byte{}
	values, err := os.ReadFile(filepath.Join(root, chartDir, "values.yaml"))
	if err != nil {
		return nil, err
	}
	readmePath := filepath.Join(root, chartDir, "README.md")
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		return nil, err
	}
	if out[readmePath], err = renderReadme(readme, values); err != nil {
		return nil, err
	}
	crds, err := filepath.Glob(filepath.Join(root, crdSources, "*_*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(crds) == 0 {
		return nil, fmt.Errorf("no CRD in %s", crdSources)
	}
	for _, src := range crds {
		body, err := os.ReadFile(src)
		if err != nil {
			return nil, err
		}
		header := fmt.Sprintf("# Generated from %s/%s by `make generate`. Do not edit.\n", crdSources, filepath.Base(src))
		out[filepath.Join(root, chartDir, "files", "crds", filepath.Base(src))] = append([]byte(header), body...)
	}
	return out, nil
}
