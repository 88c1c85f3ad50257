package e2enode

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/hack/image/ociimage"
	"github.com/kargo-latch/kargo-latch/latch"
)

// TestRollingUpdateKeepsEveryPromise: `helm upgrade` to a new image tag
// rolls the Deployment (new Pods, the old ones stopped one by one) while
// Stages keep failing, one every failCadence whoever leads. Every failed
// Stage is paused exactly once, Pods of the new image paused some, a Stage
// a person resumed before the update stays resumed, and a latched Stage
// stays latched.
func TestRollingUpdateKeepsEveryPromise(t *testing.T) {
	ctx := context.Background()
	project := env.newProject(t)
	latched := env.createStage(t, project, "latched")
	promoteAndLatch(t, latched)
	resumed := env.createStage(t, project, "resumed")
	fail(t, resumed)
	waitPaused(t, resumed, true, waitLimit)
	for _, p := range env.pauses(t, resumed) {
		must(t, env.dyn.Resource(v1alpha1.StagePausesResource).Namespace(project).Delete(ctx, p, metav1.DeleteOptions{}))
	}
	waitPaused(t, resumed, false, waitLimit)

	// The same image under a new tag: what changes is the Deployment's
	// template, so a new ReplicaSet replaces the Pods.
	newTag := env.tag + "-rolled"
	idx, _, err := ociimage.ReadLayout(env.layout)
	must(t, err)
	tag, err := name.NewTag(env.repository + ":" + newTag)
	must(t, err)
	must(t, remote.WriteIndex(tag, idx, remote.WithContext(ctx)))
	before, err := env.pods(ctx)
	must(t, err)

	// Churn: a Stage fails every failCadence, without waiting for its
	// pause, from before the upgrade until the rollout is over, and four
	// more after.
	logs := env.followPauses(t)
	failing := env.startChurn(t, project, "churn")
	failing.waitFailedSince(t, time.Time{})
	started := time.Now()
	if out, err := env.helm(ctx, "upgrade", release, env.cluster.Root+"/charts/kargo-latch", "--namespace", releaseNS,
		"--reuse-values", "--set", "image.tag="+newTag, "--wait=false"); err != nil {
		t.Fatalf("helm upgrade: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		// Later tests find the release as installed.
		if out, err := env.helm(context.Background(), "upgrade", release, env.cluster.Root+"/charts/kargo-latch", "--namespace", releaseNS,
			"--reuse-values", "--set", "image.tag="+env.tag, "--wait=false"); err != nil {
			t.Errorf("helm upgrade back: %v\n%s", err, out)
		}
		if err := env.waitDeployment(context.Background(), 2*time.Minute); err != nil {
			t.Error(err)
		}
	})

	waitFor(t, "the rollout to "+newTag+" during the churn", rolloutLimit, func() (bool, error) {
		return rolledOut(ctx, newTag), nil
	})
	// An old Pod counts as gone once it is terminating, and may lead until
	// the kubelet stops it: the failures counted from here come once a Pod
	// of the new image leads.
	waitFor(t, "a Pod of "+newTag+" to lead", failoverLimit, func() (bool, error) {
		name, err := env.leader(ctx)
		if err != nil || name == "" {
			return false, err
		}
		p, err := env.kube.CoreV1().Pods(releaseNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.DeletionTimestamp == nil && p.Spec.Containers[0].Image == env.repository+":"+newTag, nil
	})
	failing.waitFailedSince(t, time.Now())
	failures := failing.finish(t)
	t.Logf("the rollout was over after %.1fs", time.Since(started).Seconds())
	must(t, env.waitDeployment(ctx, 2*time.Minute))
	now, err := env.pods(ctx)
	must(t, err)
	for _, p := range now {
		for _, old := range before {
			if p.Name == old.Name {
				t.Errorf("Pod %s of before the update still runs", p.Name)
			}
		}
		if img := p.Spec.Containers[0].Image; img != env.repository+":"+newTag {
			t.Errorf("Pod %s runs %s after the update", p.Name, img)
		}
	}
	allPausedOnce(t, project, failures)
	pods := logs.pausedBy(t, failures)
	countByPod(t, failures, pods, started)
	byNew := 0
	for _, pod := range pods {
		if pod != "" && logs.image(pod) == env.repository+":"+newTag {
			byNew++
		}
	}
	if byNew == 0 {
		t.Errorf("no Pod of the new image paused any of the %d Stages that failed through the rollout", len(failures))
	}
	if p, err := isPaused(resumed); err != nil || p || len(env.pauses(t, resumed)) != 0 {
		t.Errorf("the resumed Stage is paused again (%v, %v)", p, err)
	}
	r, err := record(latched)
	must(t, err)
	if r.Phase != latch.PhaseLatched {
		t.Errorf("the latched Stage is %s after the update, want %s", r.Phase, latch.PhaseLatched)
	}
}

// rolloutLimit bounds a rolling update of the two Pods: each new one
// pulls nothing new, starts and is Ready within seconds.
const rolloutLimit = 2 * time.Minute

// rolledOut tells whether every Pod of the release runs tag, and only
// those.
func rolledOut(ctx context.Context, tag string) bool {
	if env.waitDeployment(ctx, 0) != nil {
		return false
	}
	pods, err := env.pods(ctx)
	if err != nil {
		return false
	}
	for _, p := range pods {
		if p.Spec.Containers[0].Image != env.repository+":"+tag {
			return false
		}
	}
	return true
}
