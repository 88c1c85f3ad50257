package verification

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// ReportAction reports an action of verify-on-latch that the sync stored
// as Events and metrics: the analysis's own reasons, apart from the latch's.
// Other actions are not verify-on-latch's to report.
func (v *Verifier) ReportAction(stage *kargo.Stage, a latch.Action) {
	ns, name := stage.Namespace, stage.Name
	switch a.Kind {
	case latch.ActionVerificationStarted:
		v.Report.Event(stage, corev1.EventTypeNormal, api.ReasonVerificationStarted, a.Message)
	case latch.ActionVerificationFinished:
		v.Metrics.VerificationResults.WithLabelValues(ns, name, string(a.Phase)).Inc()
		if a.TimeToResult > 0 {
			v.Metrics.LatchToVerification.Observe(a.TimeToResult.Seconds())
		}
		switch a.Phase {
		case latch.VerificationSuccessful:
			v.Report.Event(stage, corev1.EventTypeNormal, api.ReasonVerificationSucceeded, a.Message)
		case latch.VerificationAborted:
			v.Report.Event(stage, corev1.EventTypeNormal, api.ReasonVerificationTerminated, a.Message)
		default:
			v.Report.Event(stage, corev1.EventTypeWarning, api.ReasonVerificationFailed, a.Message)
		}
	case latch.ActionAbortInKargo:
		v.Report.Event(stage, corev1.EventTypeNormal, api.ReasonVerificationAbortRequested, a.Message)
	case latch.ActionVerificationLeftToKargo:
		v.problem(stage, api.ReasonVerificationLeftToKargo, a.Message)
	case latch.ActionVerificationNotPickedUp:
		v.problem(stage, api.ReasonVerificationNotPickedUp, a.Message)
	case latch.ActionVerificationRunDeleted:
		v.problem(stage, api.ReasonVerificationRunDeleted, a.Message)
	}
}

// problem is a Warning counted on kargo_latch_verification_problems_total.
func (v *Verifier) problem(stage *kargo.Stage, reason, msg string) {
	v.Report.Event(stage, corev1.EventTypeWarning, reason, msg)
	v.Metrics.VerificationProblems.WithLabelValues(stage.Namespace, stage.Name, reason).Inc()
}

// ReportUnavailable warns once per problem that verify-on-latch is off for
// a Stage that wants it, for want of a usable cache of its project's runs
// (why); why is empty while it is on, or its cache only not synced yet, so
// that a problem after it is news again.
func (v *Verifier) ReportUnavailable(stage *kargo.Stage, m *Memo, why string) {
	if warnOnce(&m.unavailable, why) {
		v.Report.Warn(stage, api.ReasonVerificationUnavailable,
			"Verify-on-latch is off for the Stage: %s. It turns on by itself within about a minute of the fix; the latch and the pauses work as usual", why)
		v.Metrics.VerificationProblems.WithLabelValues(stage.Namespace, stage.Name, api.ReasonVerificationUnavailable).Inc()
	}
}

// reportRunPhases warns once per run and phase of kargo-latch's that shows
// a phase Argo Rollouts does not give: it is no result, and the run is
// followed on.
func (v *Verifier) reportRunPhases(stage *kargo.Stage, m *Memo, runs []latch.Run) {
	for _, r := range runs {
		if latch.KnownRunPhase(r.Phase) {
			continue
		}
		if warnOnce(&m.badRunPhase, r.Name+"\x00"+string(r.Phase)) {
			v.Report.Warn(stage, api.ReasonVerificationUnsupported, "AnalysisRun %s shows phase %q, which Argo Rollouts does not give: it counts as no result", r.Name, r.Phase)
			v.Metrics.InvalidInput.WithLabelValues(stage.Namespace, stage.Name, "analysisrun").Inc()
		}
	}
}
