// Package dashboard is `kargo-latch dashboard`: a web page, served by the
// CLI on the loopback address, that shows what `kargo-latch status` shows,
// live, and pauses and resumes with the user's own credentials.
//
// The page never judges a Stage itself: the CLI hands it Snapshots made by
// its own reading of Stages and pauses (the rows of `status -o json`), and
// actions that are the CLI's own pause and resume. What this package adds is
// the page, the live feed, the question "may I?" put to the API server, and
// the guards a local server acting with someone's credentials needs.
package dashboard

import (
	"encoding/json"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Snapshot is one consistent view of everything the page shows.
type Snapshot struct {
	Stages []Stage
	Pauses []Pause
	// Problems are what kept part of the view from being read, by project
	// ("" for all of them): a missing right, a missing CRD.
	Problems map[string]string
	// Failing: some watch fails now (Problems also hold notes from start).
	Failing bool
}

// Stage is one Stage as the page shows it.
type Stage struct {
	Project string `json:"project"`
	Name    string `json:"name"`
	// Upstream are the Stages it requests Freight from, Direct whether it
	// also takes Freight straight from a Warehouse: the pipeline's edges.
	Upstream []string `json:"upstream,omitempty"`
	Direct   bool     `json:"direct,omitempty"`
	// Status is the Stage's row of `kargo-latch status -o json`, as is.
	Status json.RawMessage `json:"status"`
	// Version, when set, changes whenever anything else here changes: the
	// page's state encodes a Stage again only when it does.
	Version string `json:"-"`
	// Warnings are the Stage's recent Warning Events (refusals, gate
	// bypasses), newest first, where the user may read Events.
	Warnings []Event `json:"warnings,omitempty"`
	// PausesUnknown: the user's pauses in the project cannot be read now;
	// LabelPaused is then the Stage's own paused label, which the operator
	// keeps while a pause covers it.
	PausesUnknown bool `json:"pausesUnknown,omitempty"`
	LabelPaused   bool `json:"labelPaused,omitempty"`
	// Aliases are the current Freight's aliases, by Freight name, where the
	// user may read Freight.
	Aliases map[string]string `json:"aliases,omitempty"`
}

// Pause is one StagePause as the page shows it.
type Pause struct {
	Project string `json:"project"`
	Name    string `json:"name"`
	// Stage is the paused Stage, or "*" for the whole project.
	Stage   string    `json:"stage"`
	Reason  string    `json:"reason"`
	Message string    `json:"message,omitempty"`
	Since   time.Time `json:"since"`
	// ByOperator: the operator made it for a failure (the Stage's record
	// names it). ClaimedBy is the user the pausing client (this CLI or its
	// page) said made it: a claim, which anyone who may pause can write.
	ByOperator bool   `json:"byOperator,omitempty"`
	ClaimedBy  string `json:"claimedBy,omitempty"`
	// Drained names the queued auto-promotions aborted when it took effect.
	Drained []string `json:"drained,omitempty"`
	// Resuming: deleted, held by the operator only until it records the
	// resume; it no longer covers anything.
	Resuming bool `json:"resuming,omitempty"`
}

// Key is a Stage's or a pause's key in the page's maps.
func Key(project, name string) string { return project + "/" + name }

// UpstreamOf reads the pipeline's edges from a Stage's
// spec.requestedFreight: each request's sources.stages, and whether any
// request takes Freight from its Warehouse directly.
func UpstreamOf(u *unstructured.Unstructured) (upstream []string, direct bool) {
	requests, _, _ := unstructured.NestedSlice(u.Object, "spec", "requestedFreight")
	seen := map[string]bool{}
	for _, r := range requests {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		if d, _, _ := unstructured.NestedBool(m, "sources", "direct"); d {
			direct = true
		}
		stages, _, _ := unstructured.NestedStringSlice(m, "sources", "stages")
		for _, s := range stages {
			if !seen[s] {
				seen[s] = true
				upstream = append(upstream, s)
			}
		}
	}
	sort.Strings(upstream)
	return upstream, direct
}
