package verification

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// End takes the steps that end kargo-latch's runs no live cycle needs
// (ActionCutShortRun, ActionTerminateRun), each once: a step is not taken
// again while the cache has yet to show its patch. The sync judges them on
// the Stage as the API server has it, once the record saying why is stored
// (latch/cutshort.go says in which order). Before each step the Stage is
// read live: a run that any verification in Kargo's status names (the
// current one, or one of an earlier Freight collection) is Kargo's, and is
// never patched; the sync that sees Kargo follow it asks Kargo to abort it
// when its cycle failed.
func (v *Verifier) End(ctx context.Context, stage *kargo.Stage, m *Memo, steps []latch.Action) error {
	for _, a := range steps {
		step := string(a.Kind) + "/" + a.Run
		if slices.Contains(m.ended, step) {
			continue
		}
		if v.DryRun {
			klog.FromContext(ctx).Info("Dry run: would end AnalysisRun", "analysisRun", a.Run, "step", a.Kind, "why", a.Message)
			continue
		}
		kargos, err := v.Starter.KargoFollows(ctx, stage.Namespace, stage.Name, a.Run)
		if err != nil {
			return err
		}
		if kargos {
			klog.FromContext(ctx).V(2).Info("Kargo's status names the AnalysisRun: it is Kargo's, left alone", "analysisRun", a.Run, "step", a.Kind)
			continue
		}
		reason, msg, err := v.end(ctx, stage.Namespace, a)
		if apierrors.IsForbidden(err) {
			// No rights on runs here (verify-on-latch is unavailable, and
			// reported so): nothing to retry until they are granted.
			klog.FromContext(ctx).V(2).Info("Not allowed to end the AnalysisRun", "analysisRun", a.Run, "step", a.Kind, "err", err)
			continue
		}
		if err != nil {
			return err
		}
		m.ended = append(m.ended, step)
		v.Report.Event(stage, corev1.EventTypeNormal, reason, msg)
	}
	if len(m.ended) > maxEnded {
		m.ended = m.ended[len(m.ended)-maxEnded:]
	}
	return nil
}

// end takes one step, and says how it is reported.
func (v *Verifier) end(ctx context.Context, namespace string, a latch.Action) (reason, msg string, err error) {
	if a.Kind == latch.ActionCutShortRun {
		if err := v.Starter.CutShort(ctx, namespace, a.Run, a.Message, v.Clock.Now()); err != nil {
			return "", "", fmt.Errorf("taking AnalysisRun %s out of Kargo's lookup: %w", a.Run, err)
		}
		return api.ReasonVerificationCutShort, "AnalysisRun " + a.Run + " taken out of Kargo's lookup, so that Kargo never adopts it: " + a.Message, nil
	}
	if err := v.Starter.Terminate(ctx, namespace, a.Run); err != nil {
		return "", "", fmt.Errorf("terminating AnalysisRun %s: %w", a.Run, err)
	}
	return api.ReasonVerificationTerminated, a.Message, nil
}
