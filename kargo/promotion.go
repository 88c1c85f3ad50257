package kargo

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Promotion is the part of a Kargo Promotion that kargo-latch reads.
type Promotion struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	// Stage is spec.stage; empty when missing.
	Stage string
	// Phase is status.phase; empty means Pending to Kargo.
	Phase string
}

// DeepCopyObject implements runtime.Object.
func (p *Promotion) DeepCopyObject() runtime.Object {
	c := &Promotion{TypeMeta: p.TypeMeta, Stage: p.Stage, Phase: p.Phase}
	p.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return c
}

// AutoPromotion reports whether Kargo's controller created p by itself: it
// carries no create-actor, or one starting with "controller:".
func (p *Promotion) AutoPromotion() bool {
	actor, ok := p.Annotations[CreateActorAnnotation]
	return !ok || strings.HasPrefix(actor, "controller:")
}

func promotionFromMap(obj map[string]any) *Promotion {
	return &Promotion{
		TypeMeta:   metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: "Promotion"},
		ObjectMeta: metaFromMap(obj, promotionKeys),
		Stage:      str(obj, "spec", "stage"),
		Phase:      str(obj, "status", "phase"),
	}
}

func promotionKeys(key string) bool {
	return key == CreateActorAnnotation || key == AbortAnnotation || strings.HasPrefix(key, OwnPrefix)
}
