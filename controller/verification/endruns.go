package verification

import (
	"context"
	"errors"
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
		if slices.Contains(m.ended, step) || slices.Contains(m.ended, kargosStep(a.Run)) || slices.Contains(m.ended, refusedStep(step)) {
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
			// Kargo's for good: its status keeps naming it. Not read again.
			klog.FromContext(ctx).V(2).Info("Kargo's status names the AnalysisRun: it is Kargo's, left alone", "analysisRun", a.Run, "step", a.Kind)
			m.ended = append(m.ended, kargosStep(a.Run))
			continue
		}
		reason, msg, err := v.end(ctx, stage.Namespace, a)
		switch {
		case errors.Is(err, ErrInLookup):
			// The cache showed the run out of Kargo's lookup, the API
			// server does not: judged again when the cache catches up.
			klog.FromContext(ctx).V(2).Info("AnalysisRun still in Kargo's lookup: not terminated", "analysisRun", a.Run)
			continue
		case apierrors.IsForbidden(err):
			// No rights on runs here, or the guard refused (a bug): said
			// once, and not tried again by this process.
			m.ended = append(m.ended, refusedStep(step))
			v.Report.Warn(stage, api.ReasonVerificationForbidden, "Could not end AnalysisRun %s (%s): %v", a.Run, a.Kind, err)
			v.Metrics.VerificationProblems.WithLabelValues(stage.Namespace, stage.Name, api.ReasonVerificationForbidden).Inc()
			continue
		case err != nil:
			return err
		case reason == "":
			continue // nothing was left to do
		}
		m.ended = append(m.ended, step)
		v.Report.Event(stage, corev1.EventTypeNormal, reason, msg)
	}
	if len(m.ended) > maxEnded {
		m.ended = m.ended[len(m.ended)-maxEnded:]
	}
	return nil
}

// kargosStep and refusedStep are what Memo.ended keeps of a run found to be
// Kargo's, and of a step the API server refused.
func kargosStep(run string) string   { return "Kargo's/" + run }
func refusedStep(step string) string { return "refused/" + step }

// end takes one step, and says how it is reported.
func (v *Verifier) end(ctx context.Context, namespace string, a latch.Action) (reason, msg string, err error) {
	if a.Kind == latch.ActionCutShortRun {
		patched, err := v.Starter.CutShort(ctx, namespace, a.Run, a.Message, v.Clock.Now())
		if err != nil {
			return "", "", fmt.Errorf("taking AnalysisRun %s out of Kargo's lookup: %w", a.Run, err)
		}
		if !patched {
			return "", "", nil
		}
		return api.ReasonVerificationCutShort, "AnalysisRun " + a.Run + " taken out of Kargo's lookup, so that Kargo never adopts it: " + a.Message, nil
	}
	if err := v.Starter.Terminate(ctx, namespace, a.Run); err != nil {
		return "", "", fmt.Errorf("terminating AnalysisRun %s: %w", a.Run, err)
	}
	return api.ReasonVerificationTerminated, a.Message, nil
}
