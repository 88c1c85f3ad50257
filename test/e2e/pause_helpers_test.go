package e2e

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/test/cluster"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// autoPromote creates a Promotion as Kargo's controller auto-promotes: as
// its ServiceAccount, with no create-actor.
func autoPromote(ns, stage string) error {
	_, err := driver.CreatePromotion(context.Background(), env.kargoCtl, ns, stage, "")
	return err
}

// waitGate polls until auto-promotion to stage is denied (want true) or
// allowed (want false).
func waitGate(t *testing.T, ns, stage string, denied bool) {
	t.Helper()
	waitFor(t, "the gate to "+map[bool]string{true: "deny", false: "allow"}[denied]+" auto-promotion to "+stage, func() bool {
		err := autoPromote(ns, stage)
		return apierrors.IsForbidden(err) == denied && (denied || err == nil)
	})
}

func pause(ns, name, stage, reason string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "StagePause",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"stage": stage, "reason": reason, "message": "e2e"},
	}}
}

func createPause(client dynamic.Interface, p *unstructured.Unstructured) error {
	_, err := client.Resource(v1alpha1.StagePausesResource).Namespace(p.GetNamespace()).Create(context.Background(), p, metav1.CreateOptions{})
	return err
}

func deletePause(client dynamic.Interface, ns, name string) error {
	return client.Resource(v1alpha1.StagePausesResource).Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
}

func (w *world) listPauses(t *testing.T, ns string) []unstructured.Unstructured {
	t.Helper()
	l, err := w.dyn.Resource(v1alpha1.StagePausesResource).Namespace(ns).List(context.Background(), metav1.ListOptions{})
	must(t, err)
	return l.Items
}

func paused(t *testing.T, s *driver.Stage) bool {
	t.Helper()
	p, err := isPaused(s)
	must(t, err)
	return p
}

// isPaused is paused returning its error, for code outside the test's
// goroutine.
func isPaused(s *driver.Stage) (bool, error) {
	u, err := s.Get(context.Background())
	if err != nil {
		return false, err
	}
	return u.GetLabels()[api.PausedLabel] == "true", nil
}

func waitPaused(t *testing.T, s *driver.Stage, want bool) {
	t.Helper()
	must(t, pollPaused(s, want))
}

// pollPaused is waitPaused returning its error.
func pollPaused(s *driver.Stage, want bool) error {
	return poll("Stage "+s.Name+" paused label to be "+map[bool]string{true: "set", false: "gone"}[want], func() (bool, error) {
		p, err := isPaused(s)
		return p == want, err
	})
}

func readObjects(files ...string) ([]*unstructured.Unstructured, error) {
	return cluster.ReadObjects(files...)
}

func applyObjects(objs []*unstructured.Unstructured) error {
	return cluster.Apply(context.Background(), env.cluster.Config, objs...)
}
