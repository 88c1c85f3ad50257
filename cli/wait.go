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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/clock"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
)

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
	defer w.reach.close()
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
		if err := w.actOnRefusals(ctx); err != nil {
			return err
		}
		w.followFreight(ctx)
		v := judge(w.cond, w.target, w.sight())
		if v.outcome == held {
			v = w.confirmHeld(ctx, v)
		}
		switch v.outcome {
		case reached:
			_, err := fmt.Fprintf(stdout, "%s: %s\n", w.name(), v.message)
			return err
		case failed:
			return fmt.Errorf("%s: %s", w.name(), v.message)
		case held:
			return &exitError{code: ExitHeld, err: fmt.Errorf("%s: %s", w.name(), v.message)}
		case analysisFailed:
			return &exitError{code: ExitAnalysisFailed, err: fmt.Errorf("%s: %s", w.name(), v.message)}
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
	refused                    refusals
	stages, pauses, promotions *source
	freight                    freightSources
}

func (w *waiter) name() string { return "stage " + w.ns + "/" + w.stage }

// watching is what the waiter's source of gvr watches; required, when the
// wait cannot go on without it.
func (w *waiter) watching(gvr schema.GroupVersionResource, tweak func(*metav1.ListOptions), required bool) sourceSpec {
	spec := sourceSpec{client: w.client, gvr: gvr, ns: w.ns, tweak: tweak, changed: w.changed}
	spec.heard = w.hearing(spec, required)
	return spec
}

// probe reads the Stage once: whether the API server answers.
func (w *waiter) probe(ctx context.Context) error {
	_, err := w.client.Resource(kargo.StagesResource).Namespace(w.ns).Get(ctx, w.stage, metav1.GetOptions{})
	return err
}

func (w *waiter) start(ctx context.Context) error {
	var err error
	if w.stages, err = watchSource(ctx, w.watching(kargo.StagesResource, byName(w.stage), true)); err != nil {
		return w.required(err, resourceStages)
	}
	if len(w.stages.objects()) == 0 {
		return fmt.Errorf("no such Stage %s in project %s", w.stage, w.ns)
	}
	if !w.cond.ofCycle() {
		if w.pauses, err = watchSource(ctx, w.watching(v1alpha1.StagePausesResource, nil, true)); err != nil {
			return w.required(err, resourceStagePauses)
		}
		if w.cond == forResumed {
			return w.watchPromotions(ctx)
		}
		return nil
	}
	if err := w.watchPromotions(ctx); err != nil {
		return err
	}
	if w.target == "" {
		w.target = currentPromotion(w.stage, w.stageObject(), w.stagePromotions())
	} else if err := w.checkPinned(); err != nil {
		return err
	}
	return nil
}

// watchPromotions watches the Stage's Promotions, or goes on without them.
func (w *waiter) watchPromotions(ctx context.Context) error {
	var err error
	if w.promotions, err = watchSource(ctx, w.watching(kargo.PromotionsResource, w.promotionSelector(), false)); err != nil {
		return w.optional(ctx, err, resourcePromotions, w.withoutPromotions())
	}
	return nil
}

// withoutPromotions says what a wait that cannot read Promotions knows.
func (w *waiter) withoutPromotions() string {
	if w.cond == forResumed {
		return "it knows Kargo's holds only as the Stage shows them, which Kargo updates when it reconciles the Stage"
	}
	return "it knows only the promotions the Stage shows (running or last)"
}

func (w *waiter) required(err error, resource string) error {
	if isRefusal(err) {
		return w.refusedError(err, resource)
	}
	return err
}

// optional reports a source that cannot be watched and lets the wait go on
// without it, unless the wait ended meanwhile or the credentials were
// refused.
func (w *waiter) optional(ctx context.Context, err error, resource, without string) error {
	if ctx.Err() != nil {
		return err
	}
	if apierrors.IsUnauthorized(err) {
		return w.refusedError(err, resource)
	}
	w.warnWithout(err, resource, without)
	return nil
}

func (w *waiter) warnWithout(err error, resource, without string) {
	fmt.Fprintf(w.stderr, "warning: cannot watch %s in namespace %s (%s); %s\n", resource, w.ns, apiMessage(err), without)
}

// sight is what the waiter sees now.
func (w *waiter) sight() sighting {
	s := sighting{stage: w.stageObject(), promotion: w.promotion()}
	if w.pauses != nil {
		s.pauses = pausesOf(w.pauses.objects())
	}
	switch w.cond {
	case forVerified:
		s.verifiedIn = w.freight.verifiedIn(w.ns, w.stage)
	case forResumed:
		s.promotions = w.stagePromotions()
	}
	return s
}

// confirmHeld reads the Stage anew before a wait for resumed ends held: the
// watch may not have brought the Stage's latest state yet, and a hold is
// the one end a person has to act on. It judges that state; a failed read
// leaves v as it is.
func (w *waiter) confirmHeld(ctx context.Context, v verdict) verdict {
	u, err := w.client.Resource(kargo.StagesResource).Namespace(w.ns).Get(ctx, w.stage, metav1.GetOptions{})
	if err != nil {
		return v
	}
	s := w.sight()
	s.stage = u
	return judge(w.cond, w.target, s)
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
