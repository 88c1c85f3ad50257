package report

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// TestOnceAboutMakesTheEventOnce: the first report makes the Event, on the
// Stage and naming the related object, and says so; a second one under the
// same name (a restart, the other replica) finds it and says it did not
// make it, so that what goes with the Event (a count) goes once.
func TestOnceAboutMakesTheEventOnce(t *testing.T) {
	kube := kubefake.NewClientset()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	r := New(kube, nil, clocktesting.NewFakeClock(at))
	stage := &kargo.Stage{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "prod", UID: "stage-uid"}}
	related := &corev1.ObjectReference{Kind: "Promotion", Namespace: "shop", Name: "p1", UID: "p1-uid"}
	for i, want := range []bool{true, false} {
		created, err := r.OnceAbout(context.Background(), stage, related, "prod.gatebypassed.1", corev1.EventTypeWarning, api.ReasonGateBypassed, "passed")
		if err != nil || created != want {
			t.Fatalf("report %d: created %v, %v; want %v", i, created, err, want)
		}
	}
	got, err := kube.CoreV1().Events("shop").Get(context.Background(), "prod.gatebypassed.1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "prod.gatebypassed.1", Namespace: "shop"},
		InvolvedObject: *StageRef(stage), Related: related,
		Reason: api.ReasonGateBypassed, Message: "passed", Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: api.FieldManager},
		FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at), Count: 1,
	}
	got.ManagedFields, got.TypeMeta = nil, metav1.TypeMeta{} // the fake client's own
	if diff := cmp.Diff(want, *got); diff != "" {
		t.Errorf("Event (-want +got):\n%s", diff)
	}
}
