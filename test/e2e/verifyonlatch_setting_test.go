package e2e

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// The setting of what the operator's AnalysisRuns may do: annotations of
// its ServiceAccount, which the guard reads as its param.
const (
	providersSetting  = "kargo-latch.io/verify-on-latch-metric-providers"
	secretArgsSetting = "kargo-latch.io/verify-on-latch-secret-args" //nolint:gosec // an annotation's name, not a credential
	// shippedProviders is the shipped value: every provider of Argo
	// Rollouts but job.
	shippedProviders = "prometheus,kayenta,web,datadog,wavefront,newRelic,cloudWatch,graphite,influxdb,skywalking,plugin"
)

// withMetrics is an AnalysisRun of ours (see analysisRun) with these
// metrics and args instead.
func withMetrics(name string, metrics, args []any) *unstructured.Unstructured {
	r := analysisRun(name, ourLabels)
	spec := r.Object["spec"].(map[string]any)
	if metrics != nil {
		spec["metrics"] = metrics
	}
	if args != nil {
		spec["args"] = args
	}
	return r
}

// webMetric is the metric "up", asking a web endpoint.
func webMetric() map[string]any {
	return map[string]any{"name": "up", "provider": map[string]any{"web": map[string]any{"url": "http://127.0.0.1:1/{{args.token}}"}}}
}

func prometheusMetric(name string) map[string]any {
	return map[string]any{"name": name, "provider": map[string]any{"prometheus": map[string]any{"address": "http://127.0.0.1:1", "query": "up"}}}
}

// jobMetric runs a Pod: what the shipped setting keeps from kargo-latch.
func jobMetric(name string) map[string]any {
	return map[string]any{"name": name, "provider": map[string]any{"job": map[string]any{"spec": map[string]any{
		"backoffLimit": int64(0),
		"template": map[string]any{"spec": map[string]any{
			"restartPolicy": "Never",
			"containers":    []any{map[string]any{"name": "check", "image": "registry.example.com/anything:latest", "command": []any{"sh", "-c", "true"}}},
		}},
	}}}}
}

func secretArg(name, secret string) map[string]any {
	return map[string]any{"name": name, "valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": secret, "key": "token"}}}
}

// TestVerifyOnLatchGuardSetting: with the component's shipped setting, the
// operator may create a run whose metrics use web or prometheus and whose
// args are values or read the run's own fields, but not a run with a job
// metric (even one among allowed ones, even dry-run), nor one with an arg
// read from a Secret: each is refused with a message naming the metric or
// the arg and the setting. Widened on the ServiceAccount (live, as
// `kubectl annotate` or an overlay's patch would), job and the Secret named
// pass, and a provider left out of the list no longer does; "*" lets
// anything through; without the annotations, the shipped setting applies.
func TestVerifyOnLatchGuardSetting(t *testing.T) {
	t.Parallel()
	f := setUpVerifyOnLatchGuard(t)
	sa, err := env.kube.CoreV1().ServiceAccounts(f.ns).Get(ctx, f.sa, metav1.GetOptions{})
	must(t, err)
	if got := sa.Annotations[providersSetting]; got != shippedProviders {
		t.Errorf("the component's ServiceAccount allows the providers %q, want %q", got, shippedProviders)
	}
	if got, ok := sa.Annotations[secretArgsSetting]; !ok || got != "" {
		t.Errorf("the component's ServiceAccount allows the Secrets %q (set: %v), want none", got, ok)
	}

	fieldArg := map[string]any{"name": "stage", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.labels['kargo.akuity.io/stage']"}}}
	valueArg := map[string]any{"name": "token", "value": "plain"}
	inside := withMetrics("test.latch-inside0000001.abc123", []any{webMetric(), prometheusMetric("errors")}, []any{valueArg, fieldArg})
	f.create(t, "a run inside the shipped setting", inside)

	setting := func(providers, secrets any) {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
			providersSetting: providers, secretArgsSetting: secrets,
		}}})
		_, err := env.kube.CoreV1().ServiceAccounts(f.ns).Patch(ctx, f.sa, types.MergePatchType, b, metav1.PatchOptions{})
		must(t, err)
	}
	refused := func(what string, run *unstructured.Unstructured, wants ...string) {
		t.Helper()
		_, err := f.asOperator.Create(ctx, run, dryRunCreate)
		if !deniedBy(err, f.guard) {
			t.Errorf("creating %s: %v, want refused by %s", what, err, f.guard)
			return
		}
		for _, want := range wants {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("creating %s: the refusal %q does not say %q", what, err, want)
			}
		}
	}
	// The guard reads its param from a cache of the API server's own:
	// a change of the setting shows after a moment.
	passes := func(what string, run *unstructured.Unstructured) {
		t.Helper()
		waitFor(t, "the guard to let the operator create "+what, func() bool {
			_, err := f.asOperator.Create(ctx, run, dryRunCreate)
			return err == nil
		})
	}
	job := withMetrics("test.latch-job00000000001.abc123", []any{webMetric(), jobMetric("smoke")}, nil)
	dryRunJob := withMetrics("test.latch-job00000000002.abc123", []any{webMetric(), jobMetric("smoke")}, nil)
	dryRunJob.Object["spec"].(map[string]any)["dryRun"] = []any{map[string]any{"metricName": "smoke"}}
	secret := withMetrics("test.latch-secret00000001.abc123", []any{webMetric()}, []any{secretArg("token", "db-creds")})
	otherSecret := withMetrics("test.latch-secret00000002.abc123", []any{webMetric()}, []any{secretArg("token", "admin-creds")})
	prometheus := withMetrics("test.latch-prom0000000001.abc123", []any{prometheusMetric("errors")}, nil)

	// The shipped setting, as the component builds it.
	refused("a run with a job metric", job, "smoke (job)", providersSetting, f.ns+"/"+f.sa, "verifyOnLatch.metricProviders")
	refused("a run with a dry-run job metric", dryRunJob, "smoke (job)")
	refused("a run with an arg from a Secret", secret, "token (Secret db-creds)", secretArgsSetting, "verifyOnLatch.secretArgs")
	if _, err := f.asOperator.Create(ctx, job, metav1.CreateOptions{}); !deniedWith(err, f.guard, "kargo-latch may create only AnalysisRuns whose metrics use the providers its install allows") {
		t.Errorf("creating a run with a job metric: %v, want refused by %s", err, f.guard)
	}

	// Widened to job and one Secret, and narrowed to web.
	setting("web,job", "db-creds")
	passes("a run with a job metric once the setting allows job", job)
	passes("a run with an arg from an allowed Secret", secret)
	refused("a run with an arg from another Secret", otherSecret, "token (Secret admin-creds)")
	refused("a run with a prometheus metric once the setting leaves it out", prometheus, "errors (prometheus)")

	// Anything.
	setting("*", "*")
	passes("a run with a prometheus metric once the setting allows any", prometheus)
	passes("a run with an arg from any Secret once the setting allows any", otherSecret)

	// Nothing ("" is none).
	setting("", "")
	web := withMetrics("test.latch-none000000001.abc123", []any{webMetric()}, nil)
	waitDeniedBy(t, "the guard to refuse a web metric once the setting allows none", f.guard, func() error {
		_, err := f.asOperator.Create(ctx, web, dryRunCreate)
		return err
	})
	refused("a run with a web metric once the setting allows none", web, "allows (none)")

	// Without the annotations: the shipped setting.
	setting(nil, nil)
	again := inside.DeepCopy()
	again.SetName("test.latch-inside0000002.abc123")
	passes("a run with web and prometheus metrics without the setting", again)
	refused("a run with a job metric without the setting", job, "smoke (job)")
	refused("a run with an arg from a Secret without the setting", secret, "token (Secret db-creds)")
}

// TestChartVerifyOnLatchSetting: with verifyOnLatch.installRights the chart
// puts the setting on the operator's ServiceAccount, as the component does:
// the shipped one by default (also after a `helm upgrade --reuse-values`
// from a chart without the values), the values' one when set, beside
// controller.annotations; a value that is no name is refused.
func TestChartVerifyOnLatchSetting(t *testing.T) {
	t.Parallel()
	annotations := func(sets ...string) map[string]string {
		t.Helper()
		for _, o := range renderChart(t, "kargo-latch", "kargo-latch", setFlags(append([]string{"verifyOnLatch.installRights=true"}, sets...))...) {
			if o.GetKind() == "ServiceAccount" {
				return o.GetAnnotations()
			}
		}
		t.Fatal("the chart renders no ServiceAccount")
		return nil
	}
	for what, tc := range map[string]struct {
		sets []string
		want map[string]string
	}{
		"by default": {nil, map[string]string{providersSetting: shippedProviders, secretArgsSetting: ""}},
		"without the values (--reuse-values)": {[]string{"verifyOnLatch.metricProviders=null", "verifyOnLatch.secretArgs=null"},
			map[string]string{providersSetting: shippedProviders, secretArgsSetting: ""}},
		"widened": {[]string{"verifyOnLatch.metricProviders={web,job}", "verifyOnLatch.secretArgs={db-creds,api-token}", "controller.annotations.e2e=x"},
			map[string]string{providersSetting: "web,job", secretArgsSetting: "db-creds,api-token", "e2e": "x"}}, //nolint:gosec // Secret names in a setting, not credentials
		"any": {[]string{"verifyOnLatch.metricProviders={*}", "verifyOnLatch.secretArgs={*}"},
			map[string]string{providersSetting: "*", secretArgsSetting: "*"}},
	} {
		if got := annotations(tc.sets...); !maps.Equal(got, tc.want) {
			t.Errorf("the chart %s annotates the ServiceAccount %v, want %v", what, got, tc.want)
		}
	}
	for _, bad := range []string{"verifyOnLatch.metricProviders={web job}", "verifyOnLatch.secretArgs={a'b}", "verifyOnLatch.metricProviders=web"} {
		out, err := helmCommand(t.TempDir(), "template", "kargo-latch", filepath.Join(env.cluster.Root, chartPath),
			"--namespace", "kargo-latch", "--set", "verifyOnLatch.installRights=true", "--set", bad).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "verifyOnLatch.") {
			t.Errorf("helm template with %s: %v %s; want refused", bad, err, out)
		}
	}
	// Without the rights, no setting.
	for _, o := range renderChart(t, "kargo-latch", "kargo-latch") {
		if o.GetKind() == "ServiceAccount" && len(o.GetAnnotations()) != 0 {
			t.Errorf("the chart without verify-on-latch annotates the ServiceAccount %v", o.GetAnnotations())
		}
	}
}
