package cli

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"text/template"

	"sigs.k8s.io/yaml"
)

// The krew manifest template renders, as krew-release-bot renders it, into
// a Plugin "latch" whose every platform runs the binary as kubectl-latch
// (the name that makes the binary the CLI) from that release's archive.
func TestKrewTemplate(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile("../hack/krew/latch.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const tag = "v1.2.3"
	funcs := template.FuncMap{"addURIAndSha": func(uri, tag string) string {
		return "uri: " + strings.ReplaceAll(uri, "{{ .TagName }}", tag) + "\n    sha256: 0000"
	}}
	tmpl, err := template.New("krew").Funcs(funcs).Parse(string(text))
	if err != nil {
		t.Fatal(err)
	}
	var rendered bytes.Buffer
	if err := tmpl.Execute(&rendered, map[string]string{"TagName": tag}); err != nil {
		t.Fatal(err)
	}
	var plugin struct {
		Kind     string
		Metadata struct{ Name string }
		Spec     struct {
			Version   string
			Platforms []struct {
				URI, Sha256, Bin string
			}
		}
	}
	if err := yaml.Unmarshal(rendered.Bytes(), &plugin); err != nil {
		t.Fatalf("the rendered manifest is not YAML: %v\n%s", err, rendered.String())
	}
	if plugin.Kind != "Plugin" || plugin.Metadata.Name != "latch" || plugin.Spec.Version != tag || len(plugin.Spec.Platforms) == 0 {
		t.Fatalf("rendered: %+v", plugin)
	}
	for _, p := range plugin.Spec.Platforms {
		if !strings.HasPrefix(p.Bin, "kubectl-latch") || !strings.Contains(p.URI, "/"+tag+"/kubectl-latch_"+tag+"_") || p.Sha256 == "" {
			t.Errorf("platform %+v", p)
		}
	}
}
