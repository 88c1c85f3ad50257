package e2e

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// Where several admission policies refuse one request, the API server
// names only the first, in an order it draws anew (Go map order) each time
// it reloads its policies: at most once a second, after any policy or
// binding changed. A test that waits for one policy's refusal and meets
// another's would otherwise wait for some other test to change a policy.
// waitDeniedBy has the API server reload instead, by touching an inert
// binding of the suite's own.

// waitDeniedBy waits until try's request is refused by the admission
// policy named.
func waitDeniedBy(t *testing.T, what, policy string, try func() error) {
	t.Helper()
	waitFor(t, what, func() bool {
		err := try()
		if deniedBy(err, policy) {
			return true
		}
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '") {
			reloadPolicies(t)
		}
		return false
	})
}

// reloadPolicy is a policy that matches no request: its binding's changes
// only make the API server reload its policies.
const reloadPolicy = "e2e-policy-reload"

var (
	reloadPolicyOnce sync.Once
	reloadPolicyErr  error
	lastReload       atomic.Int64 // unix nanoseconds
	reloads          atomic.Int64
)

// reloadPolicies has the API server reload its admission policies soon, at
// most one change every 500 ms (it reloads at most once a second).
func reloadPolicies(t *testing.T) {
	t.Helper()
	reloadPolicyOnce.Do(func() { reloadPolicyErr = installReloadPolicy() })
	must(t, reloadPolicyErr)
	last := lastReload.Load()
	now := time.Now().UnixNano()
	if now-last < int64(500*time.Millisecond) || !lastReload.CompareAndSwap(last, now) {
		return
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"e2e-reload":"%d"}}}`, reloads.Add(1))
	_, err := env.dyn.Resource(vapBindings).Patch(ctx, reloadPolicy, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	must(t, err)
}

func installReloadPolicy() error {
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1",
		"kind":       "ValidatingAdmissionPolicy",
		"metadata":   map[string]any{"name": reloadPolicy},
		"spec": map[string]any{
			"failurePolicy": "Ignore",
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{"e2e.invalid"}, "apiVersions": []any{"v1"}, "operations": []any{"CREATE"}, "resources": []any{"nothings"},
			}}},
			"validations": []any{map[string]any{"expression": "true"}},
		},
	}}
	binding := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1",
		"kind":       "ValidatingAdmissionPolicyBinding",
		"metadata":   map[string]any{"name": reloadPolicy},
		"spec":       map[string]any{"policyName": reloadPolicy, "validationActions": []any{"Deny"}},
	}}
	return applyObjects([]*unstructured.Unstructured{policy, binding})
}

// waitMayUpdateProjectConfig waits until the API server's authorizer lets
// user update the ProjectConfig of ns: the gates' rule for PromotionRequests
// asks the same authorizer, so a RoleBinding just made is then in force
// there too, and only the rule about Kargo's controllers can refuse.
func waitMayUpdateProjectConfig(t *testing.T, user, ns string) {
	t.Helper()
	update := authorizationv1.ResourceAttributes{Namespace: ns, Name: ns, Verb: "update", Group: kargoGroup, Resource: "projectconfigs"}
	waitFor(t, user+" to be allowed to update the ProjectConfig of "+ns, func() bool { return mayUser(t, user, update) })
}
