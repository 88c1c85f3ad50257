package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/cluster"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// TestAPIServerOutage stops kube-apiserver for 30 s in the middle of a
// scenario, on a cluster of its own, and starts it again on the same etcd
// data. The operator (with leader election) must not exit, and must
// converge: a degradation whose grace ran out during the outage pauses, and
// a failure made just before the outage pauses.
func TestAPIServerOutage(t *testing.T) {
	t.Parallel()
	c, err := cluster.Start(ctx, cluster.Options{})
	must(t, err)
	t.Cleanup(c.Stop)
	must(t, installShipped(ctx, c))
	operatorCfg, err := c.ServiceAccountConfig(ctx, "kargo-latch", "kargo-latch")
	must(t, err)
	kube := kubernetes.NewForConfigOrDie(c.Config)
	const ns = "outage"
	_, err = kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	must(t, err)

	probe := freePort(t)
	op := newProcessAs(t, operatorCfg, "--namespace", ns, "--leader-elect", "--leader-election-namespace", "kargo-latch",
		"--pause-on-failure", "--degraded-grace", "5s", "--metrics-bind-address", "0",
		"--health-probe-bind-address", "127.0.0.1:"+strconv.Itoa(probe))
	op.start()
	waitFor(t, "the operator to be ready", func() bool {
		code, _, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/readyz", probe))
		return err == nil && code == http.StatusOK
	})

	k := driver.New(dynamic.NewForConfigOrDie(c.Config))
	stage := func(name string) *driver.Stage {
		s, err := k.CreateStage(ctx, ns, name, nil)
		must(t, err)
		return s
	}
	degrading, failing, steady := stage("degrading"), stage("failing"), stage("steady")
	for _, s := range []*driver.Stage{degrading, failing, steady} {
		promoteAndLatch(t, s)
	}
	must(t, degrading.SetHealth(ctx, kargo.HealthUnhealthy))
	waitPhase(t, degrading, latch.PhaseDegraded)
	_, err = failing.FinishPromotion(ctx, "Failed")
	must(t, err)

	c.StopAPIServer()
	time.Sleep(30 * time.Second)
	if op.exited() {
		t.Fatal("the operator exited during the API server outage")
	}
	restarted := time.Now()
	must(t, c.StartAPIServer(context.Background()))

	longWait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	longWait("the degraded Stage to be paused", func() bool { return paused(t, degrading) })
	longWait("the failed Stage to be paused", func() bool { return paused(t, failing) })
	t.Logf("converged %v after the API server came back from a 30s outage", time.Since(restarted).Round(time.Millisecond))
	if op.exited() {
		t.Fatal("the operator exited after the API server outage")
	}
	if r := stageRecord(t, steady); r.Phase != latch.PhaseLatched {
		t.Errorf("the steady Stage is %s after the outage, want Latched", r.Phase)
	}
}
