package controller

import (
	"context"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// The drain runs beside the store of the record that pauses the Stage, not
// before it: a drain that cannot read the Stage's Promotions (here, never)
// does not hold back the paused label, which is what a failure's reaction
// time is measured to. (The retry drains from the cache: see drainFor.)
func TestFailingDrainDoesNotHoldBackThePausedLabel(t *testing.T) {
	var reads atomic.Int64
	f := newFixtureWith(t, false, func(f *fixture) {
		f.client.PrependReactor("list", "promotions", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.(k8stesting.ListAction).GetListRestrictions().Labels.Empty() {
				return false, nil, nil // the informer's own list
			}
			reads.Add(1)
			return true, nil, apierrors.NewServiceUnavailable("promotions are down")
		})
	}, drainingStage())
	waitUntil(t, func() bool { return reads.Load() > 0 && len(f.record("prod").Pauses) == 1 })
	u, err := f.client.Resource(kargo.StagesResource).Namespace("shop").Get(context.Background(), "prod", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := u.GetLabels()[PausedLabel]; got != "true" {
		t.Errorf("paused label %q while the drain cannot read, want true", got)
	}
}

// drainingStage is failedStage with the drain on.
func drainingStage() *unstructured.Unstructured {
	s := failedStage()
	a := s.GetAnnotations()
	a[DrainOnPauseAnnotation] = "true"
	s.SetAnnotations(a)
	return s
}
