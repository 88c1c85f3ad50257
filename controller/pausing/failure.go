package pausing

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/report"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// A failure's StagePause is made before the record that names it is stored,
// so that the gate does not wait on the Stage's store (which Kargo's webhook,
// a conflict storm or an outage can hold up). Its name derives from the
// failure, so making it again finds it there; its finalizer keeps a resume
// from being undone meanwhile (see Releaser).

// Failures makes the StagePauses that failures ask for, and their
// StagePaused Events.
type Failures struct {
	// Dynamic creates (and, when one exists, reads) StagePauses.
	Dynamic dynamic.Interface
	Report  *report.Reporter
}

// ReportDryRun says, in --dry-run, which StagePauses a step would
// create.
func (f *Failures) ReportDryRun(ctx context.Context, stage *kargo.Stage, creates []latch.Action) {
	for _, a := range creates {
		klog.FromContext(ctx).Info("Dry run: would create a StagePause", "pause", a.Pause, "reason", a.Reason)
		f.Report.Event(stage, corev1.EventTypeWarning, api.ReasonStagePaused, fmt.Sprintf("Dry run: would create StagePause %s (reason %s): %s", a.Pause, a.Reason, report.Truncate(a.Message, 512)))
	}
}

// maxPauseMessage keeps a failure message within the CRD's limit.
const maxPauseMessage = 4096

// Create creates the StagePauses a step asked for, and returns
// pauses with them added, sorted by name as InForce sorts, and held
// with those found deleted and held for resume: their failure was judged
// before, and someone resumed it since.
func (f *Failures) Create(ctx context.Context, stage *kargo.Stage, creates []latch.Action, pauses, held []*v1alpha1.StagePause) (covering, deleted []*v1alpha1.StagePause, err error) {
	covering, deleted = slices.Clone(pauses), slices.Clone(held)
	for _, a := range creates {
		if PauseNamed(covering, a.Pause) != nil || PauseNamed(deleted, a.Pause) != nil {
			continue
		}
		p, err := f.create(ctx, stage, a)
		switch {
		case err != nil:
			return nil, nil, err
		case p.HeldForResume():
			deleted = append(deleted, p)
		case p.DeletionTimestamp == nil:
			covering = append(covering, p)
		}
	}
	SortPauses(covering)
	SortPauses(deleted)
	return covering, deleted, nil
}

// create creates the StagePause a failure asked for. Its name is
// derived from the failure, so creating it again finds it there.
func (f *Failures) create(ctx context.Context, stage *kargo.Stage, a latch.Action) (*v1alpha1.StagePause, error) {
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
	client := f.Dynamic.Resource(v1alpha1.StagePausesResource).Namespace(stage.Namespace)
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

// Announce records StagePaused exactly once per pause: the one mark
// names, p when it still exists.
func (f *Failures) Announce(ctx context.Context, stage *kargo.Stage, mark latch.PauseMark, p *v1alpha1.StagePause) error {
	msg := fmt.Sprintf("Paused by StagePause %s (deleted since)", mark.Name)
	if p != nil {
		msg = fmt.Sprintf("Paused by StagePause %s (reason %s)", p.Name, p.EffectiveReason())
		if p.Spec.Message != "" {
			msg += ": " + report.Truncate(p.Spec.Message, 1024)
		}
	}
	return f.Report.Once(ctx, stage, report.OnceName(stage, "paused", mark.UID+"\x00"+mark.Name), corev1.EventTypeWarning, api.ReasonStagePaused, msg)
}
