package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
)

type pauseOptions struct {
	all             bool
	reason, message string
}

func pauseCmd(kube *kubeFlags) *cobra.Command {
	var o pauseOptions
	cmd := &cobra.Command{
		Use:   "pause (STAGE | --all) -n PROJECT [--reason REASON] [--message TEXT]",
		Short: "Pause a Stage, or every Stage of a project: stop its auto-promotion",
		Long: `Creates a StagePause: while it exists, Kargo's auto-promotions to the Stage
(or to every Stage of the project, with --all) are refused. People's
promotions still pass. This needs only "create" on stagepauses
(ClusterRole kargo-latch-pauser).`,
		ValidArgsFunction: kube.completeStages,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), kube, args, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&o.all, "all", false, "pause every Stage of the project")
	cmd.Flags().StringVar(&o.reason, "reason", "", "why, one CamelCase word such as DBMigration (default Manual, or ProjectPause with --all)")
	cmd.Flags().StringVar(&o.message, "message", "", "free text for people")
	return cmd
}

func (o *pauseOptions) run(ctx context.Context, kube *kubeFlags, pos []string, out io.Writer) error {
	all, reason, message := o.all, o.reason, o.message
	if err := checkReason(reason, message != ""); err != nil {
		return &exitError{code: ExitUsage, err: err}
	}
	if len(message) > maxMessage {
		return usageErrorf("--message is %d characters long; a StagePause's message holds at most %d", len(message), maxMessage)
	}
	stage := v1alpha1.AllStages
	switch {
	case all && len(pos) == 0:
		if reason == "" {
			reason = v1alpha1.ReasonProjectPause
		}
	case !all && len(pos) == 1:
		stage = pos[0]
	default:
		return usageErrorf("pause takes one STAGE, or --all")
	}
	if reason == "" {
		reason = v1alpha1.ReasonManual
	}
	client, ns, err := kube.client()
	if err != nil {
		return err
	}
	name, err := createPause(ctx, client, ns, stage, reason, message)
	if err != nil {
		return explain(err, "create", ns, "kargo-latch-pauser")
	}
	what := "Stage " + stage + " is"
	if stage == v1alpha1.AllStages {
		what = "every Stage of project " + ns + " is"
	}
	_, err = fmt.Fprintf(out, "stagepause %s/%s created: %s paused (reason %s)\n", ns, name, what, reason)
	return err
}

// createPause makes the StagePause that pauses stage (AllStages: the
// project) and returns its name; the CLI's pause and the dashboard's. A
// Stage that does not exist is refused; one the user may not
// read is paused all the same, since pausing needs no right on Stages.
// The pause says who made it (PausedByAnnotation), as the API server names
// the user, for people to read.
func createPause(ctx context.Context, client dynamic.Interface, ns, stage, reason, message string) (string, error) {
	if stage != v1alpha1.AllStages {
		if _, err := client.Resource(kargo.StagesResource).Namespace(ns).Get(ctx, stage, metav1.GetOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				return "", fmt.Errorf("no such Stage %s in project %s", stage, ns)
			}
			if !apierrors.IsForbidden(err) {
				return "", err
			}
		}
	}
	prefix := stage + "-"
	if stage == v1alpha1.AllStages {
		prefix = "project-"
	}
	metadata := map[string]any{
		"generateName": strings.ToLower(prefix),
		"namespace":    ns,
		"labels":       map[string]any{v1alpha1.StageLabel: v1alpha1.StageLabelValue(stage), v1alpha1.ReasonLabel: reason},
	}
	if by := whoAmI(ctx, client); by != "" {
		metadata["annotations"] = map[string]any{v1alpha1.PausedByAnnotation: by}
	}
	p := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "StagePause",
		"metadata": metadata,
		"spec":     map[string]any{"stage": stage, "reason": reason, "message": message},
	}}
	created, err := client.Resource(v1alpha1.StagePausesResource).Namespace(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return created.GetName(), nil
}

// whoAmITimeout bounds the question "who am I?" before a pause.
const whoAmITimeout = 2 * time.Second

// selfSubjectReviews is where the API server says who the caller is.
var selfSubjectReviews = schema.GroupVersionResource{Group: "authentication.k8s.io", Version: "v1", Resource: "selfsubjectreviews"}

// whoAmI is the user's name as the API server authenticates them, or ""
// when it cannot say (the review is refused or unsupported): a pause is
// made all the same.
func whoAmI(ctx context.Context, client dynamic.Interface) string {
	// A slow answer must not hold up a pause: without a name, a pause is
	// made all the same.
	ctx, cancel := context.WithTimeout(ctx, whoAmITimeout)
	defer cancel()
	review := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}}
	out, err := client.Resource(selfSubjectReviews).Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		return ""
	}
	name, _, _ := unstructured.NestedString(out.Object, "status", "userInfo", "username")
	return name
}

// A reason is a CamelCase word, as Kubernetes' reasons are: it is kept in
// the label kargo-latch.io/reason, shown in status tables and used as a
// metric label. Free text goes in --message.
var reasonPattern = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

// maxReason is the CRD's limit, also a label value's; maxMessage the CRD's.
const (
	maxReason  = 63
	maxMessage = 4096
)

// checkReason refuses a reason that is not one CamelCase word, and suggests
// one made from its words ("DB migration" -> DBMigration), with the text as
// the message unless there is one.
func checkReason(reason string, haveMessage bool) error {
	if reason == "" || (reasonPattern.MatchString(reason) && len(reason) <= maxReason) {
		return nil
	}
	msg := fmt.Sprintf("--reason %q is not a reason: a reason is one CamelCase word of letters and digits, starting with a capital letter, at most %d long (e.g. DBMigration); put free text in --message", reason, maxReason)
	if s := camelCase(reason); s != "" && s != reason && len(s) <= maxReason {
		if haveMessage {
			msg += fmt.Sprintf(". Did you mean --reason %s?", s)
		} else {
			msg += fmt.Sprintf(". Did you mean --reason %s --message %q?", s, reason)
		}
	}
	return errors.New(msg)
}

// camelCase joins the words of s, each starting with a capital letter, and
// drops everything but ASCII letters and digits; "" if nothing fits.
func camelCase(s string) string {
	var b strings.Builder
	for _, w := range strings.FieldsFunc(s, func(r rune) bool { return !isASCIIAlnum(r) }) {
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	out := b.String()
	if !reasonPattern.MatchString(out) {
		return ""
	}
	return out
}

func isASCIIAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

func resumeCmd(kube *kubeFlags) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "resume (STAGE | --all) -n PROJECT",
		Short: "Resume a Stage, or the project: delete its StagePauses",
		Long: `Deletes the Stage's own StagePauses (or, with --all, the project-wide one);
kargo-latch then asks Kargo to re-attempt auto-promotion at once. This needs
"delete" on stagepauses (ClusterRole kargo-latch-resumer).

Kargo itself (v1.11.1+) holds auto-promotion from an origin after a person
promoted other Freight than its candidate, e.g. a rollback during the pause;
such a hold outlives the StagePause. resume then says so, names the hold
and says how to release it. Reading the Stage needs "get" on stages ("list"
with --all), which kargo-latch-resumer grants; without it, resume warns that
it could not look.`,
		ValidArgsFunction: kube.completeStages,
		RunE: func(cmd *cobra.Command, args []string) error {
			return resume(cmd.Context(), kube, all, args, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "delete the project-wide pause")
	return cmd
}

func resume(ctx context.Context, kube *kubeFlags, all bool, pos []string, out, errOut io.Writer) error {
	if all == (len(pos) == 1) || len(pos) > 1 {
		return usageErrorf("resume takes one STAGE, or --all")
	}
	client, ns, err := kube.client()
	if err != nil {
		return err
	}
	target := v1alpha1.AllStages
	if !all {
		target = pos[0]
	}
	done, err := resumePauses(ctx, client, ns, target)
	for _, name := range done.deleted {
		fmt.Fprintf(out, "stagepause %s/%s deleted\n", ns, name)
	}
	var nothing *nothingToResume
	switch {
	case errors.As(err, &nothing):
		if nothing.notPaused { // not paused, yet maybe held: say why nothing flows
			sayHolds(ctx, client, ns, target, out, errOut)
		}
		return err
	case err != nil && done.listed:
		return explain(err, "delete", ns, "kargo-latch-resumer")
	case err != nil:
		return explain(err, "list", ns, "kargo-latch-resumer")
	}
	projectWide := done.projectWide
	what, which := "Stage "+target, target
	if all {
		what, which = "project "+ns, ""
	}
	if !all && len(projectWide) > 0 {
		fmt.Fprintf(out, "Stage %s is still paused by the project-wide StagePause %s\n", target, strings.Join(projectWide, ", "))
	} else {
		fmt.Fprintf(out, "%s resumed; kargo-latch asks Kargo to re-attempt auto-promotion now\n", what)
	}
	sayHolds(ctx, client, ns, which, out, errOut)
	return nil
}

// resumed is what resumePauses did.
type resumed struct {
	// listed: the pauses were read (an error came after).
	listed bool
	// deleted names the pauses deleted; projectWide the project-wide
	// pauses that still cover a Stage resumed on its own.
	deleted, projectWide []string
}

// nothingToResume is resumePauses' answer when target has no pause of its
// own to delete; notPaused when nothing covers it at all.
type nothingToResume struct {
	msg       string
	notPaused bool
}

func (e *nothingToResume) Error() string { return e.msg }

// resumePauses deletes the pauses of target (a Stage, or AllStages for the
// project-wide ones); the CLI's resume and the dashboard's. API errors come
// back as the API server gave them.
func resumePauses(ctx context.Context, client dynamic.Interface, ns, target string) (resumed, error) {
	var done resumed
	pauses, err := listPauses(ctx, client, ns)
	if err != nil {
		return done, err
	}
	done.listed = true
	var mine []string
	for _, p := range pauses {
		switch {
		case p.DeletionTimestamp != nil:
		case p.Spec.Stage == target:
			mine = append(mine, p.Name)
		case p.Spec.Stage == v1alpha1.AllStages:
			done.projectWide = append(done.projectWide, p.Name)
		}
	}
	if len(mine) == 0 {
		switch {
		case target == v1alpha1.AllStages:
			return done, &nothingToResume{msg: fmt.Sprintf("project %s has no project-wide pause", ns)}
		case len(done.projectWide) > 0:
			return done, &nothingToResume{msg: fmt.Sprintf("stage %s has no pause of its own; it is paused by the project-wide StagePause %s (resume --all -n %s)",
				target, strings.Join(done.projectWide, ", "), ns)}
		}
		if err := stageExists(ctx, client, ns, target); err != nil {
			return done, err
		}
		return done, &nothingToResume{msg: fmt.Sprintf("stage %s in project %s is not paused", target, ns), notPaused: true}
	}
	for _, name := range mine {
		err := client.Resource(v1alpha1.StagePausesResource).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return done, err
		}
		done.deleted = append(done.deleted, name)
	}
	return done, nil
}

func stageExists(ctx context.Context, client dynamic.Interface, ns, stage string) error {
	_, err := client.Resource(kargo.StagesResource).Namespace(ns).Get(ctx, stage, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("no such Stage %s in project %s", stage, ns)
	}
	if apierrors.IsForbidden(err) {
		return nil
	}
	return err
}
