package controller

import (
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The packages the controller delegates to import nothing of it, and none
// of them imports the loop's neighbours (queue/) or the CLI: dependencies
// point downward only (docs/architecture.md).
func TestDelegatesImportNothingUpward(t *testing.T) {
	const module = "github.com/kargo-latch/kargo-latch/"
	forbidden := []string{module + "controller", module + "queue", module + "cli", module + "cmd/kargo-latch"}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, e.Name())
		}
	}
	dirs = append(dirs, filepath.Join("internal", "eventually"))
	checked := 0
	for _, dir := range dirs {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			continue // not a Go package
		}
		checked++
		for _, imp := range slices.Concat(pkg.Imports, pkg.TestImports) {
			if slices.Contains(forbidden, imp) || strings.HasPrefix(imp, module+"cli/") {
				t.Errorf("controller/%s imports %s", dir, imp)
			}
		}
	}
	if checked < 5 {
		t.Errorf("checked %d packages under controller/, want every delegate (at least 5)", checked)
	}
}
