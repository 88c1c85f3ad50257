package gatesetting

import (
	"context"
	"fmt"
	"slices"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
)

// Finding is what the check found about one installed policy.
type Finding struct {
	Policy    *admissionv1.ValidatingAdmissionPolicy
	Condition string
	// Installed is the setting the policy carries; nil when its condition
	// is not in the layout the install writes (edited by hand).
	Installed *Setting
}

// Differs reports whether the policy names other controllers than given.
func (f Finding) Differs(given *Setting) bool {
	return f.Installed == nil || !f.Installed.Equal(given)
}

// Policies lists the installed ValidatingAdmissionPolicies that are
// kargo-latch's and name Kargo's controllers: their param is a StagePause
// and one of their matchConditions is one that kargo-latch's install
// writes the setting into.
func Policies(ctx context.Context, kube kubernetes.Interface) ([]Finding, error) {
	list, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var found []Finding
	for i := range list.Items {
		p := &list.Items[i]
		if !pausesParam(p) {
			continue
		}
		for _, c := range p.Spec.MatchConditions {
			if !slices.Contains(conditions, c.Name) {
				continue
			}
			f := Finding{Policy: p, Condition: c.Name}
			if s, ok := fromExpression(c.Expression); ok {
				f.Installed = s
			}
			found = append(found, f)
		}
	}
	return found, nil
}

func pausesParam(p *admissionv1.ValidatingAdmissionPolicy) bool {
	k := p.Spec.ParamKind
	return k != nil && k.Kind == "StagePause" && k.APIVersion == v1alpha1.GroupVersion.String()
}

// Metrics records the check's outcome.
type Metrics interface {
	// SetGateSettingDiffers sets, per policy, 1 when it names other
	// controllers than the operator was given, else 0.
	SetGateSettingDiffers(policy string, differs bool)
	// SetGateSettingUnchecked sets 1 when the policies could not be read.
	SetGateSettingUnchecked(unchecked bool)
}

// Check compares the setting the operator was given with every installed
// policy that names Kargo's controllers, once (at start). A policy that
// differs gets a Warning Event (GateSettingDiffers) naming both settings
// and what to change, and its gauge is 1. Policies that cannot be read (an
// install without the right to list them) are logged and gauged, never
// fatal: the gate works without the operator, and this is advice.
func Check(ctx context.Context, kube kubernetes.Interface, given *Setting, report func(policy *admissionv1.ValidatingAdmissionPolicy, msg string), m Metrics) {
	logger := klog.FromContext(ctx)
	found, err := Policies(ctx, kube)
	if err != nil {
		logger.Error(err, "Cannot compare the setting of Kargo's controllers with the installed pause-gate policies; give the operator get and list on validatingadmissionpolicies")
		m.SetGateSettingUnchecked(true)
		return
	}
	m.SetGateSettingUnchecked(false)
	if len(found) == 0 {
		logger.Info("No installed pause-gate policy names Kargo's controllers; nothing to compare with", "setting", given.String())
		return
	}
	differs := map[string]bool{}
	for _, f := range found {
		if _, seen := differs[f.Policy.Name]; !seen {
			differs[f.Policy.Name] = false
		}
		if !f.Differs(given) {
			continue
		}
		differs[f.Policy.Name] = true
		msg := message(f, given)
		logger.Info("The setting of Kargo's controllers differs from an installed policy", "policy", f.Policy.Name, "condition", f.Condition, "message", msg)
		report(f.Policy, msg)
	}
	for policy, d := range differs {
		m.SetGateSettingDiffers(policy, d)
	}
}

func message(f Finding, given *Setting) string {
	if f.Installed == nil {
		return fmt.Sprintf("The policy %s's condition %s does not hold the setting of Kargo's controllers in the layout kargo-latch's install writes, so the operator cannot compare it with its own (%s). "+
			"Reinstall the policy from the chart or manifests/components/kargo-controllers.", f.Policy.Name, f.Condition, given)
	}
	return fmt.Sprintf("The policy %s names Kargo's controllers as %s; this operator was given %s (--kargo-controllers, --kargo-controller-regex). "+
		"PromotionRequests and the people gate follow the policy, GateBypassed's advice follows the operator: make them one setting "+
		"(Helm: pauseGate.kargoControllers, pauseGate.kargoControllerRegex; kustomize: kargo-latch-kargo-controllers with components/kargo-controllers listed last).",
		f.Policy.Name, f.Installed, given)
}
