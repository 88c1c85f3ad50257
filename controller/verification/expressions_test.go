package verification

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// testEvaluator evaluates over two Warehouses: images (an image and an OCI
// chart) and config (a Git repository, written differently than in Freight).
func testEvaluator(t *testing.T, warehouses map[string]*unstructured.Unstructured) *evaluator {
	t.Helper()
	if warehouses == nil {
		warehouses = map[string]*unstructured.Unstructured{
			"images": object(t, imagesWarehouseYAML),
			"config": object(t, configWarehouseYAML),
		}
	}
	fns := &freightFunctions{
		project:   "demo",
		requested: []Origin{{"Warehouse", "images"}, {"Warehouse", "config"}},
		freight: []FreightRef{{
			Name: "f-config", Origin: Origin{"Warehouse", "config"},
			Commits: []GitCommit{{RepoURL: "https://github.com/example/config", ID: "9f8e7d6c", Branch: "main", Tag: "v2"}},
		}, {
			Name: "f-images", Origin: Origin{"Warehouse", "images"},
			Images: []Image{{RepoURL: "ghcr.io/example/app", Tag: "v1.4.2", Digest: "sha256:aaa"}},
			Charts: []Chart{{RepoURL: "oci://ghcr.io/example/charts/app", Version: "0.3.0"}},
		}},
		warehouses: warehouses,
	}
	env := map[string]any{"ctx": map[string]any{"project": "demo", "stage": "test"}}
	return newEvaluator(env, fns.options())
}

func TestEvaluate(t *testing.T) {
	tests := []struct {
		template string
		want     any
	}{
		// Kargo's typing of the joined text.
		{"42", "42"},
		{"plain text", "plain text"},
		{"${{ 42 }}", float64(42)},
		{"${{ '1' }}", float64(1)},
		{"${{ 'true' }}", true},
		{`${{ '{"a": [1]}' }}`, map[string]any{"a": []any{float64(1)}}},
		{"${{ nil }}", nil},
		{"${{ quote(42) }}", "42"},
		{"${{ quote('true') }}", "true"},
		{`${{ quote('a"b') }}`, `a\"b`},
		{`${{ unsafeQuote('a"b') }}`, `"a\"b"`},
		{`"${{ ctx.stage }}"`, "test"},
		{"${{ ctx.stage }}\n", "test\n"},
		{"${{ ctx.project }}/${{ ctx.stage }}", "demo/test"},
		{"${% ctx.stage %}-${{ ctx.project }}", "test-demo"},
		{"${{ upper(ctx.stage) }}", "TEST"},
		{"${{ [ctx.stage, 1] }}", []any{"test", float64(1)}},
		// The Freight functions and their Go field names.
		{`${{ imageFrom("ghcr.io/example/app").Tag }}`, "v1.4.2"},
		{`${{ imageFrom("ghcr.io/example/app", warehouse("images")).Digest }}`, "sha256:aaa"},
		{`${{ imageFrom("ghcr.io/example/other") == nil }}`, true},
		{`${{ imageFrom("ghcr.io/example/app", warehouse("config")) == nil }}`, true},
		{`${{ commitFrom("https://github.com/example/config.git").ID }}`, "9f8e7d6c"},
		{`${{ commitFrom("https://GitHub.com/Example/config/", warehouse("config")).Branch }}`, "main"},
		{`${{ commitFrom("git@github.com:example/config.git", warehouse("config")) == nil }}`, true},
		{`${{ commitFrom("https://github.com/example/config").Tag }}`, "v2"},
		{`${{ chartFrom("oci://ghcr.io/example/charts/app").Version }}`, "0.3.0"},
		{`${{ chartFrom("oci://ghcr.io/example/charts/app", warehouse("images")).Version }}`, "0.3.0"},
		{`${{ chartFrom("oci://ghcr.io/example/charts/app", "app", warehouse("images")) == nil }}`, true},
		{`${{ warehouse("images").Name }}`, "images"},
	}
	for _, tt := range tests {
		t.Run(tt.template, func(t *testing.T) {
			got, err := testEvaluator(t, nil).evaluate(tt.template)
			if err != nil {
				t.Fatalf("evaluate: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestEvaluateErrors(t *testing.T) {
	ambiguous := map[string]*unstructured.Unstructured{
		"images": object(t, imagesWarehouseYAML),
		"config": object(t, `{spec: {subscriptions: [{image: {repoURL: ghcr.io/example/app}}]}}`),
	}
	tests := []struct {
		name, template string
		warehouses     map[string]*unstructured.Unstructured
		want           string // a part of the error
	}{
		{"lower-case field", `${{ imageFrom("ghcr.io/example/app").tag }}`, nil, "has no field tag"},
		{"field of an absent image", `${{ imageFrom("ghcr.io/example/other").Tag }}`, nil, "zero Value"},
		{"ambiguous origin", `${{ imageFrom("ghcr.io/example/app").Tag }}`, ambiguous, "multiple requested Freight"},
		{"chart never subscribed", `${{ chartFrom("oci://ghcr.io/example/charts/app", "app").Version }}`, nil, "not found in referenced Freight"},
		{"origin as a map", `${{ imageFrom("ghcr.io/example/app", {kind: "Warehouse", name: "images"}) }}`, nil, "too many arguments"},
		{"empty warehouse name", `${{ warehouse("").Name }}`, nil, "must not be empty"},
		{"kind is not a plain string", `${{ warehouse("images").Kind == "Warehouse" }}`, nil, "mismatched types"},
		{"configMap", `${{ configMap("c").k }}`, nil, "configMap() is not supported"},
		{"secret", `${{ secret("s").k }}`, nil, "secret() is not supported"},
		{"semverDiff", `${{ semverDiff("1.0.0", "2.0.0") }}`, nil, "semverDiff() is not supported"},
		{"encoding a Freight value", `${{ imageFrom("ghcr.io/example/app") }}`, nil, "not supported"},
		{"toJSON of a Freight value", `${{ toJSON(commitFrom("https://github.com/example/config")) }}`, nil, "not supported"},
		{"vars without vars", `${{ vars.x }}`, nil, "cannot fetch x"},
		{"unclosed", `${{ ctx.stage`, nil, "unclosed expression"},
		{"now", `${{ now() }}`, nil, "cannot call nil"},
		{"date", `${{ date("2026-01-01") }}`, nil, "cannot call nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := testEvaluator(t, tt.warehouses).evaluate(tt.template)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("evaluate = %#v, %v; want an error containing %q", got, err, tt.want)
			}
		})
	}
	t.Run("configMap is an unsupported function", func(t *testing.T) {
		_, err := testEvaluator(t, nil).evaluate(`${{ configMap("c").k }}`)
		if !errors.As(err, new(errUnsupportedFunction)) {
			t.Errorf("error %v is not errUnsupportedFunction", err)
		}
	})
}

func TestVarsChain(t *testing.T) {
	// Each var sees the ones before it (vars.x, not x); a later var does not
	// exist yet; a var's value is typed like any template.
	src := &Source{
		Project: "demo", Stage: "test", Configured: true,
		Vars: []Var{
			{Name: "base", Value: "http://checker.${{ ctx.project }}"},
			{Name: "port", Value: "${{ 8080 }}"},
			{Name: "url", Value: "${{ vars.base }}:${{ vars.port }}/${{ ctx.stage }}"},
			{Name: "early", Value: "${{ vars.late == nil }}"},
			{Name: "late", Value: "x"},
		},
		Args: []Arg{
			{Name: "url", Value: "${{ vars.url }}"},
			{Name: "early", Value: "${{ quote(vars.early) }}"},
			{Name: "port", Value: "${{ quote(vars.port) }}"},
			{Name: "bare", Value: "${{ quote(base) }}"},
			{Name: "empty"},
		},
	}
	got, err := evaluateArgs(src, nil)
	if err != nil {
		t.Fatalf("evaluateArgs: %v", err)
	}
	want := []evaluatedArg{
		{name: "url", value: "http://checker.demo:8080/test", hasValue: true},
		{name: "early", value: "true", hasValue: true},
		{name: "port", value: "8080", hasValue: true},
		{name: "bare", value: "null", hasValue: true},
		{name: "empty"},
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(evaluatedArg{})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestNormalizeGit(t *testing.T) {
	tests := map[string]string{ //nolint:gosec // URLs with made-up credentials, to see them dropped
		"https://github.com/Example/Repo.git":      "https://github.com/example/repo",
		"https://user:pw@github.com/example/repo/": "https://github.com/example/repo",
		"ssh://git@github.com/example/repo.git":    "ssh://git@github.com/example/repo",
		"git@github.com:example/repo.git":          "ssh://git@github.com/example/repo",
		"github.com":                               "ssh://github.com",
		"https://github.com/example/repo?ref=main": "https://github.com/example/repo?ref=main",
		"https://github.com/example/my%20repo":     "https://github.com/example/my%20repo",
		" https://github.com/example/repo.git\n":   "https://github.com/example/repo",
		"not a url":                                "not a url",
		"":                                         "",
	}
	for in, want := range tests {
		if got := normalizeGit(in); got != want {
			t.Errorf("normalizeGit(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzEvaluate(f *testing.F) {
	for _, s := range []string{`${{ imageFrom("ghcr.io/example/app").Tag }}`, "${% ctx.stage %}", `"${{ 1 }}"`, "${{", "plain"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, template string) {
		// Any template gives a value or an error, never a panic; a template
		// without delimiters is returned as is.
		got, err := testEvaluator(t, nil).evaluate(template)
		if !strings.Contains(template, "${{") && !strings.Contains(template, "${%") && (err != nil || got != template) {
			t.Fatalf("evaluate(%q) = %#v, %v; want it as is", template, got, err)
		}
	})
}
