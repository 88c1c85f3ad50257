package e2e

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kargo-latch/kargo-latch/test/driver"
)

// The chart's shards (controller.shards): one operator Deployment per
// Kargo shard beside the main one. The kustomize comparison holds
// `controller.shards={eu}` to manifests/examples/shards, and the
// server-side dry run covers ci/all-on-values.yaml's shards; these tests
// hold what neither shows.

// TestChartDeploysOneOperatorPerShard: each shard gets an operator that
// runs --shard=<shard> and is otherwise the main one, unless the shard
// sets its own settings; the main operator runs --default-shard. No
// Deployment's selector matches another's pods, and each metrics Service
// selects the pods of exactly one operator.
func TestChartDeploysOneOperatorPerShard(t *testing.T) {
	t.Parallel()
	// 7 is read as a number, and is a shard name all the same.
	values := `
controller:
  labels: {team: platform}
  args: [--cache-sync-timeout=5m]
  shards:
  - eu
  - name: us
    replicas: 3
    workers: 16
    args: [--cache-sync-timeout=10m]
    resources: {limits: {memory: 1Gi}}
  - 7
`
	objs := renderChart(t, "kargo-latch", "kargo-latch", "--values", writeValues(t, values))
	deployments := map[string]*appsv1.Deployment{}
	var services []*corev1.Service
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment":
			d := &appsv1.Deployment{}
			fromUnstructured(t, o, d)
			deployments[d.Name] = d
		case "Service":
			s := &corev1.Service{}
			fromUnstructured(t, o, s)
			services = append(services, s)
		}
	}
	names := slices.Sorted(maps.Keys(deployments))
	if want := []string{"kargo-latch", "kargo-latch-7", "kargo-latch-eu", "kargo-latch-us"}; !slices.Equal(names, want) {
		t.Fatalf("Deployments %v, want %v", names, want)
	}

	mainOperator := deployments["kargo-latch"]
	if args := mainOperator.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--default-shard") || slices.ContainsFunc(args, isShardFlag) {
		t.Errorf("the main operator's args %v: want --default-shard and no --shard", args)
	}
	for shard, name := range map[string]string{"eu": "kargo-latch-eu", "us": "kargo-latch-us", "7": "kargo-latch-7"} {
		d := deployments[name]
		args := d.Spec.Template.Spec.Containers[0].Args
		if got := slices.DeleteFunc(slices.Clone(args), func(a string) bool { return !isShardFlag(a) }); !slices.Equal(got, []string{"--shard=" + shard}) {
			t.Errorf("%s's shard flags are %v, want --shard=%s", name, got, shard)
		}
		if slices.Contains(args, "--default-shard") {
			t.Errorf("%s's args %v hold --default-shard", name, args)
		}
		if d.Labels["kargo-latch.io/shard"] != shard || d.Labels["team"] != "platform" {
			t.Errorf("%s's labels %v: want kargo-latch.io/shard=%s and controller.labels", name, d.Labels, shard)
		}
	}

	// A shard without settings of its own is the main operator but for
	// its flag and its pods' labels.
	for _, name := range []string{"kargo-latch-eu", "kargo-latch-7"} {
		shard := deployments[name].Spec.Template.Spec.DeepCopy()
		args := shard.Containers[0].Args
		args[slices.IndexFunc(args, isShardFlag)] = "--default-shard"
		if diff := cmp.Diff(mainOperator.Spec.Template.Spec, *shard); diff != "" {
			t.Errorf("%s's pod spec differs from the main operator's beyond --shard (-main +shard):\n%s", name, diff)
		}
		if *deployments[name].Spec.Replicas != *mainOperator.Spec.Replicas {
			t.Errorf("%s has %d replicas, the main operator %d", name, *deployments[name].Spec.Replicas, *mainOperator.Spec.Replicas)
		}
	}
	us := deployments["kargo-latch-us"]
	usArgs := us.Spec.Template.Spec.Containers[0].Args
	if *us.Spec.Replicas != 3 || !slices.Contains(usArgs, "--workers=16") || !slices.Contains(usArgs, "--cache-sync-timeout=10m") ||
		slices.Contains(usArgs, "--cache-sync-timeout=5m") {
		t.Errorf("kargo-latch-us: %d replicas, args %v; want its own 3 replicas, --workers=16, and its args instead of controller.args", *us.Spec.Replicas, usArgs)
	}
	if got := us.Spec.Template.Spec.Containers[0].Resources; got.Limits.Memory().String() != "1Gi" || len(got.Limits) != 1 || len(got.Requests) != 0 {
		t.Errorf("kargo-latch-us's resources %v, want its own, whole: limits.memory 1Gi only", got)
	}
	for name, d := range deployments {
		if d.Spec.Template.Spec.ServiceAccountName != mainOperator.Spec.Template.Spec.ServiceAccountName {
			t.Errorf("%s runs as %s, the main operator as %s", name, d.Spec.Template.Spec.ServiceAccountName, mainOperator.Spec.Template.Spec.ServiceAccountName)
		}
	}

	// Selectors: each Deployment's matches its own pods and no other's
	// (overlapping Deployments would fight over, and kubectl logs and
	// rollout would mix up, their pods); each metrics Service, one
	// operator's pods.
	for name, d := range deployments {
		selector, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		must(t, err)
		for other, o := range deployments {
			if matches := selector.Matches(labels.Set(o.Spec.Template.Labels)); matches != (other == name) {
				t.Errorf("%s's selector %v matches the pods of %s: %v", name, selector, other, matches)
			}
		}
	}
	if len(services) != len(deployments) {
		t.Errorf("%d metrics Services for %d operators", len(services), len(deployments))
	}
	selected := map[string]string{}
	for _, s := range services {
		var pods []string
		for name, d := range deployments {
			if labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
				pods = append(pods, name)
			}
		}
		if len(pods) != 1 {
			t.Errorf("Service %s selects the pods of %v, want one operator's", s.Name, pods)
			continue
		}
		if s.Name != pods[0]+"-metrics" {
			t.Errorf("Service %s selects the pods of %s", s.Name, pods[0])
		}
		selected[pods[0]] = s.Name
	}
	for name := range deployments {
		if _, ok := selected[name]; !ok {
			t.Errorf("no metrics Service selects the pods of %s", name)
		}
	}
}

// TestChartRefusesBadShards: values that would deploy a shard no Stage can
// name, a shard that the operator refuses, a shard twice, or operators
// sharing one Lease, fail the rendering with a message that says why.
func TestChartRefusesBadShards(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ values, want string }{
		"not a label value":      {`{controller: {shards: ["eu west"]}}`, `"eu west" is not a valid label value`},
		"past 63 characters":     {`{controller: {shards: ["` + strings.Repeat("a", 64) + `"]}}`, "is not a valid label value"},
		"not a DNS label":        {`{controller: {shards: [EU_1]}}`, "may hold only lowercase letters, digits and '-'"},
		"default":                {`{controller: {shards: [default]}}`, `"default" cannot be a shard`},
		"twice":                  {`{controller: {shards: [eu, {name: eu, replicas: 1}]}}`, `controller.shards[1]: shard "eu" is listed twice`},
		"no name":                {`{controller: {shards: [{replicas: 1}]}}`, "controller.shards[0] has no name"},
		"unknown setting":        {`{controller: {shards: [{name: eu, replica: 3}]}}`, "not replica"},
		"names past 63":          {`{controller: {shards: [` + strings.Repeat("a", 50) + `]}}`, "is longer than 63 characters"},
		"a Lease for all":        {`{controller: {args: [--leader-election-id=mine], shards: [eu]}}`, "controller.args holds --leader-election-id=mine"},
		"a shard flag in args":   {`{controller: {shards: [{name: eu, args: [--shard=us]}]}}`, "the chart sets --shard and --default-shard itself"},
		"replicas with no Lease": {`{controller: {replicas: 1, leaderElection: {enabled: false}, shards: [{name: eu, replicas: 2}]}}`, "controller.shards[0].replicas above 1 needs controller.leaderElection.enabled"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out, err := helmCommand(t.TempDir(), "template", "kargo-latch", filepath.Join(env.cluster.Root, chartPath),
				"--namespace", "kargo-latch", "--values", writeValues(t, tc.values)).CombinedOutput()
			if err == nil {
				t.Fatalf("rendered; want the error %q", tc.want)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("helm template: %s; want %q", out, tc.want)
			}
		})
	}
}

// TestHelmInstallRunsOneOperatorPerShard installs the chart with the shard
// eu, then runs the image's binary with the arguments of each Deployment
// the chart made, as the chart's ServiceAccount (no kubelet runs Pods here).
// Each operator leads with a Lease of its own and serves only its Stages:
// the shard's those labelled eu, the main one those without the label. A
// failure pauses a Stage of either.
func TestHelmInstallRunsOneOperatorPerShard(t *testing.T) {
	t.Parallel()
	releaseNS := env.newProject(t)
	project := env.newProject(t)
	release := "kargo-latch-shards-" + randomTag()
	kubeconfig := writeKubeconfig(t, env.cluster.Config)
	home := t.TempDir()
	runHelm(t, home, "install", release, filepath.Join(env.cluster.Root, chartPath), "--namespace", releaseNS,
		"--kubeconfig", kubeconfig,
		// The shared test cluster has the CRD already; the pause gate is
		// TestHelmInstallPausesAStage's.
		"--set", "crds.install=false", "--set", "pauseGate.enabled=false",
		"--set", "controller.namespaces={"+project+"}",
		"--set", "controller.stageDefaults.pauseOnFailure=true",
		"--set", "controller.shards={eu}")
	t.Cleanup(func() {
		if out, err := helmCommand(home, "uninstall", release, "--namespace", releaseNS, "--kubeconfig", kubeconfig).CombinedOutput(); err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, out)
		}
	})

	identity, err := env.cluster.ServiceAccountConfig(ctx, releaseNS, release)
	must(t, err)
	operators := map[string]*process{} // by Deployment
	for _, name := range []string{release, release + "-eu"} {
		d, err := env.kube.AppsV1().Deployments(releaseNS).Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		// Outside a Pod: the Lease's namespace is given; the metrics are
		// served on loopback, where the test reads them.
		p := newMeteredProcess(t, identity, append(slices.Clone(d.Spec.Template.Spec.Containers[0].Args),
			"--leader-election-namespace="+releaseNS, "--health-probe-bind-address=0")...)
		runFromImage(t, p, d.Namespace, d.Spec.Template.Spec.Containers[0])
		p.start()
		operators[name] = p
	}

	unlabelled := env.createStage(t, project, "prod", nil)
	eu, err := env.kargo.CreateStage(ctx, project, "prod-eu", nil, driver.WithShard("eu"))
	must(t, err)
	for _, s := range []*driver.Stage{unlabelled, eu} {
		promoteAndLatch(t, s)
		_, err := s.FinishPromotion(ctx, "Failed")
		must(t, err)
	}
	waitPaused(t, unlabelled, true)
	waitPaused(t, eu, true)

	// One Lease per operator, held by each.
	holders := map[string]string{}
	for _, lease := range []string{"kargo-latch", "kargo-latch-eu"} {
		waitFor(t, "the Lease "+lease+" to be held", func() bool {
			l, err := env.kube.CoordinationV1().Leases(releaseNS).Get(ctx, lease, metav1.GetOptions{})
			if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
				return false
			}
			holders[lease] = *l.Spec.HolderIdentity
			return true
		})
	}
	if holders["kargo-latch"] == holders["kargo-latch-eu"] {
		t.Errorf("both Leases are held by %s", holders["kargo-latch"])
	}

	// Each operator exports the per-Stage gauges of the Stages its caches
	// hold: its own only.
	for name, want := range map[string]string{release: "prod", release + "-eu": "prod-eu"} {
		if got := stagesExported(scrape(t, string(operators[name].metrics)), project); !slices.Equal(got, []string{want}) {
			t.Errorf("the operator of %s exports the Stages %v, want only %s", name, got, want)
		}
	}
	for name, p := range operators {
		if p.exited() {
			t.Errorf("the operator of %s exited", name)
		}
	}
}

// stagesExported are the Stages of project with a kargo_latch_stage_phase
// series, sorted.
func stagesExported(mfs map[string]*dto.MetricFamily, project string) []string {
	var stages []string
	for _, m := range mfs["kargo_latch_stage_phase"].GetMetric() {
		var inProject bool
		var stage string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "project":
				inProject = l.GetValue() == project
			case "stage":
				stage = l.GetValue()
			}
		}
		if inProject && !slices.Contains(stages, stage) {
			stages = append(stages, stage)
		}
	}
	slices.Sort(stages)
	return stages
}

func isShardFlag(arg string) bool { return strings.HasPrefix(arg, "--shard=") }

// writeValues writes a values file for helm, and returns its path.
func writeValues(t *testing.T, values string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	must(t, os.WriteFile(f, []byte(values), 0o600))
	return f
}

func fromUnstructured(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	must(t, runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, into, true))
}
