// Package report sends kargo-latch's Events about Stages and the objects
// it writes. Two kinds: best-effort Events through client-go's recorder
// (aggregated, asynchronous), and once-only Events written directly under a
// name derived from what they report, so that a report repeated after a
// crash, by a restarted process or by the other replica, finds its Event
// there instead of sending a second one.
package report

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// MaxMessage bounds an Event's message, well inside the API server's limit.
const MaxMessage = 1024

// Reporter sends Events.
type Reporter struct {
	kube     kubernetes.Interface
	recorder record.EventRecorder
	clock    clock.Clock
}

// New returns a Reporter that writes with kube; recorder, when not nil,
// takes the best-effort Events instead of one Start builds.
func New(kube kubernetes.Interface, recorder record.EventRecorder, clk clock.Clock) *Reporter {
	return &Reporter{kube: kube, recorder: recorder, clock: clk}
}

// Start builds the best-effort recorder, unless New was given one; it
// stops when ctx is done. Events sent before Start are a programming error.
func (r *Reporter) Start(ctx context.Context) {
	if r.recorder != nil {
		return
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartStructuredLogging(4)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: r.kube.CoreV1().Events("")})
	go func() { <-ctx.Done(); broadcaster.Shutdown() }()
	r.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: api.FieldManager})
}

// StageRef is the Event's reference to a Stage.
func StageRef(stage *kargo.Stage) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion: kargo.GroupVersion.String(), Kind: "Stage",
		Namespace: stage.Namespace, Name: stage.Name, UID: stage.UID,
	}
}

// Event sends a best-effort Event about a Stage.
func (r *Reporter) Event(stage *kargo.Stage, eventType, reason, msg string) {
	r.recorder.Event(StageRef(stage), eventType, reason, Truncate(msg, MaxMessage))
}

// Warn sends a best-effort Warning about a Stage.
func (r *Reporter) Warn(stage *kargo.Stage, reason, format string, args ...any) {
	r.Event(stage, corev1.EventTypeWarning, reason, fmt.Sprintf(format, args...))
}

// WarnAbout sends a best-effort Warning about any object (a StagePause).
func (r *Reporter) WarnAbout(obj runtime.Object, reason, format string, args ...any) {
	r.recorder.Eventf(obj, corev1.EventTypeWarning, reason, format, args...)
}

// Once records an Event about a Stage under name (see OnceName), written
// directly rather than through the recorder, which could lose it in a
// crash. An Event already there under that name is the same report.
func (r *Reporter) Once(ctx context.Context, stage *kargo.Stage, name, eventType, reason, msg string) error {
	_, err := r.OnceAbout(ctx, stage, nil, name, eventType, reason, msg)
	return err
}

// OnceAbout is Once for an Event that also names a related object (when
// not nil: the Promotion a GateBypassed Warning is about), and reports
// whether this call made it (false: it was there already), so that what
// goes with the Event, a count, goes with it once over restarts and
// replicas too.
func (r *Reporter) OnceAbout(ctx context.Context, stage *kargo.Stage, related *corev1.ObjectReference, name, eventType, reason, msg string) (created bool, err error) {
	now := metav1.NewTime(r.clock.Now())
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: stage.Namespace},
		InvolvedObject: *StageRef(stage),
		Related:        related,
		Reason:         reason, Message: Truncate(msg, MaxMessage), Type: eventType,
		Source:         corev1.EventSource{Component: api.FieldManager},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	_, err = r.kube.CoreV1().Events(stage.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("recording %s: %w", reason, err)
	}
	return true, nil
}

// OnceName derives a once-only Event's name from the Stage, the kind of
// report and the identity of what it reports.
func OnceName(stage *kargo.Stage, kind, identity string) string {
	sum := sha256.Sum256([]byte(string(stage.UID) + "\x00" + identity))
	prefix := stage.Name
	if len(prefix) > 200 {
		prefix = prefix[:200]
	}
	return prefix + "." + kind + "." + hex.EncodeToString(sum[:8])
}

// Truncate cuts s to n bytes, marking the cut.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
