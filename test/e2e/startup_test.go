package e2e

import (
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
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

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/test/cluster"
)

// How fast a missing CRD or right must be said, and the short sync timeout
// the tests run the operator with (2m in production).
const (
	diagnosisLimit   = 5 * time.Second
	shortSyncTimeout = 6 * time.Second
)

// TestStartupWithoutStagePauseCRD: on a cluster without the StagePause CRD
// the operator says so at once, stays unready with that reason, and exits
// non-zero at its cache-sync timeout; installing the CRD while it waits
// makes it ready without a restart.
func TestStartupWithoutStagePauseCRD(t *testing.T) {
	t.Parallel()
	w, err := newWorld(ctx, cluster.Options{}, nil)
	must(t, err)
	t.Cleanup(w.cluster.Stop)
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	must(t, w.dyn.Resource(crds).Delete(ctx, "stagepauses.kargo-latch.io", metav1.DeleteOptions{}))
	waitFor(t, "the StagePause resource to be gone", func() bool {
		_, err := w.dyn.Resource(v1alpha1.StagePausesResource).List(ctx, metav1.ListOptions{})
		return apierrors.IsNotFound(err)
	})

	problem := "the StagePause CRD stagepauses.kargo-latch.io is not installed"
	failsToStart(t, w.operator, "", problem, "kubectl apply -k manifests/crds")

	op := startUnready(t, w.operator, "", problem)
	must(t, cluster.InstallCRDs(ctx, w.dyn, filepath.Join(w.cluster.Root, "manifests", "crds")))
	op.waitReady(t)
}

// TestStartupWithoutListWatchOnStages: an identity that may not list and
// watch Stages gets the same treatment, naming the resource, the namespace
// and the rights; granting them while it waits makes it ready.
//
// Both rights are taken: client-go's informers (v0.37) first stream their
// initial list over a watch (WatchListClient) and fall back to a list, so
// without list alone they still sync; without watch alone the list syncs
// the cache and only the watch fails (TestWatchRefusedAfterSyncIsNotReady).
func TestStartupWithoutListWatchOnStages(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	identity, restore := identityWithout(t, "e2e-no-stage-read-"+ns[len(ns)-6:], "list", "watch")

	problem := "kargo-latch's identity may not list and watch stages.kargo.akuity.io in namespace " + ns
	failsToStart(t, identity, ns, problem, "grant its ServiceAccount get, list and watch on stages.kargo.akuity.io")

	op := startUnready(t, identity, ns, problem)
	restore()
	op.waitReady(t)
}

// TestWatchRefusedAfterSyncIsNotReady: with list but not watch on Stages,
// the cache syncs from its list and then never sees a change. That is not
// ready, with the reason on /readyz, until a watch opens again.
func TestWatchRefusedAfterSyncIsNotReady(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	identity, restore := identityWithout(t, "e2e-no-stage-watch-"+ns[len(ns)-6:], "watch")
	op := startProbed(t, identity, ns, 0)
	problem := "kargo-latch's identity may not list and watch stages.kargo.akuity.io in namespace " + ns
	waitFor(t, "/readyz to say the caches synced but cannot list or watch", func() bool {
		code, body, err := httpGet(op.probeURL + "/readyz")
		return err == nil && code == http.StatusServiceUnavailable &&
			strings.Contains(string(body), "synced, but cannot list or watch") && strings.Contains(string(body), problem)
	})
	if got := series(scrape(t, op.metricsURL), "kargo_latch_cache_synced", nil)[""]; got != 1 {
		t.Errorf("kargo_latch_cache_synced = %v, want 1: the list did sync", got)
	}
	restore()
	// The reflector retries a refused watch with a backoff of up to a
	// minute (30s with jitter).
	waitLong(t, "the operator to become ready once it may watch", 90*time.Second, func() bool {
		code, _, err := httpGet(op.probeURL + "/readyz")
		return err == nil && code == http.StatusOK
	})
}

// identityWithout is a ServiceAccount bound to a copy of the shipped
// ClusterRole kargo-latch without the given verbs on stages; restore gives
// the copy the shipped rules back.
func identityWithout(t *testing.T, name string, verbs ...string) (identity *rest.Config, restore func()) {
	t.Helper()
	shipped, err := env.kube.RbacV1().ClusterRoles().Get(ctx, "kargo-latch", metav1.GetOptions{})
	must(t, err)
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}}
	removed := false
	for _, r := range shipped.Rules {
		r = *r.DeepCopy()
		if slices.Contains(r.Resources, "stages") && slices.Contains(r.Verbs, verbs[0]) {
			r.Verbs = slices.DeleteFunc(r.Verbs, func(v string) bool { return slices.Contains(verbs, v) })
			removed = true
		}
		role.Rules = append(role.Rules, r)
	}
	if !removed {
		t.Fatalf("the shipped ClusterRole kargo-latch has no %v on stages to take away", verbs)
	}
	_, err = env.kube.CoreV1().ServiceAccounts("kargo-latch").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	must(t, err)
	_, err = env.kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
	must(t, err)
	_, err = env.kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: "kargo-latch"}},
	}, metav1.CreateOptions{})
	must(t, err)
	t.Cleanup(func() {
		_ = env.kube.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{})
		_ = env.kube.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
		_ = env.kube.CoreV1().ServiceAccounts("kargo-latch").Delete(ctx, name, metav1.DeleteOptions{})
	})
	identity, err = env.cluster.ServiceAccountConfig(ctx, "kargo-latch", name)
	must(t, err)
	return identity, func() {
		role.Rules = shipped.Rules
		_, err := env.kube.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{})
		must(t, err)
	}
}

// failsToStart runs the operator with a short cache-sync timeout and checks
// that it logs an Error naming problem (and fix) within diagnosisLimit, that
// /readyz fails with it, that kargo_latch_cache_synced is 0, and that the
// process exits non-zero once the timeout has passed.
func failsToStart(t *testing.T, identity *rest.Config, ns, problem, fix string) {
	t.Helper()
	op := startProbed(t, identity, ns, shortSyncTimeout)
	line := op.waitLogLine(t, diagnosisLimit, func(l string) bool { return strings.HasPrefix(l, "E") && strings.Contains(l, problem) })
	t.Logf("Error logged %v after start: %s", op.sinceStart(), line)
	if !strings.Contains(line, fix) {
		t.Errorf("the Error does not say how to fix it (%q): %s", fix, line)
	}
	code, body, err := httpGet(op.probeURL + "/readyz")
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(string(body), problem) {
		t.Errorf("/readyz answered %d %q (%v), want 503 naming %q", code, body, err, problem)
	}
	if got := series(scrape(t, op.metricsURL), "kargo_latch_cache_synced", nil)[""]; got != 0 {
		t.Errorf("kargo_latch_cache_synced = %v, want 0", got)
	}
	select {
	case <-op.done:
	case <-time.After(shortSyncTimeout + waitLimit):
		t.Fatalf("the operator still runs %v after start, with a cache-sync timeout of %v", op.sinceStart(), shortSyncTimeout)
	}
	exitedAfter := op.sinceStart()
	t.Logf("exited %v after start with code %d", exitedAfter, op.cmd.ProcessState.ExitCode())
	if op.cmd.ProcessState.Success() {
		t.Error("the operator exited 0; want non-zero so that the Pod crash-loops")
	}
	if exitedAfter < shortSyncTimeout {
		t.Errorf("exited after %v, before its cache-sync timeout %v", exitedAfter, shortSyncTimeout)
	}
	op.waitLogLine(t, time.Second, func(l string) bool {
		return strings.Contains(l, "informer caches did not sync within "+shortSyncTimeout.String()) && strings.Contains(l, problem)
	})
}

// startUnready starts the operator with the default cache-sync timeout and
// waits until it has said problem, and is not ready.
func startUnready(t *testing.T, identity *rest.Config, ns, problem string) *probedProcess {
	t.Helper()
	op := startProbed(t, identity, ns, 0)
	op.waitLogLine(t, diagnosisLimit, func(l string) bool { return strings.HasPrefix(l, "E") && strings.Contains(l, problem) })
	if code, _, err := httpGet(op.probeURL + "/readyz"); err != nil || code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz answered %d (%v) before the fix, want 503", code, err)
	}
	return op
}

// probedProcess is the operator binary with its probe and metrics
// addresses known.
type probedProcess struct {
	*process
	started              time.Time
	probeURL, metricsURL string
}

// startProbed starts the operator binary as identity, on namespace ns (all
// when empty), with a cache-sync timeout (the default when 0).
func startProbed(t *testing.T, identity *rest.Config, ns string, syncTimeout time.Duration) *probedProcess {
	t.Helper()
	probe, metrics := freePort(t), freePort(t)
	args := []string{
		"--health-probe-bind-address", "127.0.0.1:" + strconv.Itoa(probe),
		"--metrics-bind-address", "127.0.0.1:" + strconv.Itoa(metrics),
	}
	if ns != "" {
		args = append(args, "--namespace", ns)
	}
	if syncTimeout > 0 {
		args = append(args, "--cache-sync-timeout", syncTimeout.String())
	}
	p := &probedProcess{process: newProcessAs(t, identity, args...),
		probeURL: fmt.Sprintf("http://127.0.0.1:%d", probe), metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", metrics)}
	buildOperator(t)
	p.started = time.Now()
	p.start()
	return p
}

func (p *probedProcess) sinceStart() time.Duration {
	return time.Since(p.started).Round(10 * time.Millisecond)
}

// waitLogLine waits for a line of the operator's log that matches.
func (p *probedProcess) waitLogLine(t *testing.T, limit time.Duration, match func(string) bool) string {
	t.Helper()
	var found string
	waitLong(t, "a matching line in the operator's log", limit, func() bool {
		for l := range strings.SplitSeq(p.logText(0), "\n") {
			if match(l) {
				found = l
				return true
			}
		}
		return false
	})
	return found
}

// waitReady waits for /readyz to answer 200 and kargo_latch_cache_synced
// to be 1.
func (p *probedProcess) waitReady(t *testing.T) {
	t.Helper()
	fixedAt := time.Now()
	waitFor(t, "the operator to become ready", func() bool {
		code, _, err := httpGet(p.probeURL + "/readyz")
		return err == nil && code == http.StatusOK
	})
	t.Logf("ready %v after the fix, without a restart", time.Since(fixedAt).Round(10*time.Millisecond))
	if got := series(scrape(t, p.metricsURL), "kargo_latch_cache_synced", nil)[""]; got != 1 {
		t.Errorf("kargo_latch_cache_synced = %v once ready, want 1", got)
	}
	if p.exited() {
		t.Error("the operator exited")
	}
}
