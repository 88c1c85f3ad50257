package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// The set-up of figures V1 and V2 (verify-on-latch; the figures are in
// verifyfigures.go).
//
// verifyGrace is the operator's --verify-grace in the bench: none, so that
// the latch → AnalysisRun figure is the operator's own path and not the
// wait it gives Kargo (10 s by default), which would only add itself to
// every sample.
const verifyGrace = 0 * time.Second

// verifyArgs are the operator's flags for verify-on-latch: on, for the
// Stages annotated for it, with no grace.
var verifyArgs = []string{"--enable-verify-on-latch", "--verify-grace=" + verifyGrace.String()}

// verifyTemplate is the AnalysisTemplate every verifying Stage's
// spec.verification names: one web metric.
const verifyTemplate = "bench-web"

// verifySetup holds what figures V1 and V2 need beyond the bench's Stages:
// the web metric's endpoint, and when the watcher first saw each
// AnalysisRun.
type verifySetup struct {
	w      *watcher
	metric *driver.MetricServer
	// runs holds, per "namespace/stage/freight collection" (Kargo's two
	// labels), the first AnalysisRun the watcher saw for it.
	runs map[string]runSeen
}

type runSeen struct {
	name string
	seen time.Time
}

// prepareVerify creates the AnalysisTemplate of the verifying Stages and
// starts the watch on AnalysisRuns in the busy namespace. No Argo Rollouts
// controller runs in the bench: the web metric's endpoint is there so that
// the template is one a controller could run, and the bench plays the
// controller's result itself (verifyfigures.go).
func (b *bench) prepareVerify(ctx context.Context) (*verifySetup, error) {
	v := &verifySetup{w: b.watcher, metric: driver.NewMetricServer(), runs: map[string]runSeen{}}
	if _, err := b.kargo.CreateAnalysisTemplate(ctx, busyNS, verifyTemplate, driver.AnalysisTemplate{
		Metrics: []driver.Metric{driver.WebMetric("web", v.metric.URL+"/healthz")},
	}); err != nil {
		return nil, err
	}
	go b.watcher.watch(ctx, driver.AnalysisRunsResource, busyNS, v.observeRun)
	return v, nil
}

// verifyingStages is the range of busy Stages that verify on latch: the
// samples' worth after the reaction's failing and marking Stages
// (reaction.go takes the first 2 × spare), so that the reaction's figures
// see the Stages they always saw.
func (b *bench) verifyingStages() (lo, hi int) {
	spare := min(b.o.samples, b.o.stages/4)
	return 2 * spare, 3 * spare
}

// verifies reports whether the i-th busy Stage verifies on latch.
func (b *bench) verifies(i int) bool {
	lo, hi := b.verifyingStages()
	return i >= lo && i < hi
}

// stageOptions makes a busy Stage one that verifies on latch and marks
// verified: its annotations, and a spec.verification naming the web
// template. Its status, as WriteBusyStatus writes it, shows Kargo's own
// verification of its current Freight, which the operator follows: it
// starts a run only for a cycle the bench promotes later.
func (v *verifySetup) stageOptions(annotations map[string]string, opts []driver.StageOption) []driver.StageOption {
	annotations[api.VerifyOnLatchAnnotation] = "true"
	annotations[api.MarkVerifiedAnnotation] = "true"
	return append(opts, driver.WithAnalysis(driver.Verification{Templates: []driver.TemplateRef{{Name: verifyTemplate}}}))
}

func (v *verifySetup) observeRun(ns string, u *unstructured.Unstructured, at time.Time) {
	labels := u.GetLabels()
	key := ns + "/" + labels[driver.StageLabel] + "/" + labels[driver.FreightCollectionLabel]
	v.w.mu.Lock()
	defer v.w.mu.Unlock()
	if _, seen := v.runs[key]; !seen {
		v.runs[key] = runSeen{name: u.GetName(), seen: at}
	}
	v.w.cond.Broadcast()
}

// waitRun waits until the watcher has seen an AnalysisRun of the Stage's
// Freight collection.
func (v *verifySetup) waitRun(ctx context.Context, ns, stage, collection string) (runSeen, error) {
	var r runSeen
	err := v.w.waitFor(ctx, time.Minute, func(*watcher) bool {
		var ok bool
		r, ok = v.runs[ns+"/"+driver.ShortenLabelValue(stage)+"/"+collection]
		return ok
	})
	if err != nil {
		return r, fmt.Errorf("no AnalysisRun of Stage %s/%s, collection %s, seen: %w", ns, stage, collection, err)
	}
	return r, nil
}

// finishRun plays Argo Rollouts' analysis controller: it writes the run's
// status as the controller leaves it, phase Running with startedAt, or a
// result with its metric's measurement and completedAt. AnalysisRun's CRD
// has no status subresource (bin/rollouts-crds: subresources {}), so the
// status goes in a merge patch of the object itself. It returns the
// completedAt written (empty while Running).
func (b *bench) finishRun(ctx context.Context, ns, name, phase string, started time.Time) (string, error) {
	startedAt := started.UTC().Format(time.RFC3339)
	status := map[string]any{"phase": phase, "startedAt": startedAt}
	completedAt := ""
	if phase != "Running" {
		completedAt = time.Now().UTC().Format(time.RFC3339)
		status["completedAt"] = completedAt
		status["runSummary"] = map[string]any{"count": 1, "successful": 1}
		status["metricResults"] = []any{map[string]any{
			"name": "web", "phase": phase, "count": 1, "successful": 1, "consecutiveSuccess": 1,
			"measurements": []any{map[string]any{"phase": phase, "value": "ok", "startedAt": startedAt, "finishedAt": completedAt}},
		}}
	}
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return "", err
	}
	_, err = b.dyn.Resource(driver.AnalysisRunsResource).Namespace(ns).Patch(ctx, name, types.MergePatchType, body,
		metav1.PatchOptions{FieldManager: "bench-analysis-controller"})
	if err != nil {
		return "", fmt.Errorf("writing AnalysisRun %s/%s %s: %w", ns, name, phase, err)
	}
	return completedAt, nil
}

// startedLine is klog's text line for a run the operator made, e.g.
// I1206 02:30:01.123456    1234 verify.go:121] "Started the Stage's verification" stage="bench/stage-00240" analysisRun="stage-00240.latch-…"
var startedLine = regexp.MustCompile(`^I(\d{4} \d{2}:\d{2}:\d{2}\.\d{6}) .*"Started the Stage's verification".* analysisRun="([^"]+)"`)

// startedInLog maps each AnalysisRun the operator logged as made to when
// its create returned.
func startedInLog(path string) map[string]time.Time {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	year := time.Now().Year()
	out := map[string]time.Time{}
	for _, line := range strings.Split(string(data), "\n") {
		m := startedLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.ParseInLocation("0102 15:04:05.000000", m[1], time.Local)
		if err != nil {
			continue
		}
		out[m[2]] = at.AddDate(year-at.Year(), 0, 0)
	}
	return out
}
