package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"text/template"

	"github.com/Masterminds/sprig/v3"
	"github.com/expr-lang/expr"
	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/kargo-latch/kargo-latch/api"
)

// kargoLinkFuncs is the function map of Kargo's URL templates
// (pkg/deeplinks/deeplinks.go, init): sprig.GenericFuncMap() without env,
// expandenv and getHostByName. (sprig.TxtFuncMap is the same map, typed as
// template.FuncMap.)
func kargoLinkFuncs() template.FuncMap {
	funcs := sprig.GenericFuncMap()
	delete(funcs, "env")
	delete(funcs, "expandenv")
	delete(funcs, "getHostByName")
	return funcs
}

// kargoEvaluate evaluates one link for one Stage exactly as Kargo's API
// server does (pkg/deeplinks/deeplinks.go, EvaluateLinks, read in
// akuity/kargo at 804fe420 and 0dbc7ec5, both alike):
//   - the context is {"stage": <the Stage marshalled to JSON and decoded
//     into map[string]any>} (StageContext/toContextMap);
//   - a non-empty If is run with expr.Eval(link.If, ctx), with no options
//     (no expr.Env, no expr.AsBool); an error, or a result that is not a
//     bool, is an error for the link; false hides it;
//   - the URL is template.New("").Funcs(funcs).Parse(link.URL), executed
//     on the same context, with no template options (missingkey=default).
func kargoEvaluate(link StageLink, stageJSON string) (shown bool, url string, err error) {
	var stage map[string]any
	if err := json.Unmarshal([]byte(stageJSON), &stage); err != nil {
		return false, "", fmt.Errorf("the test's Stage: %w", err)
	}
	ctx := map[string]any{"stage": stage}
	if link.If != "" {
		out, err := expr.Eval(link.If, ctx)
		if err != nil {
			return false, "", fmt.Errorf("error evaluating condition for link %q: %w", link.Title, err)
		}
		cond, ok := out.(bool)
		if !ok {
			return false, "", fmt.Errorf("condition for link %q evaluated to non-boolean value", link.Title)
		}
		if !cond {
			return false, "", nil
		}
	}
	t, err := template.New("").Funcs(kargoLinkFuncs()).Parse(link.URL)
	if err != nil {
		return false, "", fmt.Errorf("error parsing URL template for link %q: %w", link.Title, err)
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, ctx); err != nil {
		return false, "", fmt.Errorf("error evaluating URL template for link %q: %w", link.Title, err)
	}
	return true, buf.String(), nil
}

// stageJSON is a Stage as Kargo's API server marshals it, with metadata
// given as JSON members (without braces): a typed Stage's empty labels are
// omitted (omitempty), so "no labels key" is the common case.
func stageJSON(metadata string) string {
	return `{"apiVersion":"kargo.akuity.io/v1alpha1","kind":"Stage",` +
		`"metadata":{"name":"prod","namespace":"proj","uid":"0b6c","creationTimestamp":"2026-12-07T10:00:00Z"` + metadata + `},` +
		`"spec":{"requestedFreight":[{"origin":{"kind":"Warehouse","name":"w"},"sources":{"direct":true}}]},` +
		`"status":{"phase":"Steady","health":{"status":"Healthy"}}}`
}

// The entry shows on a paused Stage only, linking to its dashboard page,
// and is hidden, with no error, on every other Stage: Kargo reports an
// error beside the links for an `if` that fails, so a Stage without labels
// must not make it fail.
func TestStageLinkKargoEvaluation(t *testing.T) {
	t.Parallel()
	link := stageLinkFor("")
	const wantURL = "http://localhost:3100/projects/proj/stages/prod"
	for _, c := range []struct {
		name, metadata string
		shown          bool
	}{
		{"paused", `,"labels":{"kargo-latch.io/paused":"true","app":"x"}`, true},
		{"paused label alone", `,"labels":{"kargo-latch.io/paused":"true"}`, true},
		{"other labels only", `,"labels":{"app":"x"}`, false},
		{"paused label false", `,"labels":{"kargo-latch.io/paused":"false"}`, false},
		{"paused label empty", `,"labels":{"kargo-latch.io/paused":""}`, false},
		{"paused label True", `,"labels":{"kargo-latch.io/paused":"True"}`, false},
		{"empty labels map", `,"labels":{}`, false},
		{"labels null", `,"labels":null`, false},
		{"no metadata.labels key", ``, false},
		{"only annotations", `,"annotations":{"kargo-latch.io/paused":"true"}`, false},
	} {
		shown, url, err := kargoEvaluate(link, stageJSON(c.metadata))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if shown != c.shown {
			t.Errorf("%s: shown %v, want %v", c.name, shown, c.shown)
		}
		if shown && url != wantURL {
			t.Errorf("%s: URL %q, want %q", c.name, url, wantURL)
		}
	}
}

// The expression is robust beyond a real Stage too: no metadata at all, or
// a metadata that is null, hides the link without an error.
func TestStageLinkIfWithoutMetadata(t *testing.T) {
	t.Parallel()
	for _, s := range []string{`{}`, `{"metadata":null}`, `{"metadata":{}}`} {
		if shown, _, err := kargoEvaluate(stageLinkFor(""), s); shown || err != nil {
			t.Errorf("Stage %s: shown %v, error %v; want hidden, no error", s, shown, err)
		}
	}
}

// The guard is needed: the plain index (kargo-api-facts.md §14's example)
// fails on a Stage without labels, which Kargo would report as an error.
func TestStageLinkPlainIndexWouldFail(t *testing.T) {
	t.Parallel()
	plain := stageLinkFor("")
	plain.If = fmt.Sprintf(`stage.metadata.labels[%q] == "true"`, api.PausedLabel)
	if _, _, err := kargoEvaluate(plain, stageJSON(``)); err == nil || !strings.Contains(err.Error(), "cannot fetch") {
		t.Errorf("the plain index on a Stage without labels: %v; want expr-lang's nil-fetch error (so the guard matters)", err)
	}
	if !strings.Contains(stageLinkFor("").If, api.PausedLabel) {
		t.Errorf("if %q does not name %s", stageLinkFor("").If, api.PausedLabel)
	}
}

// The base URL: the default, a custom one with trailing slashes, a path
// prefix; Stage names with dots go in as they are.
func TestStageLinkBaseURL(t *testing.T) {
	t.Parallel()
	paused := `,"labels":{"kargo-latch.io/paused":"true"}`
	for _, c := range []struct{ base, stage, want string }{
		{"", stageJSON(paused), "http://localhost:3100/projects/proj/stages/prod"},
		{"http://localhost:3100", stageJSON(paused), "http://localhost:3100/projects/proj/stages/prod"},
		{"http://localhost:3100/", stageJSON(paused), "http://localhost:3100/projects/proj/stages/prod"},
		{"https://latch.example.com:8443/kargo//", stageJSON(paused), "https://latch.example.com:8443/kargo/projects/proj/stages/prod"},
		{"http://127.0.0.1:9999/", strings.Replace(stageJSON(paused), `"name":"prod"`, `"name":"prod.eu-1"`, 1), "http://127.0.0.1:9999/projects/proj/stages/prod.eu-1"},
	} {
		base, err := stageLinkBase(c.base)
		if err != nil {
			t.Errorf("--url %q: %v", c.base, err)
			continue
		}
		shown, url, err := kargoEvaluate(stageLinkFor(base), c.stage)
		if err != nil || !shown || url != c.want {
			t.Errorf("--url %q: shown %v, URL %q, error %v; want %q", c.base, shown, url, err, c.want)
		}
	}
	// stageLinkFor alone trims and defaults as well.
	if got, want := stageLinkFor("http://localhost:3100/").URL, stageLinkFor("").URL; got != want {
		t.Errorf("stageLinkFor with a trailing slash: %q, want %q", got, want)
	}
}

// A base that is no http(s) URL, or that would put credentials, a query,
// a fragment or template actions into the stored link, is a usage error.
func TestStageLinkBadBase(t *testing.T) {
	t.Parallel()
	for _, base := range []string{
		"localhost:3100", "ftp://localhost", "//localhost:3100", "http://", "http:localhost",
		"http://user:pw@localhost:3100", "http://localhost:3100/?a=b", "http://localhost:3100/#x",
		"http://localhost:3100/{{ env \"HOME\" }}", "http://x/}}", "http://local host",
	} {
		var out bytes.Buffer
		err := printStageLink(&out, base, "entry")
		var coded *exitError
		if !errors.As(err, &coded) || coded.code != ExitUsage || !strings.Contains(err.Error(), "--url") {
			t.Errorf("--url %q: %v; want a usage error about --url", base, err)
		}
		if out.Len() > 0 {
			t.Errorf("--url %q: printed %q", base, out.String())
		}
	}
}

// Each format parses back (as kubectl reads YAML) into the object with the
// entry intact, which still evaluates as Kargo does; each says that
// kargo-latch never writes the object.
func TestStageLinkFormatsRoundTrip(t *testing.T) {
	t.Parallel()
	const base = "https://latch.example.com/"
	want := stageLinkFor("https://latch.example.com")
	type config struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Spec struct {
			StageLinks []StageLink `json:"stageLinks"`
		} `json:"spec"`
	}
	for _, c := range []struct {
		format, kind, name, namespace string
	}{
		{"projectconfig", "ProjectConfig", "PROJECT", "PROJECT"},
		{"clusterconfig", "ClusterConfig", "cluster", ""},
		{"entry", "", "", ""},
	} {
		var out bytes.Buffer
		if err := printStageLink(&out, base, c.format); err != nil {
			t.Errorf("%s: %v", c.format, err)
			continue
		}
		text := out.String()
		if !strings.HasPrefix(text, "# kargo-latch never writes") {
			t.Errorf("%s: does not start with the comment that kargo-latch never writes the object:\n%s", c.format, text)
		}
		var links []StageLink
		if c.format == "entry" {
			if err := yaml.UnmarshalStrict(out.Bytes(), &links); err != nil {
				t.Errorf("entry: %v\n%s", err, text)
				continue
			}
		} else {
			var got config
			if err := yaml.UnmarshalStrict(out.Bytes(), &got); err != nil {
				t.Errorf("%s: %v\n%s", c.format, err, text)
				continue
			}
			if got.APIVersion != "kargo.akuity.io/v1alpha1" || got.Kind != c.kind || got.Metadata.Name != c.name || got.Metadata.Namespace != c.namespace {
				t.Errorf("%s: %s %s %s/%s; want kargo.akuity.io/v1alpha1 %s %s/%s", c.format,
					got.APIVersion, got.Kind, got.Metadata.Namespace, got.Metadata.Name, c.kind, c.namespace, c.name)
			}
			if printed := strings.Contains(text, "\n  namespace:"); printed != (c.namespace != "") {
				t.Errorf("%s: metadata.namespace printed %v, want %v", c.format, printed, c.namespace != "")
			}
			links = got.Spec.StageLinks
		}
		if diff := cmp.Diff([]StageLink{want}, links); diff != "" {
			t.Errorf("%s: the entry read back (-want +got):\n%s", c.format, diff)
			continue
		}
		shown, url, err := kargoEvaluate(links[0], stageJSON(`,"labels":{"kargo-latch.io/paused":"true"}`))
		if err != nil || !shown || url != "https://latch.example.com/projects/proj/stages/prod" {
			t.Errorf("%s: the entry read back evaluates to shown %v, URL %q, error %v", c.format, shown, url, err)
		}
	}
}

// The printed entry carries Kargo's DeepLink field names, and nothing else.
func TestStageLinkFieldNames(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(stageLinkFor(""))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if want := []string{"description", "if", "title", "url"}; !slices.Equal(keys, want) {
		t.Errorf("JSON keys %v, want %v", keys, want)
	}
	var out bytes.Buffer
	if err := printStageLink(&out, "", "entry"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\n- title: Paused by kargo-latch\n", "\n  url: ", "\n  description: ", "\n  if: "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("entry does not contain %q:\n%s", want, out.String())
		}
	}
	// One line per field: a URL template folded across lines is easy to
	// break when pasted into kubectl edit.
	if !strings.Contains(out.String(), "\n  url: http://localhost:3100/projects/{{ .stage.metadata.namespace }}/stages/{{ .stage.metadata.name }}\n") {
		t.Errorf("the URL is not on one line:\n%s", out.String())
	}
}

// The description tells the reader to start the dashboard first.
func TestStageLinkDescription(t *testing.T) {
	t.Parallel()
	d := stageLinkFor("").Description
	for _, want := range []string{"kargo-latch dashboard", "kubectl latch dashboard", "first"} {
		if !strings.Contains(d, want) {
			t.Errorf("description %q does not say %q", d, want)
		}
	}
	if got := stageLinkFor("").Title; got != "Paused by kargo-latch" {
		t.Errorf("title %q", got)
	}
}

// A format outside the list is a usage error naming the valid ones; the
// command runs with its defaults and takes no arguments.
func TestStageLinkCommand(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := printStageLink(&out, "", "helm")
	var coded *exitError
	if !errors.As(err, &coded) || coded.code != ExitUsage || !strings.Contains(err.Error(), "projectconfig, clusterconfig, entry") || out.Len() > 0 {
		t.Errorf("--format helm: %v, printed %q; want a usage error listing projectconfig, clusterconfig, entry", err, out.String())
	}

	run := func(args ...string) (string, error) {
		cmd := stageLinkCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(args)
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		err := cmd.Execute()
		return out.String(), err
	}
	got, err := run()
	var want bytes.Buffer
	_ = printStageLink(&want, defaultDashboardURL, "projectconfig")
	if err != nil || got != want.String() {
		t.Errorf("stage-link with no flags: %v\n%s\nwant the projectconfig format for %s:\n%s", err, got, defaultDashboardURL, want.String())
	}
	got, err = run("--format", "entry", "--url", "http://localhost:8080/")
	if err != nil || !strings.Contains(got, "url: http://localhost:8080/projects/") {
		t.Errorf("stage-link --format entry --url http://localhost:8080/: %v\n%s", err, got)
	}
	for _, args := range [][]string{{"--format", "yaml"}, {"extra"}} {
		if _, err := run(args...); !errors.As(err, &coded) || coded.code != ExitUsage {
			t.Errorf("stage-link %v: %v; want a usage error", args, err)
		}
	}
	cmd := stageLinkCmd()
	if !strings.HasPrefix(cmd.Use, "stage-link ") || cmd.Short == "" ||
		cmd.Flags().Lookup("url").DefValue != defaultDashboardURL || cmd.Flags().Lookup("format").DefValue != "projectconfig" {
		t.Errorf("stage-link: use %q, short %q, flags url=%q format=%q", cmd.Use, cmd.Short,
			cmd.Flags().Lookup("url").DefValue, cmd.Flags().Lookup("format").DefValue)
	}
}
