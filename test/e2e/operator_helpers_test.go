package e2e

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"

	"github.com/kargo-latch/kargo-latch/controller"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/metrics"
)

// operator is an in-process kargo-latch watching one namespace.
type operator struct {
	t       *testing.T
	cancel  context.CancelFunc
	done    chan struct{}
	patches atomic.Int64 // PATCH requests to Stages
	reg     *prometheus.Registry
}

func startOperator(t *testing.T, ns string, defaults latch.Settings) *operator {
	t.Helper()
	return startOperatorAs(t, env.operator, ns, defaults)
}

// startOperatorAs is startOperator with another identity, such as the
// operator of an install with the mark-verified component (env.marker).
func startOperatorAs(t *testing.T, identity *rest.Config, ns string, defaults latch.Settings) *operator {
	t.Helper()
	return startOperatorWith(t, identity, ns, defaults, nil)
}

// startVerifier is startOperator as installed with the verify-on-latch
// and mark-verified components (env.verifier), run with
// --enable-verify-on-latch.
func startVerifier(t *testing.T, ns string, defaults latch.Settings) *operator {
	t.Helper()
	return startOperatorWith(t, env.verifier, ns, defaults, nil, func(c *controller.Config) { c.VerifyOnLatch = true })
}

// refusing is a fault that refuses the requests refuse returns an error for,
// before they reach the API server.
func refusing(refuse func(*http.Request) error) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if err := refuse(r); err != nil {
				return nil, err
			}
			return rt.RoundTrip(r)
		})
	}
}

// stageClient is the operator's Stage client, as main builds it.
func stageClient(t *testing.T, cfg *rest.Config) rest.Interface {
	t.Helper()
	c, err := kargo.NewStageClient(cfg)
	must(t, err)
	return c
}

// startOperatorWith is startOperatorAs whose requests pass through fault, a
// test's fault injection (nil for none).
func startOperatorWith(t *testing.T, identity *rest.Config, ns string, defaults latch.Settings, fault func(http.RoundTripper) http.RoundTripper, tweaks ...func(*controller.Config)) *operator {
	t.Helper()
	o := &operator{t: t, done: make(chan struct{}), reg: prometheus.NewRegistry()}
	cfg := rest.CopyConfig(identity)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if fault != nil {
			rt = fault(rt)
		}
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPatch && strings.Contains(r.URL.Path, "/stages/") {
				o.patches.Add(1)
			}
			return rt.RoundTrip(r)
		})
	}
	config := controller.Config{
		Dynamic:            dynamic.NewForConfigOrDie(cfg),
		StageClient:        stageClient(t, cfg),
		Kube:               kubernetes.NewForConfigOrDie(cfg),
		Namespaces:         []string{ns},
		Defaults:           defaults,
		Metrics:            metrics.New(o.reg, "e2e"),
		QueueMetrics:       metrics.NewWorkqueueProvider(o.reg),
		StatusMissingAfter: time.Second,
		// The operator's setting names Kargo's controllers: the default
		// one, the shard, and each project's own kargo-controller
		// (otherKargoController), as --kargo-controllers and
		// --kargo-controller-regex (e2eKargoControllerRegex) would: a
		// Promotion one of them creates with a kubernetes: create-actor
		// while paused is a bypass.
		KargoController: func(user string) bool {
			return user == kargoShardUser || e2eKargoControllers.MatchString(user)
		},
	}
	for _, tweak := range tweaks {
		tweak(&config)
	}
	c, err := controller.New(config)
	must(t, err)
	_, ctx := ktesting.NewTestContext(t)
	ctx, o.cancel = context.WithCancel(ctx)
	go func() {
		defer close(o.done)
		if err := c.Run(ctx); err != nil {
			t.Errorf("operator: %v", err)
		}
	}()
	t.Cleanup(o.stop)
	return o
}

// e2eKargoControllerRegex names, as the operator's
// --kargo-controller-regex, Kargo's controller ServiceAccount of any
// namespace.
const e2eKargoControllerRegex = "system:serviceaccount:[^:]+:kargo-controller"

var e2eKargoControllers = regexp.MustCompile("^(?:" + e2eKargoControllerRegex + ")$")

func (o *operator) stop() {
	o.cancel()
	<-o.done
}

// series is the operator's series of the metric name with the labels given
// (name, value pairs).
func (o *operator) series(name string, labels ...string) []*dto.Metric {
	mfs, err := o.reg.Gather()
	if err != nil {
		o.t.Fatal(err)
	}
	var found []*dto.Metric
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if got[labels[i]] != labels[i+1] {
					continue next
				}
			}
			found = append(found, m)
		}
	}
	return found
}

// metricExists reports whether the operator has the series name with the
// labels given.
func (o *operator) metricExists(name string, labels ...string) bool {
	return len(o.series(name, labels...)) > 0
}

// metric reads one counter or gauge of the operator; of a histogram, the
// number of observations.
func (o *operator) metric(name string, labels ...string) float64 {
	var total float64
	for _, m := range o.series(name, labels...) {
		switch {
		case m.GetCounter() != nil:
			total += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			total += m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			total += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return total
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
