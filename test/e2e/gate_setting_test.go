package e2e

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/controller"
	"github.com/kargo-latch/kargo-latch/controller/gatesetting"
	"github.com/kargo-latch/kargo-latch/latch"
)

// The setting that names Kargo's controllers lives twice: in the policies
// (for PromotionRequests and the people gate) and in the operator's flags
// (for GateBypassed's advice). The operator compares them at start.

// TestOperatorWarnsWhenItsGateSettingDiffers: the shipped install's pause
// gate names Kargo's default controller. An operator, with the shipped
// operator's rights, given another setting gauges that policy 1 and leaves
// a GateSettingDiffers Warning on it naming both settings; one given the
// shipped setting gauges it 0 and warns about nothing of it.
func TestOperatorWarnsWhenItsGateSettingDiffers(t *testing.T) {
	t.Parallel()
	const policy = "kargo-latch-pause-gate"
	sentinel := "sentinel-" + randomTag()
	differing, err := gatesetting.Parse(sentinel, "")
	must(t, err)
	shipped, err := gatesetting.Parse(gatesetting.DefaultKargoController, "")
	must(t, err)

	for _, tc := range []struct {
		given *gatesetting.Setting
		want  float64
	}{{shipped, 0}, {differing, 1}} {
		ns := env.newProject(t)
		op := startOperatorWith(t, env.operator, ns, latch.Settings{}, nil, func(c *controller.Config) { c.GateSetting = tc.given })
		// The comparison comes first in Start; the caches' sync ends it.
		waitFor(t, "the operator to compare its setting with "+policy+" and start", func() bool {
			return op.metricExists("kargo_latch_gate_setting_differs", "policy", policy) && op.metric("kargo_latch_cache_synced") == 1
		})
		if got := op.metric("kargo_latch_gate_setting_differs", "policy", policy); got != tc.want {
			t.Errorf("given %s: kargo_latch_gate_setting_differs{policy=%s} = %v, want %v", tc.given, policy, got, tc.want)
		}
		if got := op.metric("kargo_latch_gate_setting_unchecked"); got != 0 {
			t.Errorf("given %s: the operator could not read the policies (unchecked %v)", tc.given, got)
		}
	}
	var warning *corev1.Event
	waitFor(t, "a GateSettingDiffers Warning on "+policy+" naming "+sentinel, func() bool {
		events, err := env.kube.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + policy + ",reason=" + api.ReasonGateSettingDiffers})
		must(t, err)
		for i, e := range events.Items {
			if strings.Contains(e.Message, sentinel) {
				warning = &events.Items[i]
				return true
			}
		}
		return false
	})
	for _, want := range []string{gatesetting.DefaultKargoController, "pauseGate.kargoControllers", "kargo-latch-kargo-controllers"} {
		if !strings.Contains(warning.Message, want) {
			t.Errorf("the Warning %q does not say %q", warning.Message, want)
		}
	}
	if warning.Type != corev1.EventTypeWarning || warning.InvolvedObject.Kind != "ValidatingAdmissionPolicy" {
		t.Errorf("the Event is a %s about a %s, want a Warning about the ValidatingAdmissionPolicy", warning.Type, warning.InvolvedObject.Kind)
	}
}

// operatorSetting is the setting of Kargo's controllers that a Deployment
// of objs gives the operator: its flags, with the container's variables
// (plain, or from a ConfigMap among objs) expanded as the kubelet expands
// $(NAME) in args, and the flags' defaults.
func operatorSetting(t *testing.T, objs []*unstructured.Unstructured, deployment *unstructured.Unstructured) (usernames sets.Set[string], regex string) {
	t.Helper()
	var d struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	must(t, runtime.DefaultUnstructuredConverter.FromUnstructured(deployment.Object, &d))
	c := d.Spec.Template.Spec.Containers[0]
	vars := map[string]string{}
	for _, e := range c.Env {
		vars[e.Name] = e.Value
		if e.ValueFrom == nil {
			continue
		}
		ref := e.ValueFrom.ConfigMapKeyRef
		if ref == nil {
			t.Fatalf("%s: the variable %s has a valueFrom other than a configMapKeyRef", deployment.GetName(), e.Name)
		}
		found := false
		for _, o := range objs {
			if o.GetKind() == "ConfigMap" && o.GetName() == ref.Name && o.GetNamespace() == deployment.GetNamespace() {
				value, ok, _ := unstructured.NestedString(o.Object, "data", ref.Key)
				vars[e.Name], found = value, ok
			}
		}
		if !found {
			t.Errorf("%s: the variable %s names %s's key %s, which the install does not hold", deployment.GetName(), e.Name, ref.Name, ref.Key)
		}
	}
	flags := map[string]string{"--kargo-controllers": gatesetting.DefaultKargoController, "--kargo-controller-regex": ""}
	for _, a := range c.Args {
		name, value, _ := strings.Cut(a, "=")
		if _, ok := flags[name]; ok {
			for v, val := range vars {
				value = strings.ReplaceAll(value, "$("+v+")", val)
			}
			if strings.Contains(value, "$(") {
				t.Errorf("%s %s: %s names a variable the container does not set", deployment.GetKind(), deployment.GetName(), a)
			}
			flags[name] = value
		}
	}
	usernames = sets.New[string]()
	for _, u := range strings.Split(flags["--kargo-controllers"], ",") {
		if u = strings.TrimSpace(u); u != "" {
			usernames.Insert(u)
		}
	}
	return usernames, flags["--kargo-controller-regex"]
}

// checkOperatorSetting fails t unless every Deployment among objs gives the
// operator the setting usernames and regex.
func checkOperatorSetting(t *testing.T, install string, objs []*unstructured.Unstructured, usernames []string, regex string) {
	t.Helper()
	found := 0
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		found++
		gotUsers, gotRegex := operatorSetting(t, objs, o)
		if !gotUsers.Equal(sets.New(usernames...)) || gotRegex != regex {
			t.Errorf("%s: the Deployment %s gives the operator usernames %v, regex %q; the policies name %v, %q",
				install, o.GetName(), sets.List(gotUsers), gotRegex, slices.Sorted(slices.Values(usernames)), regex)
		}
	}
	if found == 0 {
		t.Errorf("%s: no Deployment", install)
	}
}
