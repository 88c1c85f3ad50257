package cli

// waitHelp is `wait -h`: the conditions, which cycle, and the exit codes.
const waitHelp = `Waits until a Stage reaches a condition, then exits 0. Exits non-zero, with
the reason on stderr, as soon as the condition can no longer be reached, or
when --timeout passes. Made for CI pipelines that wait for a Stage after a
promotion. It watches the objects (no polling); progress goes to stderr, a
line each time what it sees changes, and the result to stdout.

Conditions (--for):
  latched   the cycle of the Stage's current promotion is Latched: the Stage
            as a whole, or each of its Argo CD Applications, was seen Healthy
            after that promotion. Fails as soon as that cycle is Failed (the
            reason: PromotionFailed, VerificationFailed, LatchDeadlineExceeded,
            Degraded, ...), the promotion fails or is aborted, or a newer
            promotion starts a cycle of its own. A Degraded cycle is waited
            on: it either recovers (Latched) or fails.
  verified  the cycle's Freight is verified in the Stage, so that downstream
            Stages can receive it: marked by kargo-latch when the cycle
            latched (kargo-latch.io/mark-verified), or verified by Kargo (the
            Freight's status.verifiedIn) in this cycle: once the cycle has
            latched, or at or after its promotion. Freight rolled back to,
            verified in an earlier cycle, waits for this cycle's latch.
            A Stage with spec.verification and verify-on-latch
            (kargo-latch.io/verify-on-latch) also needs this cycle's
            analysis to have passed (Successful): kargo-latch's own
            AnalysisRun, or Kargo's verification; a latch alone never
            counts. The progress lines say who verifies (kargo-latch or
            Kargo), the AnalysisRun and its phase. Exits 5 as soon as the
            cycle's analysis ends Failed, Error or Inconclusive (any Stage
            with spec.verification); otherwise fails as latched does. An
            analysis aborted (by a person, or a run deleted twice) is
            waited on: only a new verification (Kargo's reverify) verifies
            the Freight.
  paused    a StagePause covers the Stage: its own, or the project-wide one.
  resumed   no StagePause covers the Stage (one being deleted no longer does).
            If Kargo itself still holds auto-promotion of the Stage (Kargo
            v1.11.1+ holds an origin after a person promoted other Freight
            than its candidate, e.g. a rollback during the pause), wait
            exits 4 and says how to release the hold: only a person
            releases it, so waiting on would only hang the pipeline. Kargo
            shows a hold made or released by a person's promotion only
            once it has reconciled the Stage after the promotion was
            created: while a newer promotion of the Stage says a hold is
            coming or going and the Stage does not show it yet, wait waits
            (it reads the Stage's Promotions when it may).

Which cycle: the Stage's current promotion is the newest (in Kargo's name
order, aborted ones aside) of the Stage's Promotions, its running and last
promotion, and the promotion of its latch record, as seen when wait starts.
So a pipeline may call wait right after "kargo promote": while the Stage
still shows the previous cycle Latched, wait waits for the new promotion's
cycle. --promotion NAME pins the promotion (the name "kargo promote"
printed); use it when other promotions of the Stage may be queued at the
same time. Without the right to list Promotions, wait knows only those the
Stage shows (running or last), and says so.

The API server going away: wait rides out a restart, and exits 1 once the
API server has not answered for --unreachable-timeout (default 1m; a
refusal such as 403 is an answer), whatever --timeout says. A refusal in
the middle of a wait ends it (exit 1, with the API server's message) when
the credentials are refused (401) or the Stage or its StagePauses may not
be read, and a read 2s later is refused too (an API server that has just
restarted may refuse for a moment); Promotions and Freight it goes on
without, and says so.

Exit codes:
  0    reached
  1    failed: the cycle failed, the promotion failed or was aborted, a newer
       promotion replaced it, or the Stage was deleted; or an error (the API
       server refused, or could not be reached for --unreachable-timeout).
       The reason is on stderr.
  2    usage error; nothing was done
  3    timed out (--timeout); the last state seen is on stderr
  4    --for=resumed: no StagePause covers the Stage, but Kargo's own
       auto-promotion hold still stops auto-promotion from an origin; the
       hold and how to release it are on stderr
  5    --for=verified: the cycle's configured verification (an Argo
       Rollouts analysis: kargo-latch's verify-on-latch run, or Kargo's own)
       ended Failed, Error or Inconclusive; which run, and its message, are
       on stderr
  130  interrupted (SIGINT or SIGTERM)`

const waitExamples = `  # After "kargo promote --stage prod": wait for that promotion's latch.
  kargo-latch wait prod -n shop --for=latched --timeout 30m

  # Wait for the Freight to be verified, for one given promotion; 5 if its
  # analysis fails.
  kargo-latch wait prod -n shop --for=verified --promotion prod.01jxyz.abc1234 --timeout 30m

  # Hold a pipeline until the Stage is resumed; 4 if Kargo still holds it.
  kargo-latch wait prod -n shop --for=resumed`
