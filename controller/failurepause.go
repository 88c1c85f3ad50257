package controller

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/report"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// reportDryRunPauses says, in --dry-run, which StagePauses a step would
// create.
func (c *Controller) reportDryRunPauses(ctx context.Context, stage *kargo.Stage, creates []latch.Action) {
	for _, a := range creates {
		klog.FromContext(ctx).Info("Dry run: would create a StagePause", "pause", a.Pause, "reason", a.Reason)
		c.report.Event(stage, corev1.EventTypeWarning, api.ReasonStagePaused, fmt.Sprintf("Dry run: would create StagePause %s (reason %s): %s", a.Pause, a.Reason, report.Truncate(a.Message, 512)))
	}
}

func pauseNamed(pauses []*v1alpha1.StagePause, name string) *v1alpha1.StagePause {
	for _, p := range pauses {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// maxPauseMessage keeps a failure message within the CRD's limit.
const maxPauseMessage = 4096

// createFailurePauses creates the StagePauses a step asked for, and returns
// pauses with them added, sorted by name as coveringPauses sorts, and held
// with those found deleted and held for resume: their failure was judged
// before, and someone resumed it since.
func (c *Controller) createFailurePauses(ctx context.Context, stage *kargo.Stage, creates []latch.Action, pauses, held []*v1alpha1.StagePause) (covering, deleted []*v1alpha1.StagePause, err error) {
	covering, deleted = slices.Clone(pauses), slices.Clone(held)
	for _, a := range creates {
		if pauseNamed(covering, a.Pause) != nil || pauseNamed(deleted, a.Pause) != nil {
			continue
		}
		p, err := c.createFailurePause(ctx, stage, a)
		switch {
		case err != nil:
			return nil, nil, err
		case p.HeldForResume():
			deleted = append(deleted, p)
		case p.DeletionTimestamp == nil:
			covering = append(covering, p)
		}
	}
	sortPauses(covering)
	sortPauses(deleted)
	return covering, deleted, nil
}

// createFailurePause creates the StagePause a failure asked for. Its name is
// derived from the failure, so creating it again finds it there.
func (c *Controller) createFailurePause(ctx context.Context, stage *kargo.Stage, a latch.Action) (*v1alpha1.StagePause, error) {
	msg := a.Message
	if len(msg) > maxPauseMessage {
		msg = msg[:maxPauseMessage]
	}
	p := &v1alpha1.StagePause{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "StagePause"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      a.Pause,
			Namespace: stage.Namespace,
			Labels:    map[string]string{v1alpha1.StageLabel: v1alpha1.StageLabelValue(stage.Name), v1alpha1.ReasonLabel: string(a.Reason)},
			// Deleting the Stage deletes the pauses its failures made.
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: kargo.GroupVersion.String(), Kind: "Stage", Name: stage.Name, UID: stage.UID,
			}},
			Finalizers: []string{v1alpha1.ResumeFinalizer},
		},
		Spec: v1alpha1.StagePauseSpec{Stage: stage.Name, Reason: string(a.Reason), Message: msg},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		return nil, err
	}
	delete(obj, "status")
	client := c.cfg.Dynamic.Resource(v1alpha1.StagePausesResource).Namespace(stage.Namespace)
	u, err := client.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{FieldManager: api.FieldManager})
	if apierrors.IsAlreadyExists(err) {
		u, err = client.Get(ctx, a.Pause, metav1.GetOptions{})
	} else if err == nil {
		klog.FromContext(ctx).Info("Paused the Stage after a failure", "pause", a.Pause, "reason", a.Reason)
	}
	if err != nil {
		return nil, fmt.Errorf("creating StagePause %s: %w", a.Pause, err)
	}
	created := &v1alpha1.StagePause{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, created); err != nil {
		return nil, err
	}
	return created, nil
}

// pausedEvent records StagePaused exactly once per pause: the one mark
// names, p when it still exists.
func (c *Controller) pausedEvent(ctx context.Context, stage *kargo.Stage, mark latch.PauseMark, p *v1alpha1.StagePause) error {
	msg := fmt.Sprintf("Paused by StagePause %s (deleted since)", mark.Name)
	if p != nil {
		msg = fmt.Sprintf("Paused by StagePause %s (reason %s)", p.Name, p.EffectiveReason())
		if p.Spec.Message != "" {
			msg += ": " + report.Truncate(p.Spec.Message, 1024)
		}
	}
	return c.report.Once(ctx, stage, report.OnceName(stage, "paused", mark.UID+"\x00"+mark.Name), corev1.EventTypeWarning, api.ReasonStagePaused, msg)
}
