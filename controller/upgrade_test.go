package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// A record written by a newer kargo-latch is left alone: one Warning, and
// no write of any kind, although the Stage would fail and pause under this
// version's rules.
func TestNewerRecordIsLeftAlone(t *testing.T) {
	newer := `{"version":2,"phase":"Hyperlatched","promotedAt":"2026-11-29T10:00:00Z","future":{"x":1}}`
	stage := failedStage()
	stage.SetAnnotations(map[string]string{PauseOnFailureAnnotation: "true", StateAnnotation: newer})
	f := newFixture(t, false, stage)
	msg := f.waitEvent("Warning NewerState")
	if !strings.Contains(msg, "newer kargo-latch") {
		t.Errorf("Warning: %s", msg)
	}
	waitUntil(t, func() bool { return f.syncs() >= 1 })
	time.Sleep(200 * time.Millisecond)
	for _, a := range f.client.Actions() {
		if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
			t.Errorf("wrote to a Stage with a newer record: %s %s", v, a.GetResource().Resource)
		}
	}
	u, err := f.client.Resource(kargo.StagesResource).Namespace("shop").Get(context.Background(), "prod", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := u.GetAnnotations()[StateAnnotation]; got != newer {
		t.Errorf("record changed to %s", got)
	}
}
