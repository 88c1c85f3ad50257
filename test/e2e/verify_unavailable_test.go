package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/controller/verification"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/cluster"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// verifyOnLatchRecovery is how soon verify-on-latch must turn itself on
// once its problem is fixed, as docs/verify-on-latch.md promises (client-go
// retries a refused list within 60 s, the operator looks every 5 s), with
// a margin for a loaded machine.
const verifyOnLatchRecovery = 90 * time.Second

// availableMetric is the gauge of verify-on-latch's availability by project.
const availableMetric = "kargo_latch_verify_on_latch_available"

// TestVerifyOnLatchProblemsLeaveTheCoreRunning: a problem of verify-on-latch
// turns verify-on-latch off, reported, and never the operator's start, the
// latch or the pauses. The operator binary runs across all namespaces, as
// installed, with --enable-verify-on-latch, on a cluster of its own (the
// shared one has Argo Rollouts' CRDs, and its other operators must not see
// this one's Stages).
func TestVerifyOnLatchProblemsLeaveTheCoreRunning(t *testing.T) {
	t.Parallel()
	w, err := newWorld(ctx, cluster.Options{}, nil)
	must(t, err)
	t.Cleanup(w.cluster.Stop)

	// Without Argo Rollouts' CRDs the operator starts, becomes ready, and
	// pauses a failed promotion; verify-on-latch is reported unavailable,
	// and turns on by itself once the CRDs are installed.
	t.Run("RolloutsCRDsMissing", func(t *testing.T) {
		deleteRolloutsCRDs(t, w)
		ns := w.newProject(t)
		s := w.createStage(t, ns, "test", verifyOnLatch, appsAB, namedAnalysis)
		op := startVerifierProcess(t, w.verifier)
		op.waitReady(t)

		must(t, promoteThenFail(s))
		waitPaused(t, s, true)
		if r := stageRecord(t, s); r.Failure == nil || r.Failure.Reason != latch.ReasonPromotionFailed || r.Failure.Pause == "" {
			t.Errorf("failure = %+v, want PromotionFailed with a pause", r.Failure)
		}
		op.waitAvailable(t, ns, false, waitLimit)
		ev := w.waitStageEvent(t, s, api.ReasonVerificationUnavailable)
		if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "analysisruns.argoproj.io") {
			t.Errorf("VerificationUnavailable Event = %s %q, want a Warning naming analysisruns.argoproj.io", ev.Type, ev.Message)
		}
		code, body, err := httpGet(op.probeURL + "/readyz")
		if err != nil || code != http.StatusOK || !strings.Contains(string(body), "verify-on-latch is unavailable") ||
			!strings.Contains(string(body), "analysisruns.argoproj.io") {
			t.Errorf("/readyz answered %d %q (%v), want 200 saying verify-on-latch is unavailable, and why", code, body, err)
		}
		// Past the cache-sync timeout, still up.
		time.Sleep(time.Until(op.started.Add(shortSyncTimeout + 2*time.Second)))
		if op.exited() {
			t.Fatalf("the operator exited: verify-on-latch's cache took the operator down")
		}

		fixedAt := time.Now()
		must(t, w.cluster.InstallRolloutsCRDs(ctx))
		op.waitAvailable(t, ns, true, verifyOnLatchRecovery)
		t.Logf("verify-on-latch available %v after the CRDs were installed, without a restart", time.Since(fixedAt).Round(10*time.Millisecond))
		waitLong(t, "/readyz to stop reporting verify-on-latch", waitLimit, func() bool {
			code, body, err := httpGet(op.probeURL + "/readyz")
			return err == nil && code == http.StatusOK && !strings.Contains(string(body), "verify-on-latch")
		})
	})

	// With the verify-on-latch ClusterRole bound in one project only (no
	// right cluster-wide), verify-on-latch works there, and is off,
	// reported, in the other; the pauses work in both.
	t.Run("RightsInOneProjectOnly", func(t *testing.T) {
		must(t, w.cluster.InstallRolloutsCRDs(ctx))
		granted, refused := w.newProject(t), w.newProject(t)
		identity := identityWithVerifyRightsIn(t, w, "e2e-verifier-one-project", granted)
		var stages []*driver.Stage
		for _, ns := range []string{granted, refused} {
			_, err := w.kargo.CreateAnalysisTemplate(ctx, ns, "web-check", driver.AnalysisTemplate{Metrics: []driver.Metric{driver.WebMetric("web", "http://127.0.0.1:1/healthz")}})
			must(t, err)
			stages = append(stages, w.createStage(t, ns, "test", verifyOnLatch, appsAB, namedAnalysis))
		}
		op := startVerifierProcess(t, identity)
		op.waitReady(t)

		for _, s := range stages {
			promote(t, s)
			flapUntilLatched(t, s)
		}
		withRights, withoutRights := stages[0], stages[1]
		r := waitAnalysis(t, withRights, "kargo-latch's run to start", func(a *latch.Analysis) bool { return a.Run != "" })
		if _, err := w.dyn.Resource(verification.AnalysisRunsResource).Namespace(granted).Get(ctx, r.Analysis.Run, metav1.GetOptions{}); err != nil {
			t.Errorf("the run the record names in %s: %v", granted, err)
		}
		op.waitAvailable(t, granted, true, waitLimit)
		op.waitAvailable(t, refused, false, waitLimit)
		if ev := w.waitStageEvent(t, withoutRights, api.ReasonVerificationUnavailable); !strings.Contains(ev.Message, refused) {
			t.Errorf("VerificationUnavailable Event %q does not name the project %s", ev.Message, refused)
		}
		if n := len(w.stageEvents(t, withRights)[api.ReasonVerificationUnavailable]); n != 0 {
			t.Errorf("%d VerificationUnavailable Events in %s, where the operator has the rights", n, granted)
		}
		if a := stageRecord(t, withoutRights).Analysis; a != nil && a.Run != "" {
			t.Errorf("analysis in %s = %+v, want no run started without the rights", refused, a)
		}
		for _, s := range stages {
			must(t, promoteThenFail(s))
			waitPaused(t, s, true)
		}
	})
}

// namedAnalysis is a spec.verification naming the template web-check.
var namedAnalysis = driver.WithAnalysis(driver.Verification{Templates: []driver.TemplateRef{{Name: "web-check"}}})

// promoteThenFail plays a promotion that fails.
func promoteThenFail(s *driver.Stage) error {
	if _, err := s.StartPromotion(ctx); err != nil {
		return err
	}
	_, err := s.FinishPromotion(ctx, "Failed")
	return err
}

// deleteRolloutsCRDs deletes Argo Rollouts' three CRDs and waits until the
// API server no longer serves AnalysisRuns.
func deleteRolloutsCRDs(t *testing.T, w *world) {
	t.Helper()
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	for _, name := range []string{"analysisruns.argoproj.io", "analysistemplates.argoproj.io", "clusteranalysistemplates.argoproj.io"} {
		if err := w.dyn.Resource(crds).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	waitFor(t, "the AnalysisRun resource to be gone", func() bool {
		_, err := w.dyn.Resource(verification.AnalysisRunsResource).List(ctx, metav1.ListOptions{})
		return apierrors.IsNotFound(err)
	})
}

// identityWithVerifyRightsIn is a ServiceAccount bound cluster-wide to the
// shipped operator ClusterRole, and to the verify-on-latch component's
// ClusterRole in namespace ns only, as docs/verify-on-latch.md shows for
// granting it per project.
func identityWithVerifyRightsIn(t *testing.T, w *world, name, ns string) *rest.Config {
	t.Helper()
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: "kargo-latch"}}
	_, err := w.kube.CoreV1().ServiceAccounts("kargo-latch").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	must(t, err)
	_, err = w.kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kargo-latch"},
		Subjects:   subject,
	}, metav1.CreateOptions{})
	must(t, err)
	_, err = w.kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kargo-latch-verify-on-latch"},
		Subjects:   subject,
	}, metav1.CreateOptions{})
	must(t, err)
	identity, err := w.cluster.ServiceAccountConfig(ctx, "kargo-latch", name)
	must(t, err)
	return identity
}

// startVerifierProcess starts the operator binary as identity across all
// namespaces, with --enable-verify-on-latch, a one-second grace for Kargo
// and a short cache-sync timeout.
func startVerifierProcess(t *testing.T, identity *rest.Config) *probedProcess {
	t.Helper()
	probe, metrics := freePort(t), freePort(t)
	p := &probedProcess{
		process: newProcessAs(t, identity,
			"--health-probe-bind-address", "127.0.0.1:"+strconv.Itoa(probe),
			"--metrics-bind-address", "127.0.0.1:"+strconv.Itoa(metrics),
			"--cache-sync-timeout", shortSyncTimeout.String(),
			"--enable-verify-on-latch", "--verify-grace", "1s"),
		probeURL: fmt.Sprintf("http://127.0.0.1:%d", probe), metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", metrics),
	}
	buildOperator(t)
	p.started = time.Now()
	p.start()
	return p
}

// waitAvailable waits until the operator's gauge says verify-on-latch is
// (or is not) available in project ns.
func (p *probedProcess) waitAvailable(t *testing.T, ns string, want bool, limit time.Duration) {
	t.Helper()
	value := map[bool]float64{true: 1, false: 0}[want]
	waitLong(t, fmt.Sprintf("%s{project=%q} to be %v", availableMetric, ns, value), limit, func() bool {
		got, ok := series(scrape(t, p.metricsURL), availableMetric, map[string]string{"project": ns})[""]
		return ok && got == value
	})
}

// waitStageEvent waits for an Event of the reason about the Stage, on w.
func (w *world) waitStageEvent(t *testing.T, s *driver.Stage, reason string) corev1.Event {
	t.Helper()
	var ev corev1.Event
	waitFor(t, "a "+reason+" Event on "+s.Namespace+"/"+s.Name, func() bool {
		evs := w.stageEvents(t, s)[reason]
		if len(evs) > 0 {
			ev = evs[0]
		}
		return len(evs) > 0
	})
	return ev
}
