package pausing

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// Releaser lets go of the pauses the operator holds for resume: a failure's
// pause that someone deleted keeps the operator's finalizer until the
// record that shows the resume is stored (or its Stage is gone), so that a
// failure judged again meanwhile finds it there instead of pausing anew.
type Releaser struct {
	// Dynamic patches the finalizer away, and reads a Stage live.
	Dynamic dynamic.Interface
	// Stages lists the cached Stages of a namespace.
	Stages func(ns string) []*kargo.Stage
	// Sharded says that Stages holds only this operator's shards: a Stage
	// missing there may be another shard's.
	Sharded bool
	// DryRun releases nothing.
	DryRun bool
}

// Release removes the operator's finalizer from p, conditional on the
// resourceVersion it was read at. A pause already gone is released.
func (r *Releaser) Release(ctx context.Context, p *v1alpha1.StagePause) error {
	if r.DryRun {
		return nil
	}
	rest := slices.DeleteFunc(slices.Clone(p.Finalizers), func(f string) bool { return f == v1alpha1.ResumeFinalizer })
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": p.ResourceVersion, "finalizers": rest}})
	if err != nil {
		return err
	}
	_, err = r.Dynamic.Resource(v1alpha1.StagePausesResource).Namespace(p.Namespace).
		Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: api.FieldManager})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("releasing deleted StagePause %s: %w", p.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Released a deleted StagePause", "pause", klog.KRef(p.Namespace, p.Name))
	return nil
}

// ReleaseOrphan releases a held pause whose Stage is gone (deleted, or made
// again under the same name): no record will ever name it. A sharded
// operator's caches hold only its shard's Stages, so it asks the API
// server before: a Stage of another shard is its operator's to release.
func (r *Releaser) ReleaseOrphan(ctx context.Context, p *v1alpha1.StagePause) error {
	for _, s := range r.Stages(p.Namespace) {
		if p.Covers(s.Name) && OwnedBy(p, s) {
			return nil // the Stage's own sync releases it
		}
	}
	if r.Sharded {
		u, err := r.Dynamic.Resource(kargo.StagesResource).Namespace(p.Namespace).Get(ctx, p.Spec.Stage, metav1.GetOptions{})
		switch {
		case err == nil && OwnedBy(p, kargo.StageFromUnstructured(u)):
			return nil
		case err != nil && !apierrors.IsNotFound(err):
			return fmt.Errorf("reading the Stage of deleted StagePause %s: %w", p.Name, err)
		}
	}
	return r.Release(ctx, p)
}

// OwnedBy reports whether p was made for this Stage, not for an earlier
// Stage of the same name.
func OwnedBy(p *v1alpha1.StagePause, stage *kargo.Stage) bool {
	for _, ref := range p.OwnerReferences {
		if ref.Kind == "Stage" && ref.Name == stage.Name {
			return ref.UID == stage.UID
		}
	}
	return true
}
