package gatebypass

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/pausing"
	"github.com/kargo-latch/kargo-latch/controller/report"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// Margin is how much older than a Promotion a pause must be for the
// Promotion to count as a bypass. Creation times have whole seconds, and the
// API server's admission-policy parameter cache (one per API server) may
// learn of a new pause a moment after it is made: a Promotion admitted in
// that moment is no misconfigured gate, and must not page anyone.
const Margin = 5 * time.Second

// candidate: an auto-promotion for a Stage, young enough to judge. An
// auto-promotion has the shape the gate refuses (no create-actor, or a
// controller: one), or was created by one of Kargo's controllers that
// Kargo's webhook took for a person (kubernetes:<user>, with a user that
// isController names): the gate lets that pass as a person's.
func candidate(p *kargo.Promotion, now time.Time, isController func(string) bool) bool {
	if p.Stage == "" || p.CreationTimestamp.IsZero() || now.Sub(p.CreationTimestamp.Time) > Horizon {
		return false
	}
	_, stampedController := controllerStamped(p, isController)
	return p.AutoPromotion() || stampedController
}

// controllerStamped returns the user of a Promotion whose create-actor is
// kubernetes:<user> for a user that isController names as one of Kargo's
// controllers.
func controllerStamped(p *kargo.Promotion, isController func(string) bool) (string, bool) {
	user, ok := strings.CutPrefix(p.Annotations[kargo.CreateActorAnnotation], "kubernetes:")
	return user, ok && isController != nil && isController(user)
}

// coveringAt keeps, of the StagePauses of p's project, those that covered
// p's Stage when p was created, sorted by name: naming its Stage or "*", not
// being deleted (deleting is resuming), and created at least Margin before
// p.
func coveringAt(pauses []*v1alpha1.StagePause, p *kargo.Promotion) []*v1alpha1.StagePause {
	var out []*v1alpha1.StagePause
	for _, sp := range pausing.InForce(pauses, p.Stage) {
		if !sp.CreationTimestamp.Add(Margin).After(p.CreationTimestamp.Time) {
			out = append(out, sp)
		}
	}
	return out
}

// report writes the GateBypassed Event of p, and reports whether this call
// made it (false: it was there).
func (d *Detector) report(ctx context.Context, p *kargo.Promotion, pauses []*v1alpha1.StagePause) (bool, error) {
	stage := &kargo.Stage{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Stage}}
	if s, ok, err := d.cfg.Stage(cache.NewObjectName(p.Namespace, p.Stage)); err == nil && ok {
		stage.UID = s.UID
	}
	related := &corev1.ObjectReference{
		APIVersion: kargo.GroupVersion.String(), Kind: "Promotion",
		Namespace: p.Namespace, Name: p.Name, UID: p.UID,
	}
	created, err := d.cfg.Reporter.OnceAbout(ctx, stage, related, eventName(p), corev1.EventTypeWarning, api.ReasonGateBypassed, message(p, pauses, d.cfg.KargoController))
	if err != nil {
		return false, fmt.Errorf("judging Promotion %s: %w", p.Name, err)
	}
	return created, nil
}

// message says which Promotion passed the gate under which pauses, who
// created it, and what to widen or check. An actor-less Promotion (or a
// controller: one) is refused by the gate whoever makes it, so its bypass
// means the gate is not in force: the message says to check it, and names
// the username that created it (the API server's stamp, when it did; else
// how to have it stamped). A Promotion that one of Kargo's controllers
// created with a kubernetes: actor was taken for a person's by Kargo's
// webhook: the message names that user and Kargo's setting to widen.
// Names are shortened so that the advice always fits in an Event's message
// (the Event's related object names the Promotion in full).
func message(p *kargo.Promotion, pauses []*v1alpha1.StagePause, isController func(string) bool) string {
	const shown = 3 // a project-wide pause and a Stage's own, and then some
	var names []string
	for _, sp := range pauses[:min(len(pauses), shown)] {
		names = append(names, fmt.Sprintf("%s (reason %s)", sp.Name, sp.EffectiveReason()))
	}
	if len(pauses) > shown {
		names = append(names, fmt.Sprintf("and %d more", len(pauses)-shown))
	}
	covered := report.Truncate(strings.Join(names, ", "), 120)
	name, at := report.Truncate(p.Name, 100), p.CreationTimestamp.UTC().Format(time.RFC3339)
	if user, ok := controllerStamped(p, isController); ok && !p.AutoPromotion() {
		user = report.Truncate(user, maxRequesterShown)
		return fmt.Sprintf("Auto-promotion %s, created at %s by Kargo controller %s, passed the pause gate as a person's Promotion although StagePause %s covered the Stage: "+
			"Kargo's webhook stamped it create-actor kubernetes:%s, as it does for every user outside Kargo's control plane. "+
			"Widen Kargo's Helm value webhooksServer.controlplaneUserRegex (CONTROLPLANE_USER_REGEX) to match %s; "+
			"the gate then refuses its auto-promotions while paused. Runbook KargoLatchGateBypassed",
			name, at, user, covered, user, user)
	}
	who := "an unknown user (no " + api.RequestedByAnnotation + ": turn on the requester mark, " +
		"Helm pauseGate.requestedBy.enabled or kustomize components/requested-by, Kubernetes 1.36+)"
	if user := p.Annotations[api.RequestedByAnnotation]; user != "" {
		who = report.Truncate(user, maxRequesterShown)
	}
	return fmt.Sprintf("Auto-promotion %s, created at %s by %s, passed the pause gate although StagePause %s covered the Stage. "+
		"The gate refuses every Promotion without a create-actor, or with a controller: one, whoever creates it: "+
		"check that the pause gate's ValidatingAdmissionPolicy and binding "+
		"(kargo-latch-pause-gate in a default install) are installed, and that the Promotion's namespace is not excluded. Runbook KargoLatchGateBypassed",
		name, at, who, covered)
}

// maxRequesterShown bounds the username a GateBypassed message shows, so
// that the advice after it always fits (a longer one is cut, with "…").
const maxRequesterShown = 160

// eventName derives the Event's name from the Promotion alone (its UID: a
// Promotion deleted and made again under its name is another Promotion), so
// every replica and restart finds the same one.
func eventName(p *kargo.Promotion) string {
	id := string(p.UID)
	if id == "" {
		id = p.Namespace + "/" + p.Name
	}
	sum := sha256.Sum256([]byte(id))
	prefix := p.Stage
	if len(prefix) > 200 {
		prefix = prefix[:200]
	}
	return prefix + ".gatebypassed." + hex.EncodeToString(sum[:8])
}
