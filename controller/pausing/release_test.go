package pausing

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// heldPause is a failure's pause of Stage x (uid-x) that someone deleted:
// held for resume by the operator's finalizer, beside another's.
func heldPause() *unstructured.Unstructured {
	u := pauseObject("x-failed", "x")
	u.SetDeletionTimestamp(&metav1.Time{Time: time.Now()})
	u.SetFinalizers([]string{"example.com/other", v1alpha1.ResumeFinalizer})
	u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: kargo.GroupVersion.String(), Kind: "Stage", Name: "x", UID: "uid-x"}})
	return u
}

// stageObject is Stage x on the API server, of uid.
func stageObject(uid string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": kargo.GroupVersion.String(), "kind": "Stage"}}
	u.SetNamespace("shop")
	u.SetName("x")
	u.SetUID(types.UID("uid-" + uid))
	return u
}

// Release removes the operator's finalizer alone, conditional on the
// version it read; a pause already gone is released; a dry run releases
// nothing.
func TestReleaseRemovesOnlyTheOperatorsFinalizer(t *testing.T) {
	u := heldPause()
	f := newWriterFixture(t, UnshardedKey, u)
	if err := f.w.Releaser.Release(context.Background(), typedPause(t, u)); err != nil {
		t.Fatal(err)
	}
	patches := f.patches("")
	if got := fmt.Sprint(patches); got != "[map[metadata:map[finalizers:[example.com/other] resourceVersion:1]]]" {
		t.Errorf("patches %s, want the other finalizer kept, conditional on version 1", got)
	}
	gone := typedPause(t, heldPause())
	gone.Name = "gone"
	if err := f.w.Releaser.Release(context.Background(), gone); err != nil {
		t.Errorf("releasing a pause already gone: %v", err)
	}
	f.client.ClearActions()
	f.w.Releaser.DryRun = true
	if err := f.w.Releaser.Release(context.Background(), typedPause(t, u)); err != nil || len(f.client.Actions()) != 0 {
		t.Errorf("a dry run: err %v, requests %v; want none", err, f.client.Actions())
	}
}

// ReleaseOrphan releases a held pause only when its Stage is gone: not
// while this operator caches it, nor, when sharded, while the API server
// has it (another shard's). A Stage made again under the same name is not
// the pause's.
func TestReleaseOrphanOnlyWhenTheStageIsGone(t *testing.T) {
	for name, tc := range map[string]struct {
		sharded  bool
		cached   string // the cached Stage x's uid, "" for none
		server   string // Stage x's uid on the API server, "" for none
		getFails bool
		released bool
		err      bool
	}{
		"cached":                          {cached: "x", server: "x"},
		"cached, sharded":                 {sharded: true, cached: "x", server: "x"},
		"made again":                      {cached: "x2", server: "x2", released: true},
		"gone":                            {released: true},
		"another shard's":                 {sharded: true, server: "x"},
		"sharded, made again":             {sharded: true, server: "x2", released: true},
		"sharded, gone":                   {sharded: true, released: true},
		"sharded, the Stage's read fails": {sharded: true, getFails: true, err: true},
		// Unsharded, the caches hold every Stage: no read.
		"unsharded, only on the server": {server: "x", released: true},
	} {
		t.Run(name, func(t *testing.T) {
			u := heldPause()
			objects := []runtime.Object{u}
			if tc.server != "" {
				objects = append(objects, stageObject(tc.server))
			}
			f := newWriterFixture(t, UnshardedKey, objects...)
			r := f.w.Releaser
			r.Sharded = tc.sharded
			if tc.cached != "" {
				s := stage("x")
				s.UID = types.UID("uid-" + tc.cached)
				f.stages = append(f.stages, s)
			}
			if tc.getFails {
				f.client.PrependReactor("get", "stages", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewInternalError(errors.New("etcd is away"))
				})
			}
			err := r.ReleaseOrphan(context.Background(), typedPause(t, u))
			if (err != nil) != tc.err {
				t.Errorf("err %v, want an error: %v", err, tc.err)
			}
			if released := len(f.patches("")) == 1; released != tc.released {
				t.Errorf("released %v, want %v", released, tc.released)
			}
			for _, a := range f.client.Actions() {
				if a.GetVerb() == "get" && !tc.sharded {
					t.Errorf("an unsharded operator read the Stage live")
				}
			}
		})
	}
}
