package pausing

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/report"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

func coveringPause(name string, uid types.UID) *v1alpha1.StagePause {
	return &v1alpha1.StagePause{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: uid},
		Spec:       v1alpha1.StagePauseSpec{Stage: "prod"},
	}
}

func promotion(name string, annotations map[string]string) *kargo.Promotion {
	p := &kargo.Promotion{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Annotations: annotations}, Stage: "prod"}
	return p
}

// DrainOwed judges which drain a sync owes: a live one for a Stage
// becoming paused or whose live drain failed, one of what the cache shows
// for a Stage paused already, none when drain-on-pause is off or nothing is
// owed.
func TestDrainOwed(t *testing.T) {
	hold, other := coveringPause("hold", "uid-hold"), coveringPause("other", "uid-other")
	paused := latch.Result{Record: latch.Record{Pauses: []string{"hold"}}}
	becoming := paused
	becoming.Actions = []latch.Action{{Kind: latch.ActionPaused, Pause: "hold"}}
	queued := promotion("queued", nil) // no create-actor: Kargo made it
	abortedForOther := promotion("aborted", map[string]string{kargo.AbortAnnotation: "terminate", api.DrainedByAnnotation: "uid-other"})
	on := latch.Settings{DrainOnPause: true}
	for name, tc := range map[string]struct {
		settings latch.Settings
		pauses   []*v1alpha1.StagePause
		res      latch.Result
		owed     types.UID
		cached   []*kargo.Promotion
		want     *DrainPlan
	}{
		"off":                       {latch.Settings{}, []*v1alpha1.StagePause{hold}, becoming, "", nil, nil},
		"not paused":                {on, nil, latch.Result{}, "", []*kargo.Promotion{queued}, nil},
		"becoming paused":           {on, []*v1alpha1.StagePause{hold}, becoming, "", nil, &DrainPlan{Live: hold}},
		"a live drain still owed":   {on, []*v1alpha1.StagePause{hold}, paused, "uid-hold", nil, &DrainPlan{Live: hold}},
		"owed to a pause gone":      {on, []*v1alpha1.StagePause{hold}, paused, "uid-gone", nil, nil},
		"paused, nothing cached":    {on, []*v1alpha1.StagePause{hold}, paused, "", nil, nil},
		"paused, a late one cached": {on, []*v1alpha1.StagePause{hold}, paused, "", []*kargo.Promotion{queued}, &DrainPlan{Late: map[types.UID][]*kargo.Promotion{"uid-hold": {queued}}, Pauses: []*v1alpha1.StagePause{hold}}},
		"an abort not yet listed": {on, []*v1alpha1.StagePause{hold, other}, paused, "", []*kargo.Promotion{abortedForOther},
			&DrainPlan{Late: map[types.UID][]*kargo.Promotion{"uid-other": {abortedForOther}}, Pauses: []*v1alpha1.StagePause{hold, other}}},
	} {
		t.Run(name, func(t *testing.T) {
			got, gone := DrainOwed(tc.settings, tc.pauses, tc.res, tc.owed, tc.cached)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("DrainOwed (-want +got):\n%s", diff)
			}
			if wantGone := name == "owed to a pause gone"; gone != wantGone {
				t.Errorf("the owed pause is gone: %v, want %v", gone, wantGone)
			}
		})
	}
}

// A failure's pause is made once: a second try finds it there (its name
// derives from the failure), and one found deleted and held for resume is
// returned as held, not as covering.
func TestFailuresCreateIsIdempotent(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		v1alpha1.StagePausesResource: "StagePauseList",
	})
	f := &Failures{Dynamic: client, Report: report.New(kubefake.NewClientset(), record.NewFakeRecorder(10), clocktesting.NewFakeClock(time.Now()))}
	st := &kargo.Stage{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "prod", UID: "stage-uid"}}
	create := []latch.Action{{Kind: latch.ActionCreatePause, Pause: "prod-promotionfailed-1", Reason: latch.ReasonPromotionFailed, Message: "p1 failed"}}

	covering, held, _, err := f.Create(ctx, st, create, nil, nil)
	if err != nil || len(covering) != 1 || len(held) != 0 {
		t.Fatalf("first try: covering %v, held %v, %v; want the new pause covering", covering, held, err)
	}
	p := covering[0]
	if p.Spec.Stage != "prod" || p.Spec.Reason != string(latch.ReasonPromotionFailed) || len(p.OwnerReferences) != 1 || p.OwnerReferences[0].UID != "stage-uid" {
		t.Errorf("pause %+v, want one for prod, owned by the Stage, with the failure's reason", p)
	}
	if again, _, _, err := f.Create(ctx, st, create, nil, nil); err != nil || len(again) != 1 || again[0].UID != p.UID {
		t.Errorf("second try: %v, %v; want the same pause found", again, err)
	}

	// A person deleted it meanwhile; the finalizer holds it for resume.
	u, _ := client.Resource(v1alpha1.StagePausesResource).Namespace("shop").Get(context.Background(), p.Name, metav1.GetOptions{})
	u.SetDeletionTimestamp(&metav1.Time{Time: time.Now()})
	if _, err := client.Resource(v1alpha1.StagePausesResource).Namespace("shop").Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	covering, held, _, err = f.Create(ctx, st, create, nil, nil)
	if err != nil || len(covering) != 0 || len(held) != 1 {
		t.Errorf("after the resume: covering %v, held %v, %v; want it held, not covering", covering, held, err)
	}
}
