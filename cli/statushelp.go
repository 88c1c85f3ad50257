package cli

// statusHelp is `status -h`: what the columns mean.
const statusHelp = `Shows each Stage's latch cycle: its phase, how far its Argo CD Applications
have got towards the latch, who verifies it with the Stage's configured
analysis and how far, whether its Freight was marked verified, and the
StagePauses that cover it.

Columns:
  PHASE     Idle, Promoted (waiting for the latch), Latched, Degraded, Failed.
  APPS      N/M: N of the M Applications in the Stage's health output were
            seen Healthy and Synced in this cycle, each at its own moment; the
            cycle latches when all M were (or when the Stage is Healthy).
            N alone: the Stage lists no Application now; N were seen Healthy.
            >100: too many Applications; only the Stage's health counts.
            -: no per-Application data; only the Stage's health counts.
  PAUSED    yes while a StagePause covers the Stage.
  REASON    the pause's reason, else the failure's.
  PAUSES    the StagePauses that cover the Stage.
  HELD      the Warehouses from which Kargo itself holds auto-promotion of
            the Stage (Kargo v1.11.1+, status.effectiveAutoPromotionHolds):
            after a person promoted other Freight than the candidate, e.g.
            a rollback during a pause. Resuming a pause does not end such a
            hold; the lines below the table say what each is and how to
            release it.
  SINCE     when the Stage entered its phase, or was paused.
  LATCHED   when the cycle latched: a verdict on health, never an analysis.
  ANALYSIS  the Stage's configured verification (spec.verification, an Argo
            Rollouts analysis) of the current cycle: who runs it and its
            phase, apart from the latch.
              kargo-latch: PHASE   kargo-latch's own AnalysisRun
                                   (kargo-latch.io/verify-on-latch)
              kargo: PHASE         Kargo's own verification
            PHASE is Pending, Running, Successful, Failed, Error,
            Inconclusive or Aborted; "not picked up" when no Argo Rollouts
            analysis controller took kargo-latch's run.
              waiting for Kargo    verify-on-latch: the cycle latched less
                                   than the operator's default grace (10s)
                                   ago; Kargo may still start its own.
              not started          no verification of the cycle yet. Kargo
                                   starts one only in a pass that sees the
                                   Stage Healthy; with verify-on-latch,
                                   kargo-latch starts it after the latch and
                                   --verify-grace (the Stage's Events say why
                                   when it does not).
              -                    the Stage has no spec.verification.
  VERIFIED  marked: kargo-latch marked the current Freight verified in this
            Stage (or found it so), so downstream Stages can receive it;
            with a configured verification, only after it succeeded.
            -: not marked by kargo-latch: mark-verified is off, the cycle has
            not latched, or the mark waits (a pause, a verification that has
            not succeeded, a missing right). Kargo may have verified it itself.

-o wide adds ANALYSISRUN: the AnalysisRun that verifies the current cycle.
-o json and -o yaml add the current Freight, each Application with the time
it was first seen Healthy in this cycle (seenHealthyAt), Kargo's holds
(kargoHolds: origin, Freight, actor, promotion, since), the analysis
(analysis: verifyOnLatch, by, phase, analysisRun, message, startTime,
finishTime), and the latch record (whose "verification" is the latch's
health verdict, and "analysis" the configured verification).

-w (--watch) keeps watching the Stages and their StagePauses (a watch, not
polling) and shows them again on every change, until interrupted (exit 0).
On a terminal the screen is cleared and redrawn (and the ages refreshed every
few seconds); otherwise (a pipe, a CI log) each change appends a new table,
or a new JSON array or YAML document, only when something changed.`
