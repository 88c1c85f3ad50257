package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// A snapshot of a Stage whose promotion failed a moment ago, before it had a
// record (made and failed while no replica led), with pause-on-failure and
// drain-on-pause on. Built by hand: judging needs no client.
func failedSnapshot(dryRun bool) *snapshot {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	stage := &kargo.Stage{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "prod", UID: "stage-uid", ResourceVersion: "7", CreationTimestamp: metav1.NewTime(t0)},
		Status:     &kargo.StageStatus{LastPromotion: &kargo.PromotionReference{Name: "p1", Phase: "Failed", FinishedAt: &t0}, Health: "Unknown"},
	}
	created := t0
	s := &snapshot{
		key: cache.NewObjectName("shop", "prod"), stage: stage, memo: &memo{}, now: t0.Add(time.Minute), dryRun: dryRun,
		settings: latch.Settings{LatchDeadline: 30 * time.Minute, PauseOnFailure: true, DrainOnPause: true, NewFailureWindow: 15 * time.Minute},
	}
	s.obs, _ = observe(stage, "")
	s.obs.CreatedWithoutRecord = &created
	return s.withPauses(nil, nil, nil)
}

func failurePause(name string) *v1alpha1.StagePause {
	return &v1alpha1.StagePause{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: "pause-uid", Finalizers: []string{v1alpha1.ResumeFinalizer}},
		Spec:       v1alpha1.StagePauseSpec{Stage: "prod", Reason: string(latch.ReasonPromotionFailed)},
	}
}

// The plan of a failure, judged twice as the executor does: first the pause
// to make, with nothing else that names it; then, with the pause made, the
// store that labels the Stage, and beside it the StagePaused Event and the
// live drain.
func TestJudgeAFailurePausesFirst(t *testing.T) {
	s := failedSnapshot(false)
	first := judge(s)
	if len(first.createPauses) != 1 || first.createPauses[0].Kind != latch.ActionCreatePause {
		t.Fatalf("first plan makes pauses %+v, want the failure's one", first.createPauses)
	}
	name := first.createPauses[0].Pause
	if first.announce != nil || first.drain != nil || len(first.release) != 0 {
		t.Errorf("first plan announces %+v, drains %+v, releases %v before the pause exists; want none", first.announce, first.drain, first.release)
	}

	pause := failurePause(name)
	second := judge(s.withPauses([]*v1alpha1.StagePause{pause}, nil, nil))
	if !second.result.Has(latch.ActionPaused) {
		t.Fatalf("with its pause made, actions %+v; want Paused", second.result.Actions)
	}
	if second.write == nil {
		t.Fatal("with its pause made, nothing to store")
	}
	if diff := cmp.Diff(map[string]any{api.PausedLabel: "true"}, second.write.labels); diff != "" {
		t.Errorf("labels stored (-want +got):\n%s", diff)
	}
	if got := second.write.annotations[api.StateAnnotation]; got != second.result.Record.Encode() {
		t.Errorf("record stored %v, want the step's", got)
	}
	if second.write.restoresLabel {
		t.Error("the label of a Stage becoming paused is not a restored one")
	}
	if second.announce == nil || second.announce.pause != pause {
		t.Errorf("announcement %+v, want StagePaused for %s", second.announce, name)
	}
	if second.drain == nil || second.drain.Live != pause {
		t.Errorf("drain %+v, want a live drain for %s", second.drain, name)
	}
}

// In --dry-run the pause is reported, never made, and no Event is owed.
func TestJudgeADryRunMakesNoPause(t *testing.T) {
	p := judge(failedSnapshot(true))
	if len(p.createPauses) != 0 || len(p.dryRunPauses) != 1 || p.announce != nil {
		t.Errorf("dry run: creates %+v, reports %+v, announces %+v; want only one reported", p.createPauses, p.dryRunPauses, p.announce)
	}
}

// A person deleted the failure's pause: the plan stores the resume (label
// removed, Kargo asked to refresh) and then releases the held pause.
func TestJudgeAResumeReleasesAfterTheStore(t *testing.T) {
	s := failedSnapshot(false)
	name := judge(s).createPauses[0].Pause
	pause := failurePause(name)
	paused := judge(s.withPauses([]*v1alpha1.StagePause{pause}, nil, nil))

	s.prior, s.value = paused.result.Record, paused.result.Record.Encode()
	s.stage.Labels = map[string]string{api.PausedLabel: "true"}
	s.obs.CreatedWithoutRecord = nil
	s.memo.announced = name + "\x00" + string(pause.UID)
	deleted := pause.DeepCopy()
	deleted.DeletionTimestamp = &metav1.Time{Time: s.now}
	p := judge(s.withPauses(nil, []*v1alpha1.StagePause{deleted}, nil))
	if !p.result.Has(latch.ActionResumed) {
		t.Fatalf("actions %+v, want Resumed", p.result.Actions)
	}
	if p.write == nil {
		t.Fatal("the resume stores nothing")
	}
	if diff := cmp.Diff(map[string]any{api.PausedLabel: nil}, p.write.labels); diff != "" {
		t.Errorf("labels stored (-want +got):\n%s", diff)
	}
	if got := p.write.annotations[kargo.RefreshAnnotation]; got != s.now.Format(time.RFC3339Nano) {
		t.Errorf("refresh request %v, want %s", got, s.now.Format(time.RFC3339Nano))
	}
	if len(p.release) != 1 || p.release[0] != deleted {
		t.Errorf("releases %v, want the held pause", p.release)
	}
	if len(p.createPauses) != 0 || p.drain != nil {
		t.Errorf("a resume makes pauses %+v and drains %+v; want neither", p.createPauses, p.drain)
	}
}

// A record written by a newer kargo-latch is left alone: no step, no
// write; only the pauses held for it are let go.
func TestJudgeLeftAloneOnlyReleases(t *testing.T) {
	held := failurePause("prod-x")
	// A live drain owed stays owed: the Stage may be judged again once
	// the newer record is gone.
	p := judge(&snapshot{leftAlone: true, held: []*v1alpha1.StagePause{held}, memo: &memo{liveDrainOwed: "pause-uid"}})
	if diff := cmp.Diff(plan{release: []*v1alpha1.StagePause{held}}, p, cmp.AllowUnexported(plan{})); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
}
