package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/cluster"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// The chart's tests: it renders what the kustomize install builds, every
// object it renders passes the apiserver's validation, and an install from
// it pauses a Stage. `make chart` lints it.

const chartPath = "charts/kargo-latch"

// componentToggles are the chart values that stand for each kustomize
// component, added to manifests/default. Each component must have one.
var componentToggles = map[string][]string{
	"gate-people":                          {"pauseGate.people.enabled=true"},
	"resume-requires-projectconfig-update": {"resumeRequiresProjectConfigUpdate.enabled=true"},
	"mark-verified":                        {"markVerified.installRights=true"},
	"monitoring":                           {"controller.metrics.serviceMonitor.enabled=true", "prometheusRule.enabled=true"},
	"grafana-dashboard":                    {"grafanaDashboard.enabled=true"},
	"requested-by":                         {"pauseGate.requestedBy.enabled=true"},
}

// exampleValues are the chart values that render each kustomize example of
// manifests/examples, a whole install. Each example must have them.
var exampleValues = map[string][]string{
	"shards":            {"controller.shards={eu}"},
	"shards-monitoring": {"controller.shards={eu}", "controller.metrics.serviceMonitor.enabled=true", "prometheusRule.enabled=true"},
}

// TestChartRendersTheKustomizeInstall: `helm template` with the default
// values renders the objects `kubectl kustomize manifests/default` builds,
// and with each opt-in toggle, those of manifests/default plus the
// component; with the pause gate off, those of manifests/base; and with
// the values of each example of manifests/examples, that example. The
// comparison is of parsed objects, with three differences allowed and no
// other:
//   - the kustomize install's Namespace is not rendered: `helm install
//     --create-namespace` makes it (a chart that renders its own namespace
//     cannot be installed into it);
//   - Helm's standard labels (helm.sh/chart, app.kubernetes.io/{name,
//     instance,version,managed-by}) and the CRD's helm.sh/resource-policy
//     annotation, wherever the kustomize object lacks them: in metadata,
//     and in the Deployment's and Service's selectors (the release label);
//   - whitespace within a CEL expression (expression, messageExpression):
//     kustomize's YAML parser keeps one more line break than Helm's (and
//     the apiserver's) where a folded scalar (>-) has a more-indented line.
func TestChartRendersTheKustomizeInstall(t *testing.T) {
	t.Parallel()
	root := filepath.Join(env.cluster.Root, "manifests")
	type install struct {
		kustomize string   // the kustomization
		sets      []string // the chart's values that match it
	}
	cases := map[string]install{
		"default":        {kustomize: filepath.Join(root, "default")},
		"pause gate off": {kustomize: filepath.Join(root, "base"), sets: []string{"pauseGate.enabled=false"}},
	}
	components, err := filepath.Glob(filepath.Join(root, "components", "*"))
	must(t, err)
	for _, c := range components {
		name := filepath.Base(c)
		if partOfDefault[name] {
			continue
		}
		sets, ok := componentToggles[name]
		if !ok {
			t.Errorf("the kustomize component %s has no toggle in the chart (componentToggles)", name)
			continue
		}
		cases["default+"+name] = install{overlay(t, filepath.Join(root, "default"), c), sets}
	}
	examples, err := filepath.Glob(filepath.Join(root, "examples", "*"))
	must(t, err)
	if len(examples) == 0 {
		t.Error("found no example in manifests/examples")
	}
	for _, e := range examples {
		name := filepath.Base(e)
		sets, ok := exampleValues[name]
		if !ok {
			t.Errorf("the kustomize example %s has no chart values (exampleValues)", name)
			continue
		}
		cases["example "+name] = install{e, sets}
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			want, err := cluster.Kustomize(tc.kustomize)
			must(t, err)
			got := renderChart(t, "kargo-latch", "kargo-latch", append(setFlags(tc.sets), "--api-versions", mutatingPolicyAPI)...)
			compareInstalls(t, got, want)
		})
	}
	// A cluster without MutatingAdmissionPolicy (Kubernetes before 1.36):
	// the chart's defaults are still plain manifests/default, which holds
	// no mutating policy either (the requester mark is opt-in on both).
	t.Run("default on Kubernetes 1.30", func(t *testing.T) {
		want, err := cluster.Kustomize(filepath.Join(root, "default"))
		must(t, err)
		got := renderChart(t, "kargo-latch", "kargo-latch", "--kube-version", "1.30.0")
		compareInstalls(t, got, want)
		for _, o := range want {
			if strings.HasPrefix(o.GetKind(), "MutatingAdmissionPolicy") {
				t.Errorf("manifests/default holds %s %s, which Kubernetes before 1.36 does not know", o.GetKind(), o.GetName())
			}
		}
	})
}

// partOfDefault are the kustomize components manifests/default includes.
var partOfDefault = map[string]bool{"pause-gate": true, "kargo-controllers": true}

// overlay writes a kustomization of base plus component, and returns its
// directory.
func overlay(t *testing.T, base, component string) string {
	t.Helper()
	dir := t.TempDir()
	b, err := filepath.Rel(dir, base)
	must(t, err)
	c, err := filepath.Rel(dir, component)
	must(t, err)
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [" + jsonString(b) +
		"]\ncomponents: [" + jsonString(c) + "]\n"
	must(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600))
	return dir
}

// helmOnly are the keys Helm adds that the kustomize install may lack.
var helmOnly = map[string]bool{
	"helm.sh/chart":                true,
	"app.kubernetes.io/name":       true,
	"app.kubernetes.io/instance":   true,
	"app.kubernetes.io/version":    true,
	"app.kubernetes.io/managed-by": true,
	"helm.sh/resource-policy":      true,
}

// celKeys hold CEL expressions in admission policies.
var celKeys = map[string]bool{"expression": true, "messageExpression": true}

// compareInstalls reports every object only one side has, and every
// difference of the objects both have, after the allowed differences.
func compareInstalls(t *testing.T, rendered, built []*unstructured.Unstructured) {
	t.Helper()
	byKey := func(objs []*unstructured.Unstructured) map[string]map[string]any {
		m := map[string]map[string]any{}
		for _, o := range objs {
			if o.GetKind() == "Namespace" {
				continue // made by `helm install --create-namespace`
			}
			m[o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName()] = canonical(t, o)
		}
		return m
	}
	got, want := byKey(rendered), byKey(built)
	for key, w := range want {
		g, ok := got[key]
		if !ok {
			t.Errorf("the chart does not render %s", key)
			continue
		}
		dropHelmOnly(g, w)
		if diff := cmp.Diff(w, g); diff != "" {
			t.Errorf("%s differs (-kustomize +helm):\n%s", key, diff)
		}
	}
	for key := range got {
		if _, ok := want[key]; !ok {
			t.Errorf("the chart renders %s, which kustomize does not build", key)
		}
	}
}

// canonical is an object as JSON decodes it (integers as int64), whichever
// YAML it was read from.
func canonical(t *testing.T, o *unstructured.Unstructured) map[string]any {
	t.Helper()
	b, err := json.Marshal(o.Object)
	must(t, err)
	u := &unstructured.Unstructured{}
	must(t, u.UnmarshalJSON(b))
	return u.Object
}

// dropHelmOnly removes from got, recursively, the helmOnly keys that want
// lacks at the same place, and the maps that held nothing else; and takes
// want's CEL expressions where got's differ only in whitespace.
func dropHelmOnly(got, want map[string]any) {
	for k, v := range got {
		w, inWant := want[k]
		if helmOnly[k] && !inWant {
			delete(got, k)
			continue
		}
		switch v := v.(type) {
		case string:
			if ws, ok := w.(string); ok && celKeys[k] && strings.Join(strings.Fields(v), " ") == strings.Join(strings.Fields(ws), " ") {
				got[k] = ws
			}
		case map[string]any:
			wm, _ := w.(map[string]any)
			dropHelmOnly(v, wm)
			if len(v) == 0 && !inWant {
				delete(got, k)
			}
		case []any:
			wl, _ := w.([]any)
			for i := range min(len(v), len(wl)) {
				gm, ok1 := v[i].(map[string]any)
				wm, ok2 := wl[i].(map[string]any)
				if ok1 && ok2 {
					dropHelmOnly(gm, wm)
				}
			}
		}
	}
}

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
		"PrometheusRule": 1, "ConfigMap": 1, "ValidatingAdmissionPolicy": 7, "ValidatingAdmissionPolicyBinding": 7,
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

// operatorFlagDefaults are the chart values that set an operator flag,
// which must default to that flag's default.
var operatorFlagDefaults = map[string]string{
	"controller.logLevel":                     "v",
	"controller.workers":                      "workers",
	"controller.kubeApiQPS":                   "kube-api-qps",
	"controller.kubeApiBurst":                 "kube-api-burst",
	"controller.newFailureWindow":             "new-failure-window",
	"controller.stageDefaults.pauseOnFailure": "pause-on-failure",
	"controller.stageDefaults.latchDeadline":  "latch-deadline",
	"controller.stageDefaults.degradedGrace":  "degraded-grace",
	"controller.stageDefaults.drainOnPause":   "drain-on-pause",
	"controller.stageDefaults.markVerified":   "mark-verified",
}

// TestChartDefaultsAreTheOperatorDefaults: each setting's default in the
// chart's values.yaml is the operator's own flag default, as its -help
// prints it. (The chart passes a flag only when its value differs, so a
// default that drifted would silently not apply.)
func TestChartDefaultsAreTheOperatorDefaults(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(buildOperator(t), "-help").CombinedOutput()
	if err != nil {
		t.Fatalf("kargo-latch -help: %v\n%s", err, out)
	}
	defaults := flagDefaults(string(out))
	b, err := os.ReadFile(filepath.Join(env.cluster.Root, chartPath, "values.yaml"))
	must(t, err)
	var values map[string]any
	must(t, yaml.Unmarshal(b, &values))
	for key, flag := range operatorFlagDefaults {
		v, found, err := unstructured.NestedFieldNoCopy(values, strings.Split(key, ".")...)
		if !found || err != nil {
			t.Errorf("values.yaml has no %s", key)
			continue
		}
		def, ok := defaults[flag]
		if !ok {
			t.Errorf("kargo-latch has no flag --%s (for %s)", flag, key)
			continue
		}
		if !sameSetting(fmt.Sprint(v), def) {
			t.Errorf("%s defaults to %v in values.yaml, --%s to %q in kargo-latch", key, v, flag, def)
		}
	}
}

// flagDefaults reads each flag's default from Go's flag -help output; a
// flag whose default is its type's zero value has none printed.
func flagDefaults(help string) map[string]string {
	defaults := map[string]string{}
	var name, kind string
	sc := bufio.NewScanner(strings.NewReader(help))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "  -") {
			fields := strings.Fields(line)
			name, kind = strings.TrimPrefix(fields[0], "-"), ""
			if len(fields) > 1 {
				kind = fields[1]
			}
			defaults[name] = map[string]string{"": "false", "duration": "0s", "int": "0", "float": "0", "value": "0"}[kind]
			continue
		}
		if _, def, ok := strings.Cut(line, "(default "); ok && name != "" {
			defaults[name] = strings.Trim(strings.TrimSuffix(strings.TrimSpace(def), ")"), `"`)
		}
	}
	return defaults
}

// sameSetting compares a chart value with a flag default as the operator
// parses them: durations as durations, numbers as numbers.
func sameSetting(value, def string) bool {
	if a, err := time.ParseDuration(value); err == nil {
		b, err := time.ParseDuration(def)
		return err == nil && a == b
	}
	if a, err := strconv.ParseFloat(value, 64); err == nil {
		b, err := strconv.ParseFloat(def, 64)
		return err == nil && a == b
	}
	return value == def
}

// TestHelmInstallPausesAStage installs kargo-latch from the chart, with
// pause-on-failure on by default, into a namespace of its own, then runs
// the binary of the image the Deployment names (`make image`'s), with the
// arguments and environment of the Deployment the chart made, as the
// ServiceAccount the chart made (no kubelet runs Pods here). A failed
// promotion pauses its Stage, and the chart's pause gate, keyed on the
// Kargo controller ServiceAccount given in the values (the value of before
// pauseGate.kargoControllers, which keeps working) and on the regex of
// pauseGate.kargoControllerRegex, refuses the auto-promotions of Kargo's
// controller and of a shard's to it. The install has no requester mark,
// which is opt-in, although the cluster serves MutatingAdmissionPolicy.
func TestHelmInstallPausesAStage(t *testing.T) {
	t.Parallel()
	releaseNS := env.newProject(t)
	project := env.newProject(t)
	// The release name holds the chart's, so it is every object's prefix.
	release := "kargo-latch-e2e-" + randomTag()

	// Kargo's controller, as this install's gate knows it: a ServiceAccount
	// of its own, so that only this install's gate can refuse it.
	_, err := env.kube.CoreV1().ServiceAccounts(releaseNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "kargo-controller"}}, metav1.CreateOptions{})
	must(t, err)
	kargoControllerUser := "system:serviceaccount:" + releaseNS + ":kargo-controller"
	must(t, applyObjects([]*unstructured.Unstructured{cluster.BindUser(release+"-kargo-controller", "e2e-kargo-controller", kargoControllerUser)}))
	t.Cleanup(func() {
		_ = env.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), release+"-kargo-controller", metav1.DeleteOptions{})
	})
	// A shard's controller, matched by this install's regex only.
	_, err = env.kube.CoreV1().ServiceAccounts(releaseNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "kargo-shard-eu"}}, metav1.CreateOptions{})
	must(t, err)
	must(t, applyObjects([]*unstructured.Unstructured{cluster.BindUser(release+"-kargo-shard", "e2e-kargo-controller", "system:serviceaccount:"+releaseNS+":kargo-shard-eu")}))
	t.Cleanup(func() {
		_ = env.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), release+"-kargo-shard", metav1.DeleteOptions{})
	})

	settings := []string{
		"controller.namespaces={" + project + "}",
		"controller.workers=2",
		"controller.kubeApiQPS=100",
		"controller.kubeApiBurst=200",
		"controller.logLevel=2",
		"controller.newFailureWindow=5m",
		"controller.stageDefaults.pauseOnFailure=true",
		"controller.stageDefaults.latchDeadline=1m",
		"controller.stageDefaults.degradedGrace=1m",
		"controller.stageDefaults.drainOnPause=false",
		"controller.stageDefaults.markVerified=true",
		"markVerified.installRights=true",
		"pauseGate.kargoControllerServiceAccount.namespace=" + releaseNS,
		"pauseGate.kargoControllerRegex=^system:serviceaccount:" + releaseNS + ":kargo-shard-[a-z]+$",
	}
	args := []string{"install", release, filepath.Join(env.cluster.Root, chartPath), "--namespace", releaseNS,
		// The shared test cluster has the CRD already, from the kustomize
		// install, and Helm adopts no object it did not make.
		"--set", "crds.install=false"}
	args = append(args, setFlags(settings)...)
	kubeconfig := writeKubeconfig(t, env.cluster.Config)
	home := t.TempDir()
	runHelm(t, home, append(args, "--kubeconfig", kubeconfig)...)
	t.Cleanup(func() {
		if out, err := helmCommand(home, "uninstall", release, "--namespace", releaseNS, "--kubeconfig", kubeconfig).CombinedOutput(); err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, out)
		}
	})

	deployment, err := env.kube.AppsV1().Deployments(releaseNS).Get(ctx, release, metav1.GetOptions{})
	must(t, err)
	deployed := deployment.Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{
		"--leader-elect", "--namespace=" + project, "--workers=2", "--kube-api-qps=100", "--kube-api-burst=200", "--v=2",
		"--new-failure-window=5m", "--pause-on-failure=true", "--latch-deadline=1m", "--degraded-grace=1m",
		"--drain-on-pause=false", "--mark-verified=true",
	} {
		if !slices.Contains(deployed, want) {
			t.Errorf("the Deployment's args %v lack %s", deployed, want)
		}
	}

	identity, err := env.cluster.ServiceAccountConfig(ctx, releaseNS, release)
	must(t, err)
	// Outside a Pod: the Lease's namespace is given, and the ports are
	// left to the tests that own them.
	p := newProcessAs(t, identity, append(slices.Clone(deployed),
		"--leader-election-namespace="+releaseNS, "--metrics-bind-address=0", "--health-probe-bind-address=0")...)
	runFromImage(t, p, deployment.Spec.Template.Spec.Containers[0])
	p.start()

	prod := env.createStage(t, project, "prod", nil)
	promoteAndLatch(t, prod)
	kargoController, err := env.cluster.ServiceAccountConfig(ctx, releaseNS, "kargo-controller")
	must(t, err)
	asKargo := dynamic.NewForConfigOrDie(kargoController)
	if _, err := driver.CreatePromotion(ctx, asKargo, project, "prod", ""); err != nil {
		t.Fatalf("Kargo's auto-promotion to the Stage before any failure: %v", err)
	}

	_, err = prod.FinishPromotion(ctx, "Failed")
	must(t, err)
	waitPaused(t, prod, true)
	pauses := env.listPauses(t, project)
	if len(pauses) != 1 {
		t.Fatalf("%d StagePauses after one failure, want 1", len(pauses))
	}
	if reason, _, _ := unstructured.NestedString(pauses[0].Object, "spec", "reason"); reason != string(latch.ReasonPromotionFailed) {
		t.Errorf("pause reason %q, want %s", reason, latch.ReasonPromotionFailed)
	}
	gate := release + "-pause-gate"
	var refused error
	waitFor(t, "the chart's pause gate to refuse Kargo's auto-promotion", func() bool {
		_, refused = driver.CreatePromotion(ctx, asKargo, project, "prod", "")
		return deniedBy(refused, gate)
	})
	if !strings.Contains(refused.Error(), pauses[0].GetName()) {
		t.Errorf("the gate's denial %q does not name the pause %s", refused, pauses[0].GetName())
	}
	shard, err := env.cluster.ServiceAccountConfig(ctx, releaseNS, "kargo-shard-eu")
	must(t, err)
	if _, err := driver.CreatePromotion(ctx, dynamic.NewForConfigOrDie(shard), project, "prod", ""); !deniedBy(err, gate) {
		t.Errorf("the shard's auto-promotion to the paused Stage: %v, want refused by %s", err, gate)
	}
	// The requester mark is opt-in: a cluster-wide mutating policy would
	// refuse Promotions with 503 for a moment after the API server starts.
	if _, err := env.dyn.Resource(admissionPolicies["MutatingAdmissionPolicy"]).Get(ctx, release+"-requested-by", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the chart's defaults installed the requester mark (%v), want it opt-in", err)
	}
	if p.exited() {
		t.Error("the operator exited")
	}
}

// renderChart runs `helm template` with more flags, and returns the
// objects it renders.
func renderChart(t *testing.T, release, namespace string, flags ...string) []*unstructured.Unstructured {
	t.Helper()
	args := append([]string{"template", release, filepath.Join(env.cluster.Root, chartPath), "--namespace", namespace}, flags...)
	out := runHelm(t, t.TempDir(), args...)
	f := filepath.Join(t.TempDir(), "rendered.yaml")
	must(t, os.WriteFile(f, out, 0o600))
	objs, err := cluster.ReadObjects(f)
	must(t, err)
	return objs
}

// runHelm runs bin/helm with home for its files and returns its standard
// output; it fails the test on an error.
func runHelm(t *testing.T, home string, args ...string) []byte {
	t.Helper()
	if _, err := os.Stat(helmBinary()); err != nil {
		t.Fatalf("%v: run `make chart`, which builds helm from Go modules into bin/", err)
	}
	cmd := helmCommand(home, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out
}

func helmBinary() string { return filepath.Join(env.cluster.Root, "bin", "helm") }

// helmCommand is bin/helm with its cache, configuration and data in home,
// out of the user's.
func helmCommand(home string, args ...string) *exec.Cmd {
	cmd := exec.Command(helmBinary(), args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	return cmd
}

// setFlags are helm's flags that set each value of sets ("key=value").
func setFlags(sets []string) []string {
	var flags []string
	for _, s := range sets {
		flags = append(flags, "--set", s)
	}
	return flags
}
