package doclinks

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// repoRoot is the repository's root, seen from this package's directory
// (where go test runs).
const repoRoot = "../.."

// TestRelativeLinksResolve: every relative link of the README, of docs/
// and of the chart's README names a file that exists in the repository,
// and every #anchor a heading of the page it points into.
func TestRelativeLinksResolve(t *testing.T) {
	files := []string{"README.md", "charts/kargo-latch/README.md"}
	docs, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no docs/*.md found: is the root right?")
	}
	for _, d := range docs {
		rel, err := filepath.Rel(repoRoot, d)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, rel)
	}
	problems, err := Check(repoRoot, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	// The check must have had links to check: a parser that finds none
	// would pass everything.
	data, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(Links(string(data))); n < 10 {
		t.Errorf("found only %d links in README.md; the parser misses links", n)
	}
}

// TestIndexListsEveryPage: docs/README.md, the index, links every page of
// docs/, so that a new page is not left unfound.
func TestIndexListsEveryPage(t *testing.T) {
	index, err := os.ReadFile(filepath.Join(repoRoot, "docs", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	linked := map[string]bool{}
	for _, l := range Links(string(index)) {
		page, _, _ := strings.Cut(l.Target, "#")
		linked[page] = true
	}
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		if name := filepath.Base(p); name != "README.md" && !linked[name] {
			t.Errorf("docs/README.md does not link docs/%s", name)
		}
	}
}

func TestSlugFollowsGitHub(t *testing.T) {
	for text, want := range map[string]string{
		"Mark verified (opt-in)":                     "mark-verified-opt-in",
		"An incident, end to end":                    "an-incident-end-to-end",
		"Rights, and how to enable it":               "rights-and-how-to-enable-it",
		"Connection flags, version, completion":      "connection-flags-version-completion",
		"The `--for` flag":                           "the---for-flag",
		"Metrics, alerts & the dashboard":            "metrics-alerts--the-dashboard",
		"snake_case stays":                           "snake_case-stays",
		"[Shards](shards.md) and more":               "shards-and-more",
		"Kargo v1.11.1+":                             "kargo-v1111",
		"Déjà vu":                                    "déjà-vu",
		"`kargo-latch.io/state`: the record":         "kargo-latchiostate-the-record",
		"Where to change what":                       "where-to-change-what",
		"Performance: 10,000 Stages":                 "performance-10000-stages",
		"KargoLatchDown":                             "kargolatchdown",
		"one  two":                                   "one--two",
		"Moving to shards":                           "moving-to-shards",
		"Uninstall, upgrade and rollback":            "uninstall-upgrade-and-rollback",
		"informers → queue → sync":                   "informers--queue--sync",
		"What `status -w` shows (and what it hides)": "what-status--w-shows-and-what-it-hides",
	} {
		if got := Slug(text); got != want {
			t.Errorf("Slug(%q) = %q, want %q", text, got, want)
		}
	}
}

func TestAnchorsNumberDuplicatesAndSkipCode(t *testing.T) {
	doc := "# Title\n" +
		"## Shards\n" +
		"text\n" +
		"```sh\n" +
		"# not a heading\n" +
		"```\n" +
		"  ~~~~\n" +
		"  ## not one either\n" +
		"  ~~~~\n" +
		"### Shards\n" +
		"## Shards ##\n" +
		"<a id=\"custom\"></a>\n" +
		"#nospace is no heading\n"
	var got []string
	for a := range Anchors(doc) {
		got = append(got, a)
	}
	sort.Strings(got)
	want := []string{"custom", "shards", "shards-1", "shards-2", "title"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("anchors (-want +got):\n%s", diff)
	}
}

// TestCheckFindsBrokenLinks: each kind of broken link is reported, with its
// line, and the good ones are not.
func TestCheckFindsBrokenLinks(t *testing.T) {
	root := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		full := filepath.Join(root, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(full), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/shards.md", "# Shards\n## Moving to shards\n## Moving to shards\n")
	write("manifests/examples/shards/kustomization.yaml", "resources: []\n")
	write("README.md", "# kargo-latch\n"+
		"See [shards](docs/shards.md), [moving](docs/shards.md#moving-to-shards-1),\n"+ // 2: fine
		"[the example](manifests/examples/shards) and [top](#kargo-latch).\n"+ // 3: fine
		"[the\n"+
		"gone page](docs/gone.md) and [a bad anchor](docs/shards.md#moving-to-shards-2).\n"+ // 5: two
		"[here](#nowhere) [out](../shared/docs/contract.md) [web](https://kargo.io) [abs](/docs/shards.md)\n"+ // 6: three
		"`[not a link](nowhere.md)`\n"+
		"```md\n[not a link](nowhere.md)\n```\n"+
		"[ref]: docs/missing.md\n"+ // 11
		"[yaml line](manifests/examples/shards/kustomization.yaml#L1) [yaml anchor](manifests/examples/shards/kustomization.yaml#top)\n") // 12: one
	problems, err := Check(root, []string{"README.md"})
	if err != nil {
		t.Fatal(err)
	}
	type found struct {
		Line   int
		Target string
	}
	var got []found
	for _, p := range problems {
		got = append(got, found{p.Line, p.Target})
	}
	want := []found{
		{5, "docs/gone.md"},
		{5, "docs/shards.md#moving-to-shards-2"},
		{6, "#nowhere"},
		{6, "../shared/docs/contract.md"},
		{6, "/docs/shards.md"},
		{11, "docs/missing.md"},
		{12, "manifests/examples/shards/kustomization.yaml#top"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s\nall: %v", diff, problems)
	}
}
