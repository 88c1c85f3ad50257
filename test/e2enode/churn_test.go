package e2enode

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kargo-latch/kargo-latch/test/driver"
)

// failCadence is how often churn fails a Stage, without waiting for the
// pause: failures keep coming through a handover, whoever leads.
const failCadence = 250 * time.Millisecond

// failure is a Stage churn failed, and when.
type failure struct {
	stage *driver.Stage
	at    time.Time
}

// churn fails a new Stage every failCadence in its own goroutine, until
// finish (or the test's end).
type churn struct {
	mu       sync.Mutex
	failures []failure
	err      error
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

func (w *world) startChurn(t *testing.T, project, prefix string) *churn {
	c := &churn{stop: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(c.halt)
	go func() {
		defer close(c.done)
		tick := time.NewTicker(failCadence)
		defer tick.Stop()
		ctx := context.Background()
		for i := 0; ; i++ {
			s, err := w.kargo.CreateStage(ctx, project, fmt.Sprintf("%s-%02d", prefix, i), nil)
			if err == nil {
				_, err = s.StartPromotion(ctx)
			}
			if err == nil {
				_, err = s.FinishPromotion(ctx, "Failed")
			}
			c.mu.Lock()
			if err != nil {
				c.err = err
			} else {
				c.failures = append(c.failures, failure{s, time.Now()})
			}
			c.mu.Unlock()
			if err != nil {
				return
			}
			select {
			case <-c.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return c
}

// failuresAround is how many Stages fail before and after a moment that
// matters (a handover begun, a rollout over): a second of churn.
const failuresAround = 4

// waitFailedSince waits until failuresAround Stages failed after since.
func (c *churn) waitFailedSince(t *testing.T, since time.Time) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d Stages to fail", failuresAround), waitLimit, func() (bool, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		count := 0
		for _, f := range c.failures {
			if f.at.After(since) {
				count++
			}
		}
		return count >= failuresAround, c.err
	})
}

// finish stops the churn and returns what failed.
func (c *churn) finish(t *testing.T) []failure {
	t.Helper()
	c.halt()
	must(t, c.err)
	return c.failures
}

func (c *churn) halt() {
	c.stopOnce.Do(func() { close(c.stop) })
	<-c.done
}

// pauseLog follows the operator's log in every Pod of the release as
// they come, and tells which Pod made each StagePause ("Paused the Stage
// after a failure").
type pauseLog struct {
	mu     sync.Mutex
	by     map[string]string // StagePause -> Pod
	images map[string]string // Pod -> image
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var pausedLine = regexp.MustCompile(`Paused the Stage after a failure.*\bpause"?[=:]"([^"]+)"`)

func (w *world) followPauses(t *testing.T) *pauseLog {
	ctx, cancel := context.WithCancel(context.Background())
	l := &pauseLog{by: map[string]string{}, images: map[string]string{}, cancel: cancel}
	following := map[string]bool{}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for ctx.Err() == nil {
			pods, _ := w.pods(ctx)
			for _, p := range pods {
				if following[p.Name] || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Running == nil {
					continue
				}
				stream, err := w.kube.CoreV1().Pods(releaseNS).GetLogs(p.Name, &corev1.PodLogOptions{Follow: true}).Stream(ctx)
				if err != nil {
					continue
				}
				following[p.Name] = true
				l.mu.Lock()
				l.images[p.Name] = p.Spec.Containers[0].Image
				l.mu.Unlock()
				l.wg.Add(1)
				go func(pod string) {
					defer l.wg.Done()
					defer func() { _ = stream.Close() }()
					s := bufio.NewScanner(stream)
					for s.Scan() {
						if m := pausedLine.FindStringSubmatch(s.Text()); m != nil {
							l.mu.Lock()
							l.by[m[1]] = pod
							l.mu.Unlock()
						}
					}
				}(p.Name)
			}
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(l.stop)
	return l
}

func (l *pauseLog) stop() {
	l.cancel()
	l.wg.Wait()
}

// pausedBy tells which Pod logged each failure's StagePause, waiting a
// little for the lines of pauses already made; a failure whose line it
// never read (a deleted Pod's last lines) has "".
func (l *pauseLog) pausedBy(t *testing.T, failures []failure) []string {
	t.Helper()
	names := make([]string, len(failures))
	for i, f := range failures {
		p := env.pauses(t, f.stage)
		if len(p) == 1 {
			names[i] = p[0]
		}
	}
	pods := make([]string, len(failures))
	_ = poll(context.Background(), "the pauses' log lines", 5*time.Second, func() (bool, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		all := true
		for i, n := range names {
			pods[i] = l.by[n]
			all = all && pods[i] != ""
		}
		return all, nil
	})
	return pods
}

// image is the image Pod pod ran, as pauseLog saw it.
func (l *pauseLog) image(pod string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.images[pod]
}

// countByPod logs how many failures each Pod paused, and how many of them
// had failed before since.
func countByPod(t *testing.T, failures []failure, pods []string, since time.Time) map[string]int {
	t.Helper()
	counts, before := map[string]int{}, map[string]int{}
	for i, pod := range pods {
		counts[pod]++
		if failures[i].at.Before(since) {
			before[pod]++
		}
	}
	var lines []string
	for _, pod := range slices.Sorted(maps.Keys(counts)) {
		name := pod
		if name == "" {
			name = "(no log line read)"
		}
		lines = append(lines, fmt.Sprintf("%s paused %d (%d failed before the handover)", name, counts[pod], before[pod]))
	}
	t.Logf("%d Stages failed every %s: %s", len(failures), failCadence, strings.Join(lines, "; "))
	return counts
}

// allPausedOnce waits for every failure's Stage to be paused, then checks
// it has exactly one StagePause once a sentinel failed after them is
// paused too.
func allPausedOnce(t *testing.T, project string, failures []failure) {
	t.Helper()
	for _, f := range failures {
		waitPaused(t, f.stage, true, failoverLimit)
	}
	sentinel := env.createStage(t, project, "sentinel")
	fail(t, sentinel)
	waitPaused(t, sentinel, true, failoverLimit)
	for _, f := range failures {
		if got := env.pauses(t, f.stage); len(got) != 1 {
			t.Errorf("Stage %s has StagePauses %v, want exactly 1", f.stage.Name, got)
		}
	}
}
