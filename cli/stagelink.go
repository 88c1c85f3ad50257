package cli

// stage-link prints the entry that makes Kargo's own UI show kargo-latch's
// pause: one of Kargo's Stage deep links (Kargo v1.11.0+,
// ProjectConfig.spec.stageLinks and ClusterConfig.spec.stageLinks; see
// kargo-api-facts.md §14), shown only on paused Stages and linking to the
// Stage's page in `kargo-latch dashboard`.
//
// kargo-latch only prints it. ProjectConfig and ClusterConfig belong to the
// user's Kargo install: kargo-latch never writes them (the contract's "Pause
// and resume from a page").

import (
	"bytes"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/spf13/cobra"
	yaml "go.yaml.in/yaml/v3"

	"github.com/kargo-latch/kargo-latch/api"
)

// StageLink is one of Kargo's deep links (Kargo's DeepLink type,
// api/v1alpha1: title, url, description, if), as it is written in a
// ProjectConfig's or ClusterConfig's spec.stageLinks.
//
// Kargo's API server evaluates it for one Stage at a time
// (pkg/deeplinks/deeplinks.go) against the context {"stage": <the Stage as
// JSON>}: If is an expr-lang expression that must give a boolean (false, or
// any error, hides the link); URL is a Go text/template with sprig's
// functions (without env, expandenv and getHostByName); Title and
// Description are plain strings.
type StageLink struct {
	Title       string `json:"title" yaml:"title"`
	URL         string `json:"url" yaml:"url"`
	Description string `json:"description,omitempty" yaml:"description,omitempty"`
	If          string `json:"if,omitempty" yaml:"if,omitempty"`
}

// defaultDashboardURL is where `kargo-latch dashboard` serves its page.
const defaultDashboardURL = "http://localhost:3100"

// The formats stage-link prints, in the order its help lists them.
var stageLinkFormats = []string{"projectconfig", "clusterconfig", "entry"}

// stageLinkIf shows the link only while the operator's paused label is
// "true" on the Stage (api.PausedLabel: set exactly while a StagePause
// covers it).
//
// The optional chaining (?.) matters: Kargo marshals the Stage to JSON, where
// a Stage without labels has no metadata.labels key at all, and expr-lang
// fails on an index into nil ("cannot fetch … from <nil>"); Kargo would then
// report an evaluation error for every unlabelled Stage instead of hiding the
// link. With ?. a missing map gives nil, and nil == "true" is false.
var stageLinkIf = fmt.Sprintf(`stage.metadata?.labels?.[%q] == "true"`, api.PausedLabel)

// stageLinkPath is the dashboard's Stage page under the base URL. A Stage's
// project is its namespace. Both names are Kubernetes names (a DNS-1123
// label and subdomain: a-z, 0-9, '-' and '.'), every character of which is
// unreserved in a URL path segment, so they go in as they are: text/template
// has only urlquery, which is query escaping (a space becomes '+') and wrong
// for a path, and sprig has no path escaping.
const stageLinkPath = "/projects/{{ .stage.metadata.namespace }}/stages/{{ .stage.metadata.name }}"

// stageLinkFor returns the entry for a dashboard served at base (default
// http://localhost:3100; trailing slashes are dropped). base must already be
// valid (see stageLinkBase): it becomes the literal start of the URL
// template.
func stageLinkFor(base string) StageLink {
	base = strings.TrimRight(base, "/")
	if base == "" {
		base = defaultDashboardURL
	}
	return StageLink{
		Title: "Paused by kargo-latch",
		URL:   base + stageLinkPath,
		Description: "A kargo-latch StagePause stops auto-promotion to this Stage. " +
			"Opens the Stage in the local kargo-latch dashboard: run " +
			"`kargo-latch dashboard` (or `kubectl latch dashboard`) on your machine first.",
		If: stageLinkIf,
	}
}

// stageLinkBase checks and normalizes --url: an absolute http(s) URL with a
// host, optionally a path (for a proxy that keeps the Host the dashboard
// answers to), and nothing that
// would not belong in a link stored in a cluster object: no credentials, no
// query or fragment, and no template delimiters (the base is the literal
// start of a text/template).
func stageLinkBase(base string) (string, error) {
	if base == "" {
		return defaultDashboardURL, nil
	}
	if strings.Contains(base, "{{") || strings.Contains(base, "}}") {
		return "", usageErrorf("--url %q: must not contain {{ or }} (it is the literal start of Kargo's URL template)", base)
	}
	u, err := url.Parse(base)
	if err != nil {
		return "", usageErrorf("--url %q: %v", base, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", usageErrorf("--url %q: want an http:// or https:// URL, such as %s", base, defaultDashboardURL)
	case u.Host == "":
		return "", usageErrorf("--url %q: no host", base)
	case u.User != nil:
		return "", usageErrorf("--url %q: must not carry credentials (the link is stored in a Kargo object)", base)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return "", usageErrorf("--url %q: must not have a query or fragment (the Stage's path is appended to it)", base)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// kargoConfig is the part of a ProjectConfig or ClusterConfig that
// stage-link prints.
//
// It is encoded with go.yaml.in/yaml/v3, which keeps the fields in this
// order and does not wrap long lines: sigs.k8s.io/yaml sorts keys and folds
// the URL template across lines, which is valid YAML but easy to break when
// pasted into kubectl edit.
type kargoConfig struct {
	APIVersion string           `yaml:"apiVersion"`
	Kind       string           `yaml:"kind"`
	Metadata   kargoConfigMeta  `yaml:"metadata"`
	Spec       kargoConfigLinks `yaml:"spec"`
}

type kargoConfigMeta struct {
	Name      string `yaml:"name"`
	Namespace string `yaml:"namespace,omitempty"`
}

type kargoConfigLinks struct {
	StageLinks []StageLink `yaml:"stageLinks"`
}

// projectPlaceholder stands for the project in the printed ProjectConfig: a
// project's ProjectConfig is named after it, in its namespace.
const projectPlaceholder = "PROJECT"

// printStageLink writes the entry for a dashboard at base in one of
// stageLinkFormats:
//   - projectconfig: a ProjectConfig whose spec.stageLinks holds the entry,
//     named PROJECT for the user to replace;
//   - clusterconfig: the ClusterConfig (cluster-scoped, named cluster);
//   - entry: the list item alone.
//
// Each starts with comment lines saying that kargo-latch never writes the
// object and to merge the entry into the existing one. A bad base or format
// is a usage error; nothing is written then.
func printStageLink(out io.Writer, base, format string) error {
	base, err := stageLinkBase(base)
	if err != nil {
		return err
	}
	links := []StageLink{stageLinkFor(base)}
	var comment string
	var doc any
	switch format {
	case "projectconfig":
		comment = `# kargo-latch never writes this object. Merge spec.stageLinks into your
# project's existing ProjectConfig, keeping its other fields:
#   kubectl edit projectconfig PROJECT -n PROJECT
# (a ProjectConfig is named after its project, in the project's namespace;
# replace PROJECT). Kargo v1.11.0+ then shows the link on paused Stages.
`
		doc = kargoConfig{
			APIVersion: "kargo.akuity.io/v1alpha1",
			Kind:       "ProjectConfig",
			Metadata:   kargoConfigMeta{Name: projectPlaceholder, Namespace: projectPlaceholder},
			Spec:       kargoConfigLinks{StageLinks: links},
		}
	case "clusterconfig":
		comment = `# kargo-latch never writes this object. Merge spec.stageLinks into your
# existing ClusterConfig (cluster-scoped, named cluster), keeping its other
# fields:
#   kubectl edit clusterconfig cluster
# Kargo v1.11.0+ then shows the link on paused Stages of every project.
`
		doc = kargoConfig{
			APIVersion: "kargo.akuity.io/v1alpha1",
			Kind:       "ClusterConfig",
			Metadata:   kargoConfigMeta{Name: "cluster"},
			Spec:       kargoConfigLinks{StageLinks: links},
		}
	case "entry":
		comment = `# kargo-latch never writes Kargo's configuration. Add this item to
# spec.stageLinks of your ProjectConfig (kubectl edit projectconfig PROJECT
# -n PROJECT) or ClusterConfig (kubectl edit clusterconfig cluster).
`
		doc = links
	default:
		return usageErrorf("--format %q: want one of %s", format, strings.Join(stageLinkFormats, ", "))
	}
	// One write: a failure leaves no half-printed object behind.
	var buf bytes.Buffer
	buf.WriteString(comment)
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	_, err = out.Write(buf.Bytes())
	return err
}

const stageLinkHelp = `Prints the Kargo deep link that makes Kargo's own UI (v1.11.0+) show
kargo-latch's pause: an entry of ProjectConfig.spec.stageLinks or
ClusterConfig.spec.stageLinks, titled "Paused by kargo-latch", shown only on
Stages that carry the label kargo-latch.io/paused: "true" (set while a
StagePause covers the Stage), and opening the Stage's page in
kargo-latch dashboard.

kargo-latch never writes ProjectConfig or ClusterConfig: they belong to your
Kargo install. Merge the printed entry into the existing object yourself,
e.g. with kubectl edit. The link works while kargo-latch dashboard runs on
the machine of whoever clicks it, at --url: the dashboard answers only to
its own loopback address and localhost, so for "dashboard --port 8080" print
the entry with --url http://localhost:8080.

Formats:
  projectconfig  a ProjectConfig holding the entry (one project)
  clusterconfig  the ClusterConfig named cluster holding the entry (every project)
  entry          the list item alone`

const stageLinkExamples = `  kargo-latch dashboard stage-link
  kargo-latch dashboard stage-link --format clusterconfig
  kargo-latch dashboard stage-link --format entry --url http://localhost:8080`

// stageLinkCmd is `stage-link`, a subcommand of dashboard.
func stageLinkCmd() *cobra.Command {
	var base, format string
	cmd := &cobra.Command{
		Use:     "stage-link [--url BASE] [--format projectconfig|clusterconfig|entry]",
		Short:   "Print the Kargo stageLinks entry that shows a kargo-latch pause in Kargo's UI",
		Long:    stageLinkHelp,
		Example: stageLinkExamples,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return printStageLink(cmd.OutOrStdout(), base, format)
		},
	}
	cmd.Flags().StringVar(&base, "url", defaultDashboardURL, "where kargo-latch dashboard serves its page: http://localhost:PORT for dashboard --port PORT")
	cmd.Flags().StringVar(&format, "format", stageLinkFormats[0], "what to print: "+strings.Join(stageLinkFormats, ", "))
	_ = cmd.RegisterFlagCompletionFunc("format", fixedCompletions(stageLinkFormats...))
	_ = cmd.RegisterFlagCompletionFunc("url", cobra.NoFileCompletions)
	return cmd
}
