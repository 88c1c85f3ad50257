package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kargo-latch/kargo-latch/hack/image/ociimage"
	"github.com/kargo-latch/kargo-latch/test/cluster"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// runOnNode is DEMO_NODE=1: the same stories, with kargo-latch installed by
// helm from the chart and running as the Deployment's two Pods on a real
// node (kubelet, containerd, runc, the CNI bridge), of the image pushed to
// a registry on loopback. The demo reads each Pod's metrics at its Pod IP.
func runOnNode(ctx context.Context) error {
	say("Starting a local kube-apiserver, etcd, kube-controller-manager, kube-scheduler and a node (kubelet + containerd)")
	c, n, err := cluster.StartWithNode(ctx, cluster.Options{
		Log:    func(f string, a ...any) { say("  "+f, a...) },
		Tokens: demoTokens(),
	})
	if err != nil {
		return err
	}
	defer c.Stop()
	defer n.Stop()
	say("Starting Argo Rollouts' analysis controller v1.10.2 (bin/rollouts-controller --controllers analysis) with its CRDs")
	rollouts, err := c.StartRollouts(ctx, cluster.RolloutsOptions{})
	if err != nil {
		return err
	}
	defer rollouts.Stop()
	metric := driver.NewMetricServer()
	defer metric.Close()
	d, err := setUpOnNode(ctx, c, n)
	if err != nil {
		return err
	}
	d.rollouts, d.metric = rollouts, metric
	if err := d.play(ctx); err != nil {
		for _, r := range d.replicas {
			fmt.Fprintf(os.Stderr, "last lines of Pod %s's log:\n%s\n", r.name, podLog(d.kube, r.name, 30))
		}
		fmt.Fprintf(os.Stderr, "last lines of Argo Rollouts' log:\n%s\n", tail(rollouts.Log, 20))
		return err
	}
	if os.Getenv("DEMO_KEEP") != "" {
		say("")
		say("The node keeps running: kubectl get pods -n kargo-latch -o wide; kubectl logs -n kargo-latch <pod>")
		return d.keep(ctx)
	}
	return nil
}

func setUpOnNode(ctx context.Context, c *cluster.Cluster, n *cluster.Node) (*demo, error) {
	d := &demo{
		cluster: c,
		admin:   dynamic.NewForConfigOrDie(c.Config),
		kube:    kubernetes.NewForConfigOrDie(c.Config),
		kargo:   dynamic.NewForConfigOrDie(c.UserConfig(kargoToken)),
		dev:     dynamic.NewForConfigOrDie(c.UserConfig(devToken)),
		lead:    dynamic.NewForConfigOrDie(c.UserConfig(leadToken)),
	}
	layout, cleanup, err := ociimage.LayoutForTests(ctx, c.Root)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	idx, _, err := ociimage.ReadLayout(layout)
	if err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	repository, tag := n.Registry+"/kargo-latch", m.Annotations[ociimage.VersionLabel]
	if _, err := ociimage.Push(ctx, layout, repository+":"+tag, true); err != nil {
		return nil, err
	}
	say("  pushed the image to the registry on loopback: %s:%s", repository, tag)

	objs := append(demoRBAC(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": project, "labels": map[string]any{"kargo.akuity.io/project": "true"}},
	}})
	if err := cluster.Apply(ctx, c.Config, objs...); err != nil {
		return nil, err
	}
	for who, token := range map[*string]string{&d.adminKubeconfig: cluster.AdminToken, &d.devKubeconfig: devToken, &d.leadKubeconfig: leadToken} {
		*who = filepath.Join(c.Dir, "kubeconfig-"+token)
		if err := cluster.WriteKubeconfig(*who, c.UserConfig(token), project); err != nil {
			return nil, err
		}
	}
	helm := exec.CommandContext(ctx, filepath.Join(c.Root, "bin", "helm"), "install", "kargo-latch", filepath.Join(c.Root, "charts", "kargo-latch"),
		"--namespace", "kargo-latch", "--create-namespace", "--kubeconfig", d.adminKubeconfig,
		"--set", "image.repository="+repository, "--set", "image.tag="+tag,
		"--set", "controller.namespaces={"+project+"}", "--set", "markVerified.installRights=true",
		// As the demo's own overlay does (installWithOptIns), and its
		// replicas' --verify-grace.
		"--set", "verifyOnLatch.installRights=true", "--set", "controller.verifyGrace="+verifyGrace.String(),
		"--set", "crds.install=false") // the test cluster has the CRD
	helm.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(c.Dir, "helm"), "HELM_CONFIG_HOME="+filepath.Join(c.Dir, "helm"), "HELM_DATA_HOME="+filepath.Join(c.Dir, "helm"))
	if out, err := helm.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("helm install: %w\n%s", err, out)
	}
	say("  helm install kargo-latch charts/kargo-latch --set image.repository=%s --set image.tag=%s (2 replicas),", repository, tag)
	say("  with markVerified.installRights and verifyOnLatch.installRights (the opt-ins), controller.verifyGrace=%s", verifyGrace)
	var pods []corev1.Pod
	deadline := time.Now().Add(3 * time.Minute)
	for len(pods) != 2 {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the Deployment's Pods are not Ready after 3m; see %s", n.Dir)
		}
		time.Sleep(500 * time.Millisecond)
		pods = readyPods(ctx, d.kube)
	}
	for _, p := range pods {
		say("  Pod %s Running and Ready on Node %s, Pod IP %s", p.Name, p.Spec.NodeName, p.Status.PodIP)
		d.replicas = append(d.replicas, &replica{name: p.Name, metricsURL: "http://" + p.Status.PodIP + ":8080/metrics"})
	}
	return d, nil
}

// podLog is the end of a Pod's log, as `kubectl logs --tail` gives it.
func podLog(kube kubernetes.Interface, pod string, lines int64) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := kube.CoreV1().Pods("kargo-latch").GetLogs(pod, &corev1.PodLogOptions{TailLines: &lines}).DoRaw(ctx)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// readyPods are the release's Ready Pods.
func readyPods(ctx context.Context, kube kubernetes.Interface) []corev1.Pod {
	l, err := kube.CoreV1().Pods("kargo-latch").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=kargo-latch"})
	if err != nil {
		return nil
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue && p.DeletionTimestamp == nil {
				out = append(out, p)
			}
		}
	}
	return out
}
