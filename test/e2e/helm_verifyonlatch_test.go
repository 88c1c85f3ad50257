package e2e

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestChartVerifyOnLatch: verifyOnLatch.installRights runs every operator
// (each shard's too) with --enable-verify-on-latch, and the settings of
// verify-on-latch reach the flags; verify-on-latch for every Stage without
// the rights is refused, as the operator would warn on every Stage.
func TestChartVerifyOnLatch(t *testing.T) {
	t.Parallel()
	objs := renderChart(t, "kargo-latch", "kargo-latch", setFlags([]string{
		"verifyOnLatch.installRights=true", "controller.shards={eu}",
		"controller.stageDefaults.verifyOnLatch=true", "controller.verifyGrace=30s",
		"controller.verifyPickupTimeout=5m", "controller.rolloutsControllerInstanceID=kargo",
	})...)
	deployments := 0
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		deployments++
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		for _, want := range []string{"--enable-verify-on-latch", "--verify-on-latch=true", "--verify-grace=30s",
			"--verify-pickup-timeout=5m", "--rollouts-controller-instance-id=kargo"} {
			if !slices.Contains(args, want) {
				t.Errorf("Deployment %s runs %v, without %s", o.GetName(), args, want)
			}
		}
	}
	if deployments != 2 {
		t.Errorf("rendered %d Deployments, want the main one and eu's", deployments)
	}
	// `helm upgrade --reuse-values` from a chart without these values
	// renders with none of them (Helm keeps the old chart's defaults): the
	// operator's own defaults must apply, not a flag reading <nil>.
	for _, o := range renderChart(t, "kargo-latch", "kargo-latch", setFlags([]string{
		"verifyOnLatch=null", "controller.stageDefaults.verifyOnLatch=null", "controller.verifyGrace=null",
		"controller.verifyPickupTimeout=null", "controller.rolloutsControllerInstanceID=null",
	})...) {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		for _, a := range args {
			if strings.Contains(a, "verify") || strings.Contains(a, "rollouts") {
				t.Errorf("without the verify-on-latch values, Deployment %s runs %s", o.GetName(), a)
			}
		}
	}
	out, err := helmCommand(t.TempDir(), "template", "kargo-latch", filepath.Join(env.cluster.Root, chartPath),
		"--namespace", "kargo-latch", "--set", "controller.stageDefaults.verifyOnLatch=true").CombinedOutput()
	if want := "controller.stageDefaults.verifyOnLatch needs verifyOnLatch.installRights"; err == nil || !strings.Contains(string(out), want) {
		t.Errorf("helm template with verify-on-latch on for every Stage and no rights: %v %s; want the error %q", err, out, want)
	}
}
