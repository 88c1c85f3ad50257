package controller

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// TestDiagnoseNamesWhatIsMissingAndTheFix: the list errors of a missing
// CRD (404) and a missing right (403) are explained with the fix, wrapped
// as the reflector wraps them; other errors are passed on unexplained.
func TestDiagnoseNamesWhatIsMissingAndTheFix(t *testing.T) {
	listErr := func(err error) error { return fmt.Errorf("failed to list *unstructured.Unstructured: %w", err) }
	forbidden := apierrors.NewForbidden(kargo.StagesResource.GroupResource(), "",
		errors.New(`User "system:serviceaccount:kargo-latch:x" cannot list resource "stages" in API group "kargo.akuity.io" in the namespace "shop"`))
	for _, tc := range []struct {
		name  string
		err   error
		known bool
		want  []string
	}{
		{"StagePause CRD missing", listErr(apierrors.NewNotFound(v1alpha1.StagePausesResource.GroupResource(), "")), true,
			[]string{"StagePause CRD stagepauses.kargo-latch.io is not installed", "kubectl apply -k manifests/crds"}},
		{"Kargo CRD missing", listErr(apierrors.NewNotFound(kargo.StagesResource.GroupResource(), "")), true,
			[]string{"Kargo's CRD stages.kargo.akuity.io is not installed", "install Kargo"}},
		{"list forbidden", listErr(forbidden), true,
			[]string{"may not list and watch stages.kargo.akuity.io in namespace shop", `cannot list resource "stages"`, "ClusterRole kargo-latch"}},
		{"unauthorized", listErr(apierrors.NewUnauthorized("token expired")), true,
			[]string{"rejected kargo-latch's credentials"}},
		{"connection refused", listErr(errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")), false,
			[]string{"listing or watching stages.kargo.akuity.io in namespace shop failed", "connection refused"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gvr := kargo.StagesResource
			if strings.Contains(tc.name, "StagePause") {
				gvr = v1alpha1.StagePausesResource
			}
			text, known := diagnose(gvr, cacheName(gvr, "shop"), tc.err)
			if known != tc.known {
				t.Errorf("known = %v, want %v", known, tc.known)
			}
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("%q does not say %q", text, w)
				}
			}
		})
	}
}
