package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

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
            Fails as latched does.
  paused    a StagePause covers the Stage: its own, or the project-wide one.
  resumed   no StagePause covers the Stage (one being deleted no longer does).
            If Kargo itself still holds auto-promotion of the Stage (Kargo
            v1.11+ holds an origin after a person promoted other Freight
            than its candidate, e.g. a rollback during the pause), wait
            exits 4 at once and says how to release the hold: only a person
            releases it, so waiting on would only hang the pipeline.

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
refusal such as 403 is an answer), whatever --timeout says.

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
  130  interrupted (SIGINT or SIGTERM)`

const waitExamples = `  # After "kargo promote --stage prod": wait for that promotion's latch.
  kargo-latch wait prod -n shop --for=latched --timeout 30m

  # Wait for the Freight to be verified, for one given promotion.
  kargo-latch wait prod -n shop --for=verified --promotion prod.01jxyz.abc1234 --timeout 30m

  # Hold a pipeline until the Stage is resumed; 4 if Kargo still holds it.
  kargo-latch wait prod -n shop --for=resumed`

type waitOptions struct {
	condition   string
	timeout     time.Duration
	promotion   string
	unreachable time.Duration
}

func waitCmd(kube *kubeFlags) *cobra.Command {
	var o waitOptions
	cmd := &cobra.Command{
		Use:               "wait STAGE -n PROJECT --for=latched|verified|paused|resumed [--timeout DURATION] [--promotion NAME]",
		Short:             "Wait until a Stage's cycle latches or its Freight is verified, or it is paused or resumed",
		Long:              waitHelp,
		Example:           waitExamples,
		ValidArgsFunction: kube.completeStages,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), kube, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&o.condition, "for", "", "the condition: latched, verified, paused or resumed")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "give up after this long (exit 3); 0 waits for ever")
	cmd.Flags().StringVar(&o.promotion, "promotion", "", "wait for this promotion's cycle (latched, verified); default: the Stage's current promotion")
	cmd.Flags().DurationVar(&o.unreachable, "unreachable-timeout", DefaultUnreachableTimeout, "give up (exit 1) once the API server has not answered for this long")
	_ = cmd.RegisterFlagCompletionFunc("for", fixedCompletions(conditions...))
	return cmd
}

// errTimedOut is the cause of a wait's context when --timeout passed.
var errTimedOut = errors.New("timed out")

func (o *waitOptions) check(args []string) error {
	switch {
	case len(args) != 1:
		return usageErrorf("wait takes one STAGE")
	case o.condition == "":
		return usageErrorf("--for is required: one of %s", strings.Join(conditions, ", "))
	case !slices.Contains(conditions, o.condition):
		return usageErrorf("unknown --for %q: use one of %s", o.condition, strings.Join(conditions, ", "))
	case o.timeout < 0:
		return usageErrorf("--timeout must not be negative")
	case o.unreachable <= 0:
		return usageErrorf("--unreachable-timeout must be positive")
	case o.promotion != "" && !condition(o.condition).ofCycle():
		return usageErrorf("--promotion goes with --for=latched or --for=verified")
	}
	return nil
}

func (o *waitOptions) run(ctx context.Context, kube *kubeFlags, args []string, stdout, stderr io.Writer) error {
	if err := o.check(args); err != nil {
		return err
	}
	client, ns, err := kube.client()
	if err != nil {
		return err
	}
	return o.wait(ctx, client, ns, args[0], stdout, stderr)
}

// wait waits for the Stage ns/stage as o says.
func (o *waitOptions) wait(ctx context.Context, client dynamic.Interface, ns, stage string, stdout, stderr io.Writer) error {
	ctx, giveUp := context.WithCancelCause(ctx)
	defer giveUp(nil)
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, o.timeout, errTimedOut)
		defer cancel()
	}
	w := &waiter{client: client, ns: ns, stage: stage, cond: condition(o.condition), target: o.promotion,
		stderr: stderr, changed: make(chan struct{}, 1)}
	w.reach = newReachability(clock.RealClock{}, o.unreachableTimeout(), w.probe, w.changed)
	go func() {
		select {
		case <-w.reach.unreachable():
			giveUp(w.reach.cause())
		case <-ctx.Done():
		}
	}()
	last, lastReach := "starting the watch", ""
	if err := w.start(ctx); err != nil {
		return o.ended(ctx, w, last, err)
	}
	for {
		w.followFreight(ctx)
		v := judge(w.cond, w.target, w.sight())
		switch v.outcome {
		case reached:
			_, err := fmt.Fprintf(stdout, "%s: %s\n", w.name(), v.message)
			return err
		case failed:
			return fmt.Errorf("%s: %s", w.name(), v.message)
		case held:
			return &exitError{code: ExitHeld, err: fmt.Errorf("%s: %s", w.name(), v.message)}
		}
		if v.message != last {
			last = v.message
			fmt.Fprintf(stderr, "%s: %s\n", w.name(), last)
		}
		if r := w.reach.state(); r != lastReach {
			lastReach = r
			fmt.Fprintf(stderr, "%s: %s\n", w.name(), cmp.Or(r, "the API server answers again"))
		}
		select {
		case <-ctx.Done():
			return o.ended(ctx, w, last, ctx.Err())
		case <-w.changed:
		}
	}
}

func (o *waitOptions) unreachableTimeout() time.Duration {
	if o.unreachable <= 0 { // a caller that did not parse the flags
		return DefaultUnreachableTimeout
	}
	return o.unreachable
}

// ended is the error of a wait whose context ended, or that failed to start.
func (o *waitOptions) ended(ctx context.Context, w *waiter, last string, err error) error {
	var unreachable *errUnreachable
	switch {
	case errors.Is(context.Cause(ctx), errTimedOut):
		return &exitError{code: ExitTimeout, err: fmt.Errorf("timed out after %s waiting for %s to be %s; last seen: %s",
			o.timeout, w.name(), w.cond, last)}
	case errors.As(context.Cause(ctx), &unreachable):
		return fmt.Errorf("%s: %w; last seen: %s", w.name(), unreachable, last)
	case ctx.Err() != nil:
		return &exitError{code: ExitInterrupted, err: fmt.Errorf("interrupted while waiting for %s to be %s; last seen: %s",
			w.name(), w.cond, last)}
	}
	return err
}

// waiter watches what a wait needs: the Stage, and its StagePauses or its
// Promotions and Freight.
type waiter struct {
	client dynamic.Interface
	ns     string
	stage  string
	cond   condition
	// target is the promotion whose cycle a wait for latched or verified
	// waits for; empty, the Stage's current cycle.
	target string
	stderr io.Writer

	changed                    chan struct{}
	reach                      *reachability
	stages, pauses, promotions *source
	freight                    freightSources
}

func (w *waiter) name() string { return "stage " + w.ns + "/" + w.stage }

// watching is what the waiter's source of gvr watches.
func (w *waiter) watching(gvr schema.GroupVersionResource, tweak func(*metav1.ListOptions)) sourceSpec {
	return sourceSpec{client: w.client, gvr: gvr, ns: w.ns, tweak: tweak, changed: w.changed, heard: w.reach.heard}
}

// probe reads the Stage once: whether the API server answers.
func (w *waiter) probe(ctx context.Context) error {
	_, err := w.client.Resource(kargo.StagesResource).Namespace(w.ns).Get(ctx, w.stage, metav1.GetOptions{})
	return err
}

func (w *waiter) start(ctx context.Context) error {
	var err error
	if w.stages, err = watchSource(ctx, w.watching(kargo.StagesResource, byName(w.stage))); err != nil {
		return w.required(err, "stages")
	}
	if len(w.stages.objects()) == 0 {
		return fmt.Errorf("no such Stage %s in project %s", w.stage, w.ns)
	}
	if !w.cond.ofCycle() {
		if w.pauses, err = watchSource(ctx, w.watching(v1alpha1.StagePausesResource, nil)); err != nil {
			return w.required(err, "stagepauses")
		}
		return nil
	}
	selectPromotions := w.promotionSelector()
	if w.promotions, err = watchSource(ctx, w.watching(kargo.PromotionsResource, selectPromotions)); err != nil {
		if err := w.optional(ctx, err, "promotions", "it knows only the promotions the Stage shows (running or last)"); err != nil {
			return err
		}
	}
	if w.target == "" {
		w.target = currentPromotion(w.stage, w.stageObject(), w.stagePromotions())
	} else if err := w.checkPinned(); err != nil {
		return err
	}
	return nil
}

// promotionSelector selects the pinned promotion, or the Stage's, by the
// label Kargo's webhook gives every Promotion; all of the project's when
// the Stage's name is too long for a label value.
func (w *waiter) promotionSelector() func(*metav1.ListOptions) {
	if w.target != "" {
		return byName(w.target)
	}
	if len(validation.IsValidLabelValue(w.stage)) > 0 {
		return nil
	}
	selector := labels.SelectorFromSet(labels.Set{kargo.StageLabel: w.stage}).String()
	return func(o *metav1.ListOptions) { o.LabelSelector = selector }
}

func (w *waiter) required(err error, resource string) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("forbidden: wait needs get, list and watch on %s in namespace %s: %s", resource, w.ns, apiMessage(err))
	}
	return err
}

// optional reports a source that cannot be watched and lets the wait go on
// without it, unless the wait ended meanwhile.
func (w *waiter) optional(ctx context.Context, err error, resource, without string) error {
	if ctx.Err() != nil {
		return err
	}
	fmt.Fprintf(w.stderr, "warning: cannot watch %s in namespace %s (%s); %s\n", resource, w.ns, apiMessage(err), without)
	return nil
}

// checkPinned refuses a --promotion that names no promotion of the Stage,
// as far as the waiter can tell.
func (w *waiter) checkPinned() error {
	p := w.promotion()
	switch {
	case p != nil && p.Stage != "" && p.Stage != w.stage:
		return fmt.Errorf("promotion %s is for Stage %s, not %s", w.target, p.Stage, w.stage)
	case p != nil || w.promotions == nil:
		return nil
	}
	u := w.stageObject()
	if rec, err := latch.Decode(u.GetAnnotations()[kargo.StateAnnotation]); err == nil && rec.Promotion == w.target {
		return nil
	}
	if st := kargo.StatusFromUnstructured(u); st != nil &&
		(st.CurrentPromotion == w.target || st.LastPromotion != nil && st.LastPromotion.Name == w.target) {
		return nil
	}
	return fmt.Errorf("no such promotion %s of Stage %s in project %s", w.target, w.stage, w.ns)
}

// sight is what the waiter sees now.
func (w *waiter) sight() sighting {
	s := sighting{stage: w.stageObject(), promotion: w.promotion()}
	if w.pauses != nil {
		s.pauses = pausesOf(w.pauses.objects())
	}
	if w.cond == forVerified {
		s.verifiedIn = w.freight.verifiedIn(w.ns, w.stage)
	}
	return s
}

func (w *waiter) stageObject() *unstructured.Unstructured { return w.stages.get(w.ns, w.stage) }

func (w *waiter) promotion() *promotion {
	if w.target == "" {
		return nil
	}
	u := w.promotions.get(w.ns, w.target)
	if u == nil {
		return nil
	}
	p := promotionOf(u)
	return &p
}

// stagePromotions are the Stage's Promotion objects seen.
func (w *waiter) stagePromotions() []promotion {
	var out []promotion
	for _, u := range w.promotions.objects() {
		if p := promotionOf(u); p.Stage == w.stage {
			out = append(out, p)
		}
	}
	return out
}

// currentPromotion is the promotion whose cycle an unpinned wait for
// latched or verified waits for: the newest, in Kargo's name order, of the
// Stage's Promotions, its running and last promotion and its record's
// promotion, leaving out aborted ones (an aborted Promotion never ran; one
// drained while queued becomes the Stage's last promotion all the same).
// Empty when the Stage has none: the wait follows its current cycle.
func currentPromotion(stage string, u *unstructured.Unstructured, promotions []promotion) string {
	newest := ""
	consider := func(name, phase string) {
		if phase != promotionAborted && name > newest {
			newest = name
		}
	}
	if rec, err := latch.Decode(u.GetAnnotations()[kargo.StateAnnotation]); err == nil {
		consider(rec.Promotion, "")
	}
	if st := kargo.StatusFromUnstructured(u); st != nil {
		consider(st.CurrentPromotion, "")
		if lp := st.LastPromotion; lp != nil {
			consider(lp.Name, lp.Phase)
		}
	}
	for _, p := range promotions {
		if p.Stage == stage {
			consider(p.Name, p.Phase)
		}
	}
	return newest
}
