package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kargo-latch/kargo-latch/latch"
)

// After a resume, sayHolds tells of Kargo's holds on the Stage (or on each
// Stage of the project), and warns when it may not read Stages.
func TestSayHolds(t *testing.T) {
	const hold = "Stage prod: Kargo itself still holds auto-promotion from Warehouse/images at Freight f1 (by admin, promotion " + promo1 +
		", since 2026-11-30T07:50:00Z): to release it, promote the held Warehouse's current candidate Freight to the Stage " +
		"(kargo promote --project project --stage prod --freight NAME), or resume auto-promotion in Kargo's UI\n"
	for name, c := range map[string]struct {
		stage            string
		holds            map[string]any
		forbidden        bool
		wantOut, wantErr string
	}{
		"held":                 {stage: "prod", holds: rollbackHold, wantOut: hold},
		"not held":             {stage: "prod"},
		"the project's Stages": {holds: rollbackHold, wantOut: hold},
		"no right to read the Stage": {stage: "prod", holds: rollbackHold, forbidden: true,
			wantErr: "warning: cannot read Stage prod in project project to check for Kargo's own auto-promotion holds: stages.kargo.akuity.io \"prod\" is forbidden: no\n"},
		"no right to list Stages": {holds: rollbackHold, forbidden: true,
			wantErr: "warning: cannot list the Stages of project project to check for Kargo's own auto-promotion holds: stages.kargo.akuity.io is forbidden: no\n"},
	} {
		t.Run(name, func(t *testing.T) {
			client := fakeClient(prodStage(kargoView{holds: c.holds}, latch.Record{}))
			if c.forbidden {
				client.PrependReactor("*", "stages", func(a k8stesting.Action) (bool, runtime.Object, error) {
					name := ""
					if g, ok := a.(k8stesting.GetAction); ok {
						name = g.GetName()
					}
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "kargo.akuity.io", Resource: "stages"}, name, errors.New("no"))
				})
			}
			var out, errOut bytes.Buffer
			sayHolds(t.Context(), client, "project", c.stage, &out, &errOut)
			if out.String() != c.wantOut || errOut.String() != c.wantErr {
				t.Errorf("stdout %q\nstderr %q\nwant   %q\nand    %q", out.String(), errOut.String(), c.wantOut, c.wantErr)
			}
			if strings.Contains(out.String(), "warning") {
				t.Error("a warning went to stdout")
			}
		})
	}
}
