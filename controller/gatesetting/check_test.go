package gatesetting

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

type gauges struct {
	differs   map[string]bool
	unchecked *bool
}

func (g *gauges) SetGateSettingDiffers(policy string, d bool) { g.differs[policy] = d }
func (g *gauges) SetGateSettingUnchecked(u bool)              { g.unchecked = &u }

func policy(name, paramKind, condition, expr string) *admissionv1.ValidatingAdmissionPolicy {
	return &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			ParamKind:       &admissionv1.ParamKind{APIVersion: "kargo-latch.io/v1alpha1", Kind: paramKind},
			MatchConditions: []admissionv1.MatchCondition{{Name: condition, Expression: expr}},
		},
	}
}

func namesExpr(usernames, regex string) string {
	return "request.resource.resource == 'promotions' || request.userInfo.username in r'''" + usernames +
		"'''.split(\",\").map(n, n.trim()) || (request.userInfo.username.matches(r'''" + regex +
		"''') && request.userInfo.username.matches(r'''^(?:(?:)" + regex + "(?:))$'''))"
}

// TestCheckWarnsOnlyAboutThePoliciesThatDiffer: among the installed
// policies, kargo-latch's are found by their param and condition under any
// name; one that agrees gauges 0, one that names other controllers and
// one edited out of the install's layout gauge 1 and get a Warning naming
// both settings; another product's policy is left alone.
func TestCheckWarnsOnlyAboutThePoliciesThatDiffer(t *testing.T) {
	kube := kubefake.NewClientset(
		policy("agrees", "StagePause", "from-kargo-controller", namesExpr("kargo-shard-eu, "+DefaultKargoController, "kargo-shard-.*")),
		policy("prefix-kargo-latch-pause-gate-people", "StagePause", "not-kargo-auto-promotion", namesExpr(DefaultKargoController, "")),
		policy("hand-edited", "StagePause", "from-kargo-controller", "request.userInfo.username == 'x'"),
		policy("someone-elses", "ConfigMap", "from-kargo-controller", namesExpr("x", "")),
	)
	given, err := Parse(DefaultKargoController+",kargo-shard-eu", "kargo-shard-.*")
	if err != nil {
		t.Fatal(err)
	}
	g := &gauges{differs: map[string]bool{}}
	warned := map[string]string{}
	Check(context.Background(), kube, given, func(p *admissionv1.ValidatingAdmissionPolicy, msg string) { warned[p.Name] = msg }, g)

	if diff := cmp.Diff(map[string]bool{"agrees": false, "prefix-kargo-latch-pause-gate-people": true, "hand-edited": true}, g.differs); diff != "" {
		t.Errorf("gauges (-want +got):\n%s", diff)
	}
	if g.unchecked == nil || *g.unchecked {
		t.Errorf("unchecked = %v, want false", g.unchecked)
	}
	if len(warned) != 2 {
		t.Errorf("warned about %v, want the two that differ", warned)
	}
	for _, want := range []string{`usernames "system:serviceaccount:kargo:kargo-controller", regex ""`, `usernames "kargo-shard-eu,system:serviceaccount:kargo:kargo-controller", regex "kargo-shard-.*"`, "pauseGate.kargoControllers"} {
		if !strings.Contains(warned["prefix-kargo-latch-pause-gate-people"], want) {
			t.Errorf("the Warning %q does not say %q", warned["prefix-kargo-latch-pause-gate-people"], want)
		}
	}
	if !strings.Contains(warned["hand-edited"], "cannot compare") {
		t.Errorf("the Warning about the hand-edited policy: %q", warned["hand-edited"])
	}
}

// TestCheckUnreadablePoliciesAreGaugedNotFatal: without the right to list
// the policies the check only says so.
func TestCheckUnreadablePoliciesAreGaugedNotFatal(t *testing.T) {
	kube := kubefake.NewClientset()
	kube.PrependReactor("list", "validatingadmissionpolicies", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("forbidden")
	})
	g := &gauges{differs: map[string]bool{}}
	given, _ := Parse(DefaultKargoController, "")
	Check(context.Background(), kube, given, func(*admissionv1.ValidatingAdmissionPolicy, string) { t.Error("a Warning without a policy read") }, g)
	if g.unchecked == nil || !*g.unchecked || len(g.differs) != 0 {
		t.Errorf("unchecked %v, differs %v; want unchecked and no gauge", g.unchecked, g.differs)
	}
}
