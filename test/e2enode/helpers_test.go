package e2enode

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/hack/image/ociimage"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// waitLimit bounds what the operator does at once; the node's own work
// (pulls, restarts, failovers) has limits of its own.
const waitLimit = 30 * time.Second

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// poll calls cond every 100ms until it holds, for at most limit.
func poll(ctx context.Context, what string, limit time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	var last error
	for {
		ok, err := cond()
		if ok && err == nil {
			return nil
		}
		var stop permanent
		if errors.As(err, &stop) {
			return fmt.Errorf("%s: %w", what, err)
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			if last != nil {
				return fmt.Errorf("%s: not within %s (last error: %w)", what, limit, last)
			}
			return fmt.Errorf("%s: not within %s", what, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// permanent is an error of a condition that waiting cannot mend: poll
// returns it at once.
type permanent struct{ error }

func waitFor(t *testing.T, what string, limit time.Duration, cond func() (bool, error)) {
	t.Helper()
	must(t, poll(context.Background(), what, limit, cond))
}

// layoutVersion is the version the image in layout was built as: its tag.
func layoutVersion(layout string) (string, error) {
	idx, _, err := ociimage.ReadLayout(layout)
	if err != nil {
		return "", err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return "", err
	}
	v := m.Annotations[ociimage.VersionLabel]
	if v == "" {
		return "", fmt.Errorf("the image in %s has no %s", layout, ociimage.VersionLabel)
	}
	return v, nil
}

// helm runs bin/helm as the admin, with a home of its own.
func (w *world) helm(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(w.cluster.Root, "bin", "helm"), append(args, "--kubeconfig", w.kubeconfig)...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(w.helmHome, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(w.helmHome, "config"),
		"HELM_DATA_HOME="+filepath.Join(w.helmHome, "data"))
	return cmd.CombinedOutput()
}

// selector picks the release's operator Pods.
var selector = labels.Set{"app.kubernetes.io/instance": release}.String()

// pods are the release's Pods that are not being deleted.
func (w *world) pods(ctx context.Context) ([]corev1.Pod, error) {
	return w.podsOf(ctx, selector)
}

// podsOf are the Pods of the release's namespace that podSelector picks
// and that are not being deleted.
func (w *world) podsOf(ctx context.Context, podSelector string) ([]corev1.Pod, error) {
	l, err := w.kube.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: podSelector})
	if err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

func ready(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitDeployment waits until the release's Deployment has rolled out: its
// replicas all updated and available, and exactly that many Pods, all
// Running and Ready. A Pod that cannot start, or that the kubelet restarts
// for failing its liveness probe, fails it at once, with its state.
func (w *world) waitDeployment(ctx context.Context, limit time.Duration) error {
	return w.waitRollout(ctx, release, selector, limit)
}

// waitRollout is waitDeployment for the Deployment name of the release's
// namespace, whose Pods podSelector picks.
func (w *world) waitRollout(ctx context.Context, name, podSelector string, limit time.Duration) error {
	var last string
	err := poll(ctx, "the Deployment "+name+"'s Pods to be Running and Ready", limit, func() (bool, error) {
		d, err := w.kube.AppsV1().Deployments(releaseNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pods, err := w.podsOf(ctx, podSelector)
		if err != nil {
			return false, err
		}
		want := *d.Spec.Replicas
		last = fmt.Sprintf("generation %d/%d, %d updated, %d available of %d; pods: %s", d.Status.ObservedGeneration, d.Generation,
			d.Status.UpdatedReplicas, d.Status.AvailableReplicas, want, describePods(pods))
		for _, p := range pods {
			for _, c := range p.Status.ContainerStatuses {
				if wait := c.State.Waiting; wait != nil && hopeless[wait.Reason] {
					return false, permanent{fmt.Errorf("Pod %s cannot run: %s: %s%s", p.Name, wait.Reason, wait.Message, w.lastLog(ctx, p, c))}
				}
			}
		}
		if err := w.livenessKills(ctx, pods); err != nil {
			return false, err
		}
		if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != want ||
			d.Status.AvailableReplicas != want || d.Status.Replicas != want || int32(len(pods)) != want {
			return false, nil
		}
		for _, p := range pods {
			if p.Status.Phase != corev1.PodRunning || !ready(p) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%w: %s", err, last)
	}
	return nil
}

// hopeless are the reasons a container waits that no wait mends.
var hopeless = map[string]bool{
	"CrashLoopBackOff": true, "ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true,
	"CreateContainerError": true, "CreateContainerConfigError": true, "RunContainerError": true,
}

// lastLog is the end of the log of a container's last run, when it ran
// and ended: what a process that could not start said (runc writes there
// why the exec failed), as `kubectl logs --previous` shows it.
func (w *world) lastLog(ctx context.Context, p corev1.Pod, c corev1.ContainerStatus) string {
	if c.LastTerminationState.Terminated == nil {
		return ""
	}
	lines := int64(5)
	b, err := w.kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, Previous: true, TailLines: &lines}).DoRaw(ctx)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	return "; its last run's log: " + strings.TrimSpace(string(b))
}

// livenessKills is a permanent error when the kubelet has killed a
// container of pods for failing its liveness probe: the operator answers
// its probes from its start, so a probe that fails three times in a row
// (the chart's periodSeconds apart) reaches the wrong port or path.
func (w *world) livenessKills(ctx context.Context, pods []corev1.Pod) error {
	if len(pods) == 0 {
		return nil
	}
	events, err := w.kube.CoreV1().Events(releaseNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Pod,reason=Killing"})
	if err != nil {
		return err
	}
	for _, p := range pods {
		for _, e := range events.Items {
			if e.InvolvedObject.UID == p.UID && strings.Contains(e.Message, "failed liveness probe") {
				return permanent{fmt.Errorf("the kubelet restarts Pod %s: %s", p.Name, e.Message)}
			}
		}
	}
	return nil
}

func describePods(pods []corev1.Pod) string {
	var parts []string
	for _, p := range pods {
		s := fmt.Sprintf("%s %s ready=%v", p.Name, p.Status.Phase, ready(p))
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Waiting != nil {
				s += fmt.Sprintf(" waiting %s: %s", c.State.Waiting.Reason, c.State.Waiting.Message)
			}
			if last := c.LastTerminationState.Terminated; last != nil {
				s += fmt.Sprintf(" last exit %d (%s: %s)", last.ExitCode, last.Reason, strings.TrimSpace(last.Message))
			}
		}
		parts = append(parts, s)
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

// leader is the name of the Pod holding the operator's Lease: the holder
// identity is the Pod's hostname, its name, then "_" and a random suffix.
func (w *world) leader(ctx context.Context) (string, error) {
	leases, err := w.kube.CoordinationV1().Leases(releaseNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	if len(leases.Items) != 1 {
		return "", fmt.Errorf("%d Leases in %s, want the operator's one", len(leases.Items), releaseNS)
	}
	h := leases.Items[0].Spec.HolderIdentity
	if h == nil || *h == "" {
		return "", nil
	}
	name, _, _ := strings.Cut(*h, "_")
	return name, nil
}

// waitLeader waits until a Pod of the release other than not holds the
// Lease, and returns its name.
func (w *world) waitLeader(t *testing.T, not string, limit time.Duration) string {
	t.Helper()
	var name string
	waitFor(t, "a Pod of the release other than "+not+" to hold the Lease", limit, func() (bool, error) {
		var err error
		if name, err = w.leader(context.Background()); err != nil || name == "" || name == not {
			return false, err
		}
		pods, err := w.pods(context.Background())
		for _, p := range pods {
			if p.Name == name {
				return true, err
			}
		}
		return false, err
	})
	return name
}

// containerPID is the host PID of the operator's process in Pod name,
// found through containerd by the container's ID.
func (w *world) containerPID(t *testing.T, name string) int {
	t.Helper()
	p, err := w.kube.CoreV1().Pods(releaseNS).Get(context.Background(), name, metav1.GetOptions{})
	must(t, err)
	if len(p.Status.ContainerStatuses) != 1 {
		t.Fatalf("Pod %s has %d container statuses, want 1", name, len(p.Status.ContainerStatuses))
	}
	pid, err := w.node.ContainerPID(context.Background(), p.Status.ContainerStatuses[0].ContainerID)
	must(t, err)
	return pid
}

// newProject is a namespace of the test's own.
func (w *world) newProject(t *testing.T) string {
	t.Helper()
	name := strings.ToLower(regexp.MustCompile(`[^a-zA-Z0-9]+`).ReplaceAllString(t.Name(), "-"))
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	name = strings.Trim(name[:min(len(name), 50)], "-") + "-" + hex.EncodeToString(b)
	_, err := w.kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	must(t, err)
	return name
}

func (w *world) createStage(t *testing.T, ns, name string) *driver.Stage {
	t.Helper()
	s, err := w.kargo.CreateStage(context.Background(), ns, name, nil)
	must(t, err)
	return s
}

func record(s *driver.Stage) (latch.Record, error) {
	u, err := s.Get(context.Background())
	if err != nil {
		return latch.Record{}, err
	}
	return latch.Decode(u.GetAnnotations()[api.StateAnnotation])
}

func waitPhase(t *testing.T, s *driver.Stage, phase latch.Phase) {
	t.Helper()
	waitFor(t, "Stage "+s.Name+" to be "+string(phase), waitLimit, func() (bool, error) {
		r, err := record(s)
		return r.Phase == phase, err
	})
}

// promoteAndLatch plays a successful promotion whose Apps go Progressing,
// then Healthy: the operator latches the Stage.
func promoteAndLatch(t *testing.T, s *driver.Stage) {
	t.Helper()
	ctx := context.Background()
	_, err := s.StartPromotion(ctx)
	must(t, err)
	_, err = s.FinishPromotion(ctx, "Succeeded")
	must(t, err)
	must(t, s.SetHealth(ctx, kargo.HealthProgressing, `Argo CD Application "app" in namespace "argocd" has health state "Progressing"`))
	waitPhase(t, s, latch.PhasePromoted)
	must(t, s.SetHealth(ctx, kargo.HealthHealthy))
	waitPhase(t, s, latch.PhaseLatched)
}

// fail plays a promotion that fails.
func fail(t *testing.T, s *driver.Stage) {
	t.Helper()
	_, err := s.StartPromotion(context.Background())
	must(t, err)
	_, err = s.FinishPromotion(context.Background(), "Failed")
	must(t, err)
}

func isPaused(s *driver.Stage) (bool, error) {
	u, err := s.Get(context.Background())
	if err != nil {
		return false, err
	}
	return u.GetLabels()[api.PausedLabel] == "true", nil
}

func waitPaused(t *testing.T, s *driver.Stage, want bool, limit time.Duration) {
	t.Helper()
	waitFor(t, fmt.Sprintf("Stage %s paused=%v", s.Name, want), limit, func() (bool, error) {
		p, err := isPaused(s)
		return p == want, err
	})
}

// pauses are the StagePauses of a Stage.
func (w *world) pauses(t *testing.T, s *driver.Stage) []string {
	t.Helper()
	l, err := w.dyn.Resource(v1alpha1.StagePausesResource).Namespace(s.Namespace).List(context.Background(), metav1.ListOptions{})
	must(t, err)
	var names []string
	for _, p := range l.Items {
		if unstructuredString(p.Object, "spec", "stage") == s.Name {
			names = append(names, p.GetName())
		}
	}
	return names
}

// unstructuredString is the string at fields in obj, or "".
func unstructuredString(obj map[string]any, fields ...string) string {
	var cur any = obj
	for _, f := range fields {
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = m[f]
	}
	s, _ := cur.(string)
	return s
}
