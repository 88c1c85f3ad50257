package verification

import (
	"context"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/controller/report"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/metrics"
)

// Verifier is verify-on-latch's part of a Stage's sync: it observes the
// Stage's runs, starts the cycle's run, ends the runs no cycle needs, and
// reports all of it (Events, metrics), remembering per Stage what it
// reported and tried (Memo). When to do each is judged by the sync
// (latch/analysis.go, latch/cutshort.go); the sync also re-checks its
// judgement on the Stage as the API server has it before a start or an end.
type Verifier struct {
	// Starter reads and writes the runs on the API server.
	Starter *Starter
	Report  *report.Reporter
	Metrics *metrics.Recorder
	// Clock stamps when a run was cut short.
	Clock clock.Clock
	// DryRun ends no run: it says which it would end.
	DryRun bool
}

// Observe is what a sync sees of a Stage's runs: those the cache holds
// (cached), and the run the record follows (followed) read live when the
// cache lacks it: a run just made may not be cached yet, and only the API
// server can say it was deleted; gone then names it. A cached run showing a
// phase Argo Rollouts does not give is warned about once.
func (v *Verifier) Observe(ctx context.Context, stage *kargo.Stage, m *Memo, followed *latch.Analysis, cached []latch.Run) (runs []latch.Run, gone string, err error) {
	v.reportRunPhases(stage, m, cached)
	// In --dry-run the record names runs never made: none is gone.
	if !v.followsARun(followed) || slices.ContainsFunc(cached, func(r latch.Run) bool { return r.Name == followed.Run }) {
		return cached, "", nil
	}
	run, found, err := v.Starter.Get(ctx, stage.Namespace, followed.Run)
	switch {
	case err != nil:
		return nil, "", err
	case found:
		return append(cached, run), "", nil
	}
	return cached, followed.Run, nil
}

// ObserveWhileOff is what a sync sees of a failed cycle's run while
// verify-on-latch is off in its project (no cache of runs): the run the
// record follows, read live, so that the cycle's failure takes it out of
// Kargo's lookup. Once a read finds it out of the lookup, ended, gone or
// unreadable, it is not read again: a failed cycle's Stage syncs on every
// status write of Kargo's, and would cost a read each time.
func (v *Verifier) ObserveWhileOff(ctx context.Context, stage *kargo.Stage, m *Memo, followed *latch.Analysis) []latch.Run {
	if !v.followsARun(followed) || m.readWhileOff == followed.Run {
		return nil
	}
	run, found, err := v.Starter.Get(ctx, stage.Namespace, followed.Run)
	if err != nil || !found || run.CutShort != "" || run.Terminating || run.Terminal() {
		m.readWhileOff = followed.Run
	}
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Reading the Stage's AnalysisRun while verify-on-latch is unavailable failed", "analysisRun", followed.Run, "err", err)
		return nil
	}
	if !found {
		return nil
	}
	return []latch.Run{run}
}

// followsARun reports whether the record follows a run of kargo-latch's
// still without a result. In --dry-run the record names runs never made.
func (v *Verifier) followsARun(followed *latch.Analysis) bool {
	return !v.DryRun && followed.ByKargoLatch() && !followed.Terminal() && followed.Run != ""
}

// StartOutcome says what became of a start.
type StartOutcome int

const (
	// Created says the run was made, and the record that names it stands.
	Created StartOutcome = iota + 1
	// Found says Kargo's lookup found runs of the collection (Kargo's, or the
	// cycle's own from before a crash); the record must follow them, not
	// name a run never made.
	Found
	// Refused says kargo-latch cannot build the run as Kargo would, or may not
	// make it. It was reported, and is tried again after a backoff
	// (Memo.RetryIn).
	Refused
)

// A RunStart names the run a start is for.
type RunStart struct {
	// Cycle is the stored record's cycle: its refusals back off together.
	Cycle string
	// Collection is the Freight collection the run verifies, and Run the
	// name derived for it (latch.RunName).
	Collection, Run string
	// Now is the sync's time, from which a refusal's backoff counts.
	Now time.Time
}

// Start makes the cycle's run as Kargo would (Starter.Start), unless
// Kargo's lookup finds runs of the collection: those are returned, to be
// followed. A refusal is no error: only what the sync should retry at once
// is one.
func (v *Verifier) Start(ctx context.Context, stage *kargo.Stage, m *Memo, want RunStart) (StartOutcome, []latch.Run, error) {
	found, created, err := v.Starter.Start(ctx, stage.Namespace, stage.Name, want.Collection, want.Run)
	switch {
	case err != nil:
		if err := v.refused(ctx, stage, m, want, err); err != nil {
			return 0, nil, err
		}
		return Refused, nil, nil
	case created:
		klog.FromContext(ctx).Info("Started the Stage's verification", "analysisRun", want.Run)
		v.Metrics.VerificationRunsStarted.WithLabelValues(stage.Namespace, stage.Name).Inc()
		return Created, nil, nil
	}
	return Found, found, nil
}

// refused reports a start that failed. What kargo-latch cannot build
// exactly as Kargo would, and a missing right, are Warnings, once per
// cycle and message, retried with a backoff that is no transition of the
// latch: out of the urgent lane. They never pause. Anything else is
// returned, an error the sync retries.
func (v *Verifier) refused(ctx context.Context, stage *kargo.Stage, m *Memo, want RunStart, err error) error {
	reason := api.ReasonVerificationUnsupported
	switch _, unsupported := IsUnsupported(err); {
	case apierrors.IsForbidden(err):
		reason = api.ReasonVerificationForbidden
	case !unsupported:
		return err
	}
	m.refusedAgain(want.Cycle, want.Now)
	if warnOnce(&m.refused, want.Cycle+"\x00"+err.Error()) {
		v.Report.Warn(stage, reason, "Not starting the Stage's verification: %v", err)
		v.Metrics.VerificationProblems.WithLabelValues(stage.Namespace, stage.Name, reason).Inc()
	}
	klog.FromContext(ctx).V(2).Info("Verification not started", "reason", reason, "err", err)
	return nil
}

// ExplainPickup adds to a run's VerificationNotPickedUp the likely cause,
// read live: the runs' controller-instance-id against Kargo's own runs.
func (v *Verifier) ExplainPickup(ctx context.Context, namespace string, res *latch.Result) {
	for i, a := range res.Actions {
		if a.Kind == latch.ActionVerificationNotPickedUp {
			res.Actions[i].Message = a.Message + "; " + v.Starter.PickupHint(ctx, namespace)
		}
	}
}
