package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/controller/verification"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// verifyRetry is how long a refused start of a cycle's run (a template
// missing, an argument kargo-latch cannot evaluate, a right missing) first
// waits before it is tried again: the Stage's fix may be in a template,
// whose changes bring no event. Each further refusal in the cycle doubles
// the wait, up to verifyRetryMax: a start costs about five live reads.
const (
	verifyRetry    = time.Minute
	verifyRetryMax = 30 * time.Minute
)

// verifyBackoff is the wait after the n-th refused start of a cycle.
func verifyBackoff(n int) time.Duration {
	d := verifyRetry
	for i := 1; i < n && d < verifyRetryMax; i++ {
		d *= 2
	}
	return min(d, verifyRetryMax)
}

// observeRuns puts the Stage's runs into a snapshot. A run the record
// follows that the cache lacks is read live: a run just made may not be
// cached yet, and only the API server can say it was deleted.
func (c *Controller) observeRuns(ctx context.Context, s *snapshot) error {
	if s.leftAlone || !c.watchesRunsIn(s.key.Namespace) {
		return nil
	}
	ns, stage := s.key.Namespace, s.key.Name
	s.obs.Runs = c.cachedRuns(ns, stage)
	s.obs.StartRefused = c.verifyRetryIn(s) > 0
	c.reportRunPhases(s)
	a := s.prior.Analysis
	// In --dry-run the record names runs never made: none is gone.
	if c.cfg.DryRun || !a.ByKargoLatch() || a.Terminal() || a.Run == "" || slices.ContainsFunc(s.obs.Runs, func(r latch.Run) bool { return r.Name == a.Run }) {
		return nil
	}
	run, found, err := c.starter.Get(ctx, ns, a.Run)
	switch {
	case err != nil:
		return err
	case found:
		s.obs.Runs = append(s.obs.Runs, run)
	default:
		s.obs.RunGone = a.Run
	}
	return nil
}

// startVerification makes the run a plan asks for; it judges again only
// when the start found other runs, or was refused. Like a failure's pause, it is made from a judgement of the Stage as
// the API server has it; Kargo's own lookup is played with the live reads:
// a run that Kargo (or this operator, before a crash) made for the
// Freight collection is followed, never doubled. A run kargo-latch cannot
// build exactly as Kargo would is refused with a Warning, and the sync goes
// on without it.
func (c *Controller) startVerification(ctx context.Context, s *snapshot, p plan) (*snapshot, plan, error) {
	fresh, err := c.refresh(ctx, s)
	if fresh == nil || err != nil || fresh.leftAlone {
		return nil, p, err
	}
	if fresh != s {
		if s, p = fresh, judge(fresh); p.startRun == nil {
			return s, p, nil
		}
	}
	ns, stage, collection := s.key.Namespace, s.key.Name, p.result.Record.FreightID
	found, created, err := c.starter.Start(ctx, ns, stage, collection, p.startRun.Run)
	if err != nil {
		if err := c.verificationRefused(ctx, s, err); err != nil {
			return nil, p, err
		}
		s.obs.StartRefused = true
		return s, judge(s), nil
	}
	if created {
		klog.FromContext(ctx).Info("Started the Stage's verification", "analysisRun", p.startRun.Run)
		c.cfg.Metrics.VerificationRunsStarted.WithLabelValues(ns, stage).Inc()
		// The plan's record already names the run just made, and nothing
		// else changed: one judgement serves the sync.
		return s, p, nil
	}
	// Kargo's lookup found runs (Kargo's, or this cycle's own from before a
	// crash): the record must follow them, not name a run never made.
	out := *s
	out.obs.Runs = append(slices.Clone(s.obs.Runs), found...)
	return &out, judge(&out), nil
}

// verificationRefused reports a start that failed. What kargo-latch cannot
// build exactly as Kargo would, and a missing right, are Warnings, once per
// cycle and message, retried with a backoff (verifyBackoff) that is no
// transition of the latch: out of the urgent lane. They never pause. Anything
// else is an error the sync retries.
func (c *Controller) verificationRefused(ctx context.Context, s *snapshot, err error) error {
	m := s.memo
	reason := api.ReasonVerificationUnsupported
	switch _, unsupported := verification.IsUnsupported(err); {
	case apierrors.IsForbidden(err):
		reason = api.ReasonVerificationForbidden
	case !unsupported:
		return err
	}
	cycle := s.prior.Cycle()
	if m.verifyRefusedCycle != cycle {
		m.verifyRefusals = 0
	}
	m.verifyRefusals++
	m.verifyRefusedCycle, m.verifyRetryAt = cycle, s.now.Add(verifyBackoff(m.verifyRefusals))
	if warnOnce(&m.verifyRefused, cycle+"\x00"+err.Error()) {
		c.report.Warn(s.stage, reason, "Not starting the Stage's verification: %v", err)
		c.cfg.Metrics.VerificationProblems.WithLabelValues(s.key.Namespace, s.key.Name, reason).Inc()
	}
	klog.FromContext(ctx).V(2).Info("Verification not started", "reason", reason, "err", err)
	return nil
}

// endRuns ends the runs no live cycle needs, each step once: the patch is
// not made again while the cache has yet to show it. A run cut short or
// terminated cannot be started again, so the judgement is made again on
// the Stage as the API server has it: the cache of runs may show a run
// this replica just made while the cached Stage is still behind the record
// that names it, and a run is terminated only while Kargo's status, read
// live, does not follow it (latch/cutshort.go).
func (c *Controller) endRuns(ctx context.Context, s *snapshot, runs []latch.Action) error {
	if len(runs) == 0 {
		return nil
	}
	fresh, err := c.refresh(ctx, s)
	if fresh == nil || err != nil || fresh.leftAlone {
		return err
	}
	if fresh != s {
		runs = judge(fresh).endRuns
	}
	stage, m := s.stage, s.memo
	for _, a := range runs {
		step := string(a.Kind) + "/" + a.Run
		if slices.Contains(m.runsEnded, step) {
			continue
		}
		if c.cfg.DryRun {
			klog.FromContext(ctx).Info("Dry run: would end AnalysisRun", "analysisRun", a.Run, "step", a.Kind, "why", a.Message)
			continue
		}
		if a.Kind == latch.ActionTerminateRun {
			followed, err := c.kargoFollows(ctx, s.key, a.Run)
			if err != nil || followed {
				// Kargo adopted it meanwhile: it is Kargo's, and the sync
				// that sees it in the cache asks Kargo to abort it.
				return err
			}
		}
		reason := api.ReasonVerificationTerminated
		if a.Kind == latch.ActionCutShortRun {
			reason = api.ReasonVerificationCutShort
			if err := c.starter.CutShort(ctx, stage.Namespace, a.Run, a.Message, c.clock.Now()); err != nil {
				return fmt.Errorf("taking AnalysisRun %s out of Kargo's lookup: %w", a.Run, err)
			}
		} else if err := c.starter.Terminate(ctx, stage.Namespace, a.Run); err != nil {
			return fmt.Errorf("terminating AnalysisRun %s: %w", a.Run, err)
		}
		m.runsEnded = append(m.runsEnded, step)
		msg := a.Message
		if a.Kind == latch.ActionCutShortRun {
			msg = "AnalysisRun " + a.Run + " taken out of Kargo's lookup, so that Kargo never adopts it: " + a.Message
		}
		c.report.Event(stage, corev1.EventTypeNormal, reason, msg)
	}
	if len(m.runsEnded) > 16 {
		m.runsEnded = m.runsEnded[len(m.runsEnded)-16:]
	}
	return nil
}

// kargoFollows reads the Stage live and reports whether Kargo's current
// verification follows run: the last check before a run cut short is
// terminated, whatever the cache shows (a terminated run that Kargo
// follows would pass in Kargo).
func (c *Controller) kargoFollows(ctx context.Context, key cache.ObjectName, run string) (bool, error) {
	stage, err := c.liveStage(ctx, key)
	if err != nil || stage == nil || stage.Status == nil {
		// A Stage gone (or left to another shard) verifies nothing.
		return false, err
	}
	v := stage.Status.Verification
	return v != nil && v.Run == run, nil
}

// explainPickup adds to a run's VerificationNotPickedUp the likely cause,
// read live: the runs' controller-instance-id against Kargo's own runs.
func (c *Controller) explainPickup(ctx context.Context, s *snapshot, res *latch.Result) {
	for i, a := range res.Actions {
		if a.Kind == latch.ActionVerificationNotPickedUp {
			res.Actions[i].Message = a.Message + "; " + c.starter.PickupHint(ctx, s.key.Namespace)
		}
	}
}

// reportVerification reports the actions of verify-on-latch as Events and
// metrics: the analysis's own reasons, apart from the latch's.
func (c *Controller) reportVerification(stage *kargo.Stage, a latch.Action) {
	ns, name := stage.Namespace, stage.Name
	switch a.Kind {
	case latch.ActionVerificationStarted:
		c.report.Event(stage, corev1.EventTypeNormal, api.ReasonVerificationStarted, a.Message)
	case latch.ActionVerificationFinished:
		c.cfg.Metrics.VerificationResults.WithLabelValues(ns, name, string(a.Phase)).Inc()
		if a.TimeToResult > 0 {
			c.cfg.Metrics.LatchToVerification.Observe(a.TimeToResult.Seconds())
		}
		switch a.Phase {
		case latch.VerificationSuccessful:
			c.report.Event(stage, corev1.EventTypeNormal, api.ReasonVerificationSucceeded, a.Message)
		case latch.VerificationAborted:
			c.report.Event(stage, corev1.EventTypeNormal, api.ReasonVerificationTerminated, a.Message)
		default:
			c.report.Event(stage, corev1.EventTypeWarning, api.ReasonVerificationFailed, a.Message)
		}
	case latch.ActionAbortInKargo:
		c.report.Event(stage, corev1.EventTypeNormal, api.ReasonVerificationAbortRequested, a.Message)
	case latch.ActionVerificationLeftToKargo:
		c.report.Event(stage, corev1.EventTypeWarning, api.ReasonVerificationLeftToKargo, a.Message)
		c.cfg.Metrics.VerificationProblems.WithLabelValues(ns, name, api.ReasonVerificationLeftToKargo).Inc()
	case latch.ActionVerificationNotPickedUp:
		c.report.Event(stage, corev1.EventTypeWarning, api.ReasonVerificationNotPickedUp, a.Message)
		c.cfg.Metrics.VerificationProblems.WithLabelValues(ns, name, api.ReasonVerificationNotPickedUp).Inc()
	case latch.ActionVerificationRunDeleted:
		c.report.Event(stage, corev1.EventTypeWarning, api.ReasonVerificationRunDeleted, a.Message)
		c.cfg.Metrics.VerificationProblems.WithLabelValues(ns, name, api.ReasonVerificationRunDeleted).Inc()
	}
}

// requeueRetry syncs the Stage again after d, in the plain lane: a retry
// of a refused start owes no pause, and must not go before Stages that do
// (a due time-based transition of the latch goes in the urgent lane).
func (c *Controller) requeueRetry(key cache.ObjectName, d time.Duration) {
	if w := c.work.Load(); w != nil && d > 0 {
		w.stages.AddAfter(key, d)
	}
}

// verifyRetryIn is when a refused start of the cycle's run is tried again;
// zero when none waits.
func (c *Controller) verifyRetryIn(s *snapshot) time.Duration {
	m := s.memo
	if m.verifyRefusedCycle == "" || m.verifyRefusedCycle != s.prior.Cycle() || !s.now.Before(m.verifyRetryAt) {
		return 0
	}
	return m.verifyRetryAt.Sub(s.now)
}

// reportRunPhases warns once per run and phase of kargo-latch's that shows
// a phase Argo Rollouts does not give: it is no result, and the run is
// followed on.
func (c *Controller) reportRunPhases(s *snapshot) {
	for _, r := range s.obs.Runs {
		if latch.KnownRunPhase(r.Phase) {
			continue
		}
		if warnOnce(&s.memo.badRunPhase, r.Name+"\x00"+string(r.Phase)) {
			c.report.Warn(s.stage, api.ReasonVerificationUnsupported, "AnalysisRun %s shows phase %q, which Argo Rollouts does not give: it counts as no result", r.Name, r.Phase)
			c.cfg.Metrics.InvalidInput.WithLabelValues(s.key.Namespace, s.key.Name, "analysisrun").Inc()
		}
	}
}

// runFailedNow reports whether an AnalysisRun kargo-latch started has just
// ended in a phase that fails its cycle.
func runFailedNow(o, n *unstructured.Unstructured) bool {
	was, is := verification.RunFrom(o).Phase, verification.RunFrom(n).Phase
	return is != was && is.FailsRun()
}
