package driver

import (
	"context"
	"regexp"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// TestPromotionHistoryTellsTheBusyStagesStory holds the bench's Promotions
// to the shape Kargo leaves: Kargo's name form, in name order oldest first,
// the newest being the Stage's lastPromotion; the webhook's labels,
// annotation and ownerReference; the shard label of a Stage in a shard; a
// terminal status; and the Freight they promote existing.
func TestPromotionHistoryTellsTheBusyStagesStory(t *testing.T) {
	ctx := context.Background()
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		kargo.StagesResource: "StageList", kargo.PromotionsResource: "PromotionList", kargo.FreightsResource: "FreightList",
	})
	k := New(client)
	s, err := k.CreateStage(ctx, "ns", "prod", nil, WithShard("s1"), WithBusyApps())
	if err != nil {
		t.Fatal(err)
	}
	s.UID = "stage-uid" // the fake client gives none
	if err := s.WriteBusyStatus(ctx, kargo.HealthHealthy); err != nil {
		t.Fatal(err)
	}
	h, err := s.CreatePromotionHistory(ctx, 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Names) != 20 || h.Freight != 9 || h.Bytes == 0 {
		t.Fatalf("made %d Promotions, %d Freight, %d bytes; want 20, 9 (the busy status made the newest), some", len(h.Names), h.Freight, h.Bytes)
	}
	if !slices.IsSorted(h.Names) {
		t.Errorf("names are not oldest first in Kargo's name order: %v", h.Names)
	}
	stage, err := s.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last, _, _ := unstructured.NestedString(stage.Object, "status", "lastPromotion", "name")
	if h.Names[19] != last {
		t.Errorf("newest Promotion %s, want the Stage's lastPromotion %s", h.Names[19], last)
	}
	name := regexp.MustCompile(`^prod\.[0-9a-hjkmnp-tv-z]{26}\.[0-9a-f]{7}$`)
	phases := map[string]int{}
	for _, n := range h.Names {
		p, err := client.Resource(kargo.PromotionsResource).Namespace("ns").Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !name.MatchString(n) {
			t.Errorf("name %q is not <stage>.<ulid>.<freight[:7]>", n)
		}
		if p.GetLabels()[kargo.StageLabel] != "prod" || p.GetLabels()[kargo.ShardLabel] != "s1" || p.GetAnnotations()[kargo.StageLabel] != "prod" {
			t.Errorf("%s: labels %v, annotations %v", n, p.GetLabels(), p.GetAnnotations())
		}
		if owners := p.GetOwnerReferences(); len(owners) != 1 || owners[0].UID != "stage-uid" || owners[0].Controller == nil || !*owners[0].Controller {
			t.Errorf("%s: ownerReferences %v", n, owners)
		}
		phase, _, _ := unstructured.NestedString(p.Object, "status", "phase")
		phases[phase]++
		freight, _, _ := unstructured.NestedString(p.Object, "spec", "freight")
		if _, err := k.Freight(ctx, "ns", freight); err != nil {
			t.Errorf("%s promotes Freight %s: %v", n, freight, err)
		}
		steps, _, _ := unstructured.NestedSlice(p.Object, "status", "stepExecutionMetadata")
		checks, _, _ := unstructured.NestedSlice(p.Object, "status", "healthChecks")
		if len(steps) != len(templateSteps) || (phase == PhaseSucceeded) != (len(checks) == 1) {
			t.Errorf("%s (%s): %d steps' metadata, %d health checks", n, phase, len(steps), len(checks))
		}
	}
	if phases[PhaseSucceeded] < 10 || phases[PhaseFailed] == 0 || phases[PhaseErrored] == 0 || phases[PhaseAborted] == 0 || phases[""] != 0 {
		t.Errorf("phases %v: want every Freight's newer Promotion Succeeded and some of every other terminal phase", phases)
	}
	if got := len(s.PastFreight()); got != 10 {
		t.Errorf("PastFreight has %d Freight, want the 10 of freightHistory", got)
	}
}
