package pausing

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
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
	// NameTaken counts the objects found at a failure pause's derived
	// name that were not that pause.
	NameTaken *prometheus.CounterVec
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
// before, and someone resumed it since. madeAs maps each derived name that
// another object held to the name the failure's pause has instead (see
// make), for the record to name the pause that exists.
func (f *Failures) Create(ctx context.Context, stage *kargo.Stage, creates []latch.Action, pauses, held []*v1alpha1.StagePause) (covering, deleted []*v1alpha1.StagePause, madeAs map[string]string, err error) {
	covering, deleted = slices.Clone(pauses), slices.Clone(held)
	for _, a := range creates {
		p := madeFor(covering, stage, a.Pause)
		if p == nil {
			p = madeFor(deleted, stage, a.Pause)
		}
		if p == nil {
			if p, err = f.make(ctx, stage, a); err != nil {
				return nil, nil, nil, err
			}
			switch {
			case p.HeldForResume():
				deleted = append(deleted, p)
			case p.DeletionTimestamp == nil:
				covering = append(covering, p)
			}
		}
		if p.Name != a.Pause {
			if madeAs == nil {
				madeAs = map[string]string{}
			}
			madeAs[a.Pause] = p.Name
		}
	}
	SortPauses(covering)
	SortPauses(deleted)
	return covering, deleted, madeAs, nil
}

// madeFor finds, among pauses, the failure pause of stage whose name was
// derived as derived: found under that name or, when another object held
// it, under the name its annotation ties to it.
func madeFor(pauses []*v1alpha1.StagePause, stage *kargo.Stage, derived string) *v1alpha1.StagePause {
	for _, p := range pauses {
		if (p.Name == derived || p.Annotations[v1alpha1.DerivedNameAnnotation] == derived) && IsFailurePauseOf(p, stage) {
			return p
		}
	}
	return nil
}

// IsFailurePauseOf reports whether p is a pause this operator made for a
// failure of stage: it covers that Stage by name, is owned by that Stage's
// UID, and carries the resume finalizer. Anything else at a failure's
// derived name (a person's object: the name is derived from what any
// project member can read) must never stand in for the failure's pause: a
// pause of another Stage adopted as this one's would leave the failure
// unpaused.
func IsFailurePauseOf(p *v1alpha1.StagePause, stage *kargo.Stage) bool {
	if p.Spec.Stage != stage.Name || !slices.Contains(p.Finalizers, v1alpha1.ResumeFinalizer) {
		return false
	}
	return slices.ContainsFunc(p.OwnerReferences, func(ref metav1.OwnerReference) bool {
		return ref.Kind == "Stage" && ref.Name == stage.Name && ref.UID == stage.UID
	})
}

// alternateNames is how many names after the derived one a failure's pause
// tries, each as deterministic as the first, before the API server picks
// one (generateName): a failure judged again after a crash finds its pause
// at one of them, or, in the cache, by its annotation.
const alternateNames = 3

// make creates the StagePause a failure asked for. Its name is derived
// from the failure, so creating it again finds it there. An object there
// that is not this failure's pause (IsFailurePauseOf) is reported, and the
// pause is made under the next name: the derived name with "-2", "-3", …,
// and at last a name the API server generates, so that no object anyone
// can make keeps a failure from pausing.
func (f *Failures) make(ctx context.Context, stage *kargo.Stage, a latch.Action) (*v1alpha1.StagePause, error) {
	obj, err := failurePause(stage, a)
	if err != nil {
		return nil, err
	}
	client := f.Dynamic.Resource(v1alpha1.StagePausesResource).Namespace(stage.Namespace)
	for attempt := 1; ; attempt++ {
		u := &unstructured.Unstructured{Object: obj}
		if attempt > alternateNames+1 {
			// A generated name cannot be found again by name: a pause
			// made so before a crash, or before a store that failed, is
			// found by its annotation, read live (the cache may not show
			// it yet), so that a failure never gets a second pause.
			live, err := ListLive(ctx, f.Dynamic, stage.Namespace)
			if err != nil {
				return nil, err
			}
			if p := madeFor(live, stage, a.Pause); p != nil {
				return p, nil
			}
			u.SetName("")
			u.SetGenerateName(withSuffix(a.Pause, "-"))
		} else {
			u.SetName(alternateName(a.Pause, attempt))
		}
		made, err := client.Create(ctx, u, metav1.CreateOptions{FieldManager: api.FieldManager})
		if err == nil {
			klog.FromContext(ctx).Info("Paused the Stage after a failure", "pause", made.GetName(), "reason", a.Reason)
			return fromUnstructured(made)
		}
		if !apierrors.IsAlreadyExists(err) || u.GetName() == "" {
			return nil, fmt.Errorf("creating StagePause %s: %w", a.Pause, err)
		}
		found, err := client.Get(ctx, u.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			attempt-- // gone since: try that name again
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading StagePause %s: %w", u.GetName(), err)
		}
		p, err := fromUnstructured(found)
		if err != nil {
			return nil, err
		}
		if IsFailurePauseOf(p, stage) {
			return p, nil
		}
		f.reportTaken(ctx, stage, p, a.Pause)
	}
}

// failurePause is the StagePause a failure asks for, as an object to create.
func failurePause(stage *kargo.Stage, a latch.Action) (map[string]any, error) {
	msg := a.Message
	if len(msg) > maxPauseMessage {
		msg = msg[:maxPauseMessage]
	}
	p := &v1alpha1.StagePause{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "StagePause"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        a.Pause,
			Namespace:   stage.Namespace,
			Labels:      map[string]string{v1alpha1.StageLabel: v1alpha1.StageLabelValue(stage.Name), v1alpha1.ReasonLabel: string(a.Reason)},
			Annotations: map[string]string{v1alpha1.DerivedNameAnnotation: a.Pause},
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
	return obj, nil
}

// reportTaken says, once per object, that an object held a name derived
// for a failure's pause.
func (f *Failures) reportTaken(ctx context.Context, stage *kargo.Stage, p *v1alpha1.StagePause, derived string) {
	msg := fmt.Sprintf("StagePause %s holds the name derived for this Stage's failure pause, but is not that pause (it covers %q; a failure's pause covers this Stage, is owned by it and carries the %s finalizer): the failure's pause is made under another name. Who made %s?",
		p.Name, p.Spec.Stage, v1alpha1.ResumeFinalizer, p.Name)
	klog.FromContext(ctx).Info("A failure pause's derived name is taken; making the pause under another name", "taken", p.Name, "derived", derived, "covers", p.Spec.Stage)
	created, err := f.Report.OnceAbout(ctx, stage, nil, report.OnceName(stage, "pausenametaken", string(p.UID)), corev1.EventTypeWarning, api.ReasonPauseNameTaken, msg)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Recording PauseNameTaken failed", "taken", p.Name)
	}
	if (created || err != nil) && f.NameTaken != nil {
		f.NameTaken.WithLabelValues(stage.Namespace, stage.Name).Inc()
	}
}

// alternateName is a failure pause's name at its attempt (from 1): the
// derived name, then the derived name with "-<attempt>", within the 253
// characters a name may have.
func alternateName(derived string, attempt int) string {
	if attempt == 1 {
		return derived
	}
	return withSuffix(derived, fmt.Sprintf("-%d", attempt))
}

// withSuffix appends suffix to name, cutting name so that both fit a
// StagePause's name, and leave room for what generateName adds.
func withSuffix(name, suffix string) string {
	const maxName = 253 - 5
	if len(name)+len(suffix) > maxName {
		name = strings.TrimRight(name[:maxName-len(suffix)], ".-")
	}
	return name + suffix
}

func fromUnstructured(u *unstructured.Unstructured) (*v1alpha1.StagePause, error) {
	p := &v1alpha1.StagePause{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
		return nil, err
	}
	return p, nil
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
