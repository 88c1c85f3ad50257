package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"
	"unsafe"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// unreadableRecord is a cached record that cannot be inflated, as only a bug
// in kargo.Packed would leave one. Packed offers no way to make one, rightly:
// the test packs a record and overwrites the packed bytes with bytes that
// are not deflate data. A Packed whose fields change fails it loudly.
func unreadableRecord(t *testing.T) kargo.Packed {
	t.Helper()
	p := kargo.Pack(failedRecord().Encode() + strings.Repeat(" ", 1024)) // long enough to be deflated
	data := reflect.ValueOf(&p).Elem().FieldByName("data")
	if !data.IsValid() || data.Kind() != reflect.String {
		t.Fatal("kargo.Packed has no string field data: update unreadableRecord")
	}
	//nolint:gosec // a test reaching into a value to corrupt it, as a bug would
	reflect.NewAt(data.Type(), unsafe.Pointer(data.UnsafeAddr())).Elem().SetString("\xff not deflated")
	if _, err := p.Read(); err == nil || !p.Present() {
		t.Fatal("the corrupted record reads: update unreadableRecord")
	}
	return p
}

// annotationLimit is the API server's limit on the total size of an
// object's annotations, keys and values (apimachinery's
// TotalAnnotationSizeLimitB).
const annotationLimit = 256 << 10

// limitAnnotations makes the fake API server refuse, as the real one does
// (422 Invalid, metadata.annotations too long), a Stage patch that would
// leave its annotations over annotationLimit; refused counts the refusals
// and stored the patches it let through.
func limitAnnotations(refused, stored *atomic.Int64) func(*fixture) {
	return func(f *fixture) {
		f.client.PrependReactor("patch", "stages", func(a k8stesting.Action) (bool, runtime.Object, error) {
			patch := a.(k8stesting.PatchAction)
			obj, err := f.client.Tracker().Get(kargo.StagesResource, patch.GetNamespace(), patch.GetName())
			if err != nil {
				return true, nil, err
			}
			annotations := obj.(*unstructured.Unstructured).GetAnnotations()
			var p struct {
				Metadata struct {
					Annotations map[string]*string `json:"annotations"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(patch.GetPatch(), &p); err != nil {
				return true, nil, err
			}
			total := 0
			for k, v := range annotations {
				if _, patched := p.Metadata.Annotations[k]; !patched {
					total += len(k) + len(v)
				}
			}
			for k, v := range p.Metadata.Annotations {
				if v != nil {
					total += len(k) + len(*v)
				}
			}
			if total > annotationLimit {
				refused.Add(1)
				return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: kargo.GroupVersion.Group, Kind: "Stage"}, patch.GetName(),
					field.ErrorList{field.TooLong(field.NewPath("metadata", "annotations"), "", annotationLimit)})
			}
			stored.Add(1)
			return false, nil, nil
		})
	}
}

// storedAnnotations are the annotations of Stage shop/prod on the server.
func (f *fixture) storedAnnotations() map[string]string {
	f.t.Helper()
	u, err := f.client.Resource(kargo.StagesResource).Namespace("shop").Get(context.Background(), "prod", metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return u.GetAnnotations()
}

// A garbage record near the API server's limit on annotations (255.8 KiB,
// of a two-byte character, cut at the end of a hand edit) is kept only in
// part: the first bytes that fit maxKeptGarbage, after a line naming its
// length and SHA-256. Kept whole beside the fresh record, it made every
// store refused, and the Stage never latched.
func TestLargeGarbageRecordIsKeptInPart(t *testing.T) {
	garbage := `{"version":1,"phase":"Failed","note":"` + strings.Repeat("é", 130_950)
	if n := len(api.StateAnnotation) + len(garbage); n > annotationLimit || n < annotationLimit-512 {
		t.Fatalf("the Stage's annotations total %d bytes, want just under %d", n, annotationLimit)
	}
	var refused, stored atomic.Int64
	f := newFixtureWith(t, false, limitAnnotations(&refused, &stored), healthyStage("prod", map[string]any{api.StateAnnotation: garbage}))
	msg := f.waitEvent("Warning InvalidState")
	f.waitEvent("Normal HealthLatched")
	annotations := f.storedAnnotations()
	kept := annotations[kargo.InvalidStateAnnotation]
	header, prefix, _ := strings.Cut(kept, "\n")
	sum := sha256.Sum256([]byte(garbage))
	wantHeader := fmt.Sprintf("%s: the first %d of %d bytes, sha256 %s", kargo.InvalidStateAnnotation, len(prefix), len(garbage), hex.EncodeToString(sum[:]))
	switch {
	case len(kept) > maxKeptGarbage || len(kept) < maxKeptGarbage-1:
		t.Errorf("kept %d bytes, want the most that fit %d", len(kept), maxKeptGarbage)
	case header != wantHeader:
		t.Errorf("kept copy's first line %q, want %q", header, wantHeader)
	case !strings.HasPrefix(garbage, prefix) || !utf8.ValidString(prefix):
		t.Errorf("kept copy is not the garbage's beginning, cut between characters: %q…", prefix[:64])
	}
	if want := fmt.Sprintf("its first %d of %d bytes, with the SHA-256 of the whole", len(prefix), len(garbage)); !strings.Contains(msg, want) {
		t.Errorf("the Warning does not say what is kept (%q): %s", want, msg)
	}
	if r := f.record("prod"); r.Phase != latch.PhaseLatched {
		t.Errorf("fresh record: phase %s, want Latched", r.Phase)
	}
	if refused.Load() != 0 || stored.Load() != 1 {
		t.Errorf("%d patches refused, %d stored; want none refused, one stored", refused.Load(), stored.Load())
	}
	if n := f.counterSum("kargo_latch_invalid_input_total", invalidState); n != 1 {
		t.Errorf("kargo_latch_invalid_input_total{input=\"state\"} = %v, want 1", n)
	}
}

// A garbage record that cannot be kept at all, the Stage's other
// annotations leaving no room for it, does not hold back the fresh record:
// the refused store is tried once more without it, and a Warning says the
// garbage is lost. Without that, every store was refused, forever.
func TestGarbageRecordWithoutRoomIsDroppedWithAWarning(t *testing.T) {
	garbage := `{"version":1,"phase":"Failed","note":"` + strings.Repeat("x", 4000) // a hand edit gone wrong
	const blobKey = "example.com/blob"
	blob := strings.Repeat("x", annotationLimit-len(api.StateAnnotation)-len(garbage)-len(blobKey))
	var refused, stored atomic.Int64
	f := newFixtureWith(t, false, limitAnnotations(&refused, &stored),
		healthyStage("prod", map[string]any{api.StateAnnotation: garbage, blobKey: blob}))
	f.waitEvent("Warning InvalidState")
	msg := f.waitEvent("Warning InvalidState")
	sum := sha256.Sum256([]byte(garbage))
	if !strings.Contains(msg, "could not be kept") || !strings.Contains(msg, hex.EncodeToString(sum[:])) {
		t.Errorf("the second Warning does not say the garbage (and its hash) could not be kept: %s", msg)
	}
	f.waitEvent("Normal HealthLatched")
	f.idle()
	annotations := f.storedAnnotations()
	if _, ok := annotations[kargo.InvalidStateAnnotation]; ok || annotations[blobKey] != blob {
		t.Errorf("%s present %v, the other annotation kept %v; want it absent, the other kept", kargo.InvalidStateAnnotation, ok, annotations[blobKey] == blob)
	}
	if r := f.record("prod"); r.Phase != latch.PhaseLatched {
		t.Errorf("fresh record: phase %s, want Latched", r.Phase)
	}
	if refused.Load() != 1 || stored.Load() != 1 {
		t.Errorf("%d patches refused, %d stored; want one of each", refused.Load(), stored.Load())
	}
	if n := f.counterSum("kargo_latch_invalid_input_total", invalidState); n != 1 {
		t.Errorf("kargo_latch_invalid_input_total{input=\"state\"} = %v, want 1", n)
	}
}

// syncUnreadableCopy makes the cached copy of Stage shop/prod's record
// unreadable (a bug), at resourceVersion rv unless empty, and waits for a
// sync of it. The API server's copy is as it was.
func (f *fixture) syncUnreadableCopy(rv string) {
	f.t.Helper()
	key := cache.NewObjectName("shop", "prod")
	cached, ok, err := f.c.stageByKey(key)
	if err != nil || !ok {
		f.t.Fatalf("Stage not cached: %v", err)
	}
	unreadable := cached.DeepCopy()
	unreadable.State = unreadableRecord(f.t)
	if rv != "" {
		unreadable.ResourceVersion = rv
	}
	if err := f.c.stageInformersFor("shop")[0].GetIndexer().Update(unreadable); err != nil {
		f.t.Fatal(err)
	}
	synced := f.syncs()
	f.c.enqueue(key)
	waitUntil(f.t, func() bool { return f.syncs() > synced })
}

// countEvents counts the Events the recorder holds now that start with
// prefix and contain text.
func (f *fixture) countEvents(prefix, text string) int {
	n := 0
	for _, e := range f.drainEvents() {
		if strings.HasPrefix(e, prefix) && strings.Contains(e, text) {
			n++
		}
	}
	return n
}

// An unreadable cached copy is one problem however often Kargo writes the
// Stage's status meanwhile (each write a new resourceVersion): one Warning,
// one count.
func TestUnreadableCopyIsReportedOnce(t *testing.T) {
	f := newFixture(t, false, healthyStage("prod", map[string]any{api.StateAnnotation: failedRecord().Encode()}))
	waitUntil(t, func() bool { return f.syncs() >= 1 })
	f.idle()
	for _, rv := range []string{"41", "42", "43"} {
		f.syncUnreadableCopy(rv)
	}
	f.idle()
	if n := f.countEvents("Warning InvalidState", "cannot read its cached copy"); n != 1 {
		t.Errorf("%d InvalidState Warnings about one unreadable copy, want 1", n)
	}
	if n := f.counterSum("kargo_latch_invalid_input_total", invalidState); n != 1 {
		t.Errorf("kargo_latch_invalid_input_total{input=\"state\"} = %v, want 1", n)
	}
}

// An unreadable cached copy of a record that is garbage on the API server
// too is one bad record in one sync: both are reported, and counted once.
func TestUnreadableCopyOfGarbageCountsOnce(t *testing.T) {
	garbage := strings.TrimSuffix(failedRecord().Encode(), "}")
	var liveGarbage atomic.Bool
	f := newFixtureWith(t, false, func(f *fixture) {
		// The server's record turns to garbage as the cache's copy turns
		// unreadable; the watch that would tell is not waited for.
		f.client.PrependReactor("get", "stages", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if !liveGarbage.CompareAndSwap(true, false) {
				return false, nil, nil
			}
			obj, err := f.client.Tracker().Get(kargo.StagesResource, a.GetNamespace(), a.(k8stesting.GetAction).GetName())
			if err != nil {
				return true, nil, err
			}
			u := obj.(*unstructured.Unstructured).DeepCopy()
			u.SetAnnotations(map[string]string{api.StateAnnotation: garbage})
			return true, u, nil
		})
	}, healthyStage("prod", map[string]any{api.StateAnnotation: failedRecord().Encode()}))
	waitUntil(t, func() bool { return f.syncs() >= 1 })
	f.idle()
	liveGarbage.Store(true)
	f.syncUnreadableCopy("")
	f.idle()
	events := f.drainEvents()
	for _, text := range []string{"cannot read its cached copy", "Ignoring the " + api.StateAnnotation} {
		if n := len(slices.DeleteFunc(slices.Clone(events), func(e string) bool { return !strings.Contains(e, text) })); n != 1 {
			t.Errorf("%d InvalidState Warnings saying %q, want 1: %q", n, text, events)
		}
	}
	if n := f.counterSum("kargo_latch_invalid_input_total", invalidState); n != 1 {
		t.Errorf("kargo_latch_invalid_input_total{input=\"state\"} = %v, want 1", n)
	}
	if r := f.record("prod"); r.Phase != latch.PhaseLatched {
		t.Errorf("phase %s after a fresh start, want Latched", r.Phase)
	}
}
