package e2e

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
)

// TestChartPassesServerSideDryRun: every object the chart renders with
// every opt-in on (ci/all-on-values.yaml) passes a dry-run create on the
// apiserver, CRDs first, with strict field validation. The release has a
// name and namespace of its own, so that its objects are new; the CRD,
// which the test cluster already has, is dry-run applied instead. The
// Prometheus Operator's kinds, whose CRDs the test cluster lacks, are
// checked here: the rules with promtool, the ServiceMonitor against the
// Services it selects.
func TestChartPassesServerSideDryRun(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	release := "kargo-latch-dry-" + randomTag()
	objs := renderChart(t, release, ns, "--values", filepath.Join(env.cluster.Root, chartPath, "ci", "all-on-values.yaml"),
		"--api-versions", mutatingPolicyAPI)
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int {
		return boolOrder(a.GetKind() != "CustomResourceDefinition", b.GetKind() != "CustomResourceDefinition")
	})
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(env.cluster.Config)))
	kinds := map[string]int{}
	var services []*unstructured.Unstructured
	for _, o := range objs {
		kinds[o.GetKind()]++
		switch o.GetKind() {
		case "PrometheusRule":
			checkPrometheusRule(t, o)
			continue
		case "ServiceMonitor":
			continue // checked below, against the Services
		case "Service":
			services = append(services, o)
		}
		gvk := o.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Errorf("%s %s: %v", gvk.Kind, o.GetName(), err)
			continue
		}
		r := env.dyn.Resource(mapping.Resource).Namespace(o.GetNamespace())
		_, err = r.Create(ctx, o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
		if apierrors.IsAlreadyExists(err) && o.GetKind() == "CustomResourceDefinition" {
			body, merr := json.Marshal(o.Object)
			must(t, merr)
			_, err = r.Patch(ctx, o.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{
				FieldManager: "e2e-dry-run", DryRun: []string{metav1.DryRunAll}, Force: ptrTo(true), FieldValidation: "Strict"})
		}
		if err != nil {
			t.Errorf("server-side dry run of %s %s/%s: %v", gvk.Kind, o.GetNamespace(), o.GetName(), err)
		}
	}
	for _, o := range objs {
		if o.GetKind() == "ServiceMonitor" {
			checkServiceMonitor(t, o, services)
		}
	}
	// Everything the opt-ins add is there to be checked: the operators and
	// metrics Services are the main one and those of the shards eu and us.
	for kind, want := range map[string]int{
		"CustomResourceDefinition": 1, "Deployment": 3, "Service": 3, "ServiceMonitor": 1,
		"PrometheusRule": 1, "ConfigMap": 2, "ValidatingAdmissionPolicy": 9, "ValidatingAdmissionPolicyBinding": 9,
		"MutatingAdmissionPolicy": 1, "MutatingAdmissionPolicyBinding": 1,
	} {
		if kinds[kind] != want {
			t.Errorf("rendered %d %s, want %d (all kinds: %v)", kinds[kind], kind, want, kinds)
		}
	}
}

func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	default:
		return 1
	}
}

// checkServiceMonitor: the ServiceMonitor selects every metrics Service
// (the main operator's and each shard's), in its namespace, by labels the
// Service has, and scrapes a port each names.
func checkServiceMonitor(t *testing.T, sm *unstructured.Unstructured, services []*unstructured.Unstructured) {
	t.Helper()
	if len(services) == 0 {
		t.Fatal("a ServiceMonitor without a metrics Service")
	}
	selector, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	for _, service := range services {
		if sm.GetNamespace() != service.GetNamespace() {
			t.Errorf("ServiceMonitor in %s, Service %s in %s", sm.GetNamespace(), service.GetName(), service.GetNamespace())
		}
		labels := service.GetLabels()
		for k, v := range selector {
			if labels[k] != v {
				t.Errorf("the ServiceMonitor selects %s=%s; the labels of Service %s are %v", k, v, service.GetName(), labels)
			}
		}
		ports, _, _ := unstructured.NestedSlice(service.Object, "spec", "ports")
		for _, e := range endpoints {
			port := e.(map[string]any)["port"]
			if !slices.ContainsFunc(ports, func(p any) bool { return p.(map[string]any)["name"] == port }) {
				t.Errorf("the ServiceMonitor scrapes port %v; the ports of Service %s are %v", port, service.GetName(), ports)
			}
		}
	}
}
