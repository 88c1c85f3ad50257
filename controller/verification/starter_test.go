package verification

import (
	"context"
	"errors"
	"reflect"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

// starterWorld is the API server a Starter reads: the golden Stage, its
// templates, Freight and Warehouses, and any runs given.
func starterWorld(t *testing.T, runs ...*unstructured.Unstructured) *dynamicfake.FakeDynamicClient {
	t.Helper()
	objs := []runtime.Object{object(t, stageYAML), object(t, webCheckYAML), object(t, sharedCheckYAML), object(t, errorRateYAML),
		object(t, imagesWarehouseYAML), object(t, configWarehouseYAML),
		freightObject(t, "f-images", "uid-images"), freightObject(t, "f-config", "uid-config")}
	for _, r := range runs {
		objs = append(objs, r)
	}
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		AnalysisRunsResource: "AnalysisRunList",
	}, objs...)
}

// calls counts the requests of a verb ("create", "patch") made of c.
func calls(c *dynamicfake.FakeDynamicClient, verb string) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == verb {
			n++
		}
	}
	return n
}

func TestStartMakesTheRunFromLiveReads(t *testing.T) {
	c := starterWorld(t)
	name := fullInput(t).Name
	runs, created, err := (&Starter{Dynamic: c}).Start(context.Background(), "demo", "test", collectionID, name)
	if err != nil || !created || len(runs) != 1 || runs[0].Name != name || !runs[0].Ours {
		t.Fatalf("Start = %+v, created %v, %v; want kargo-latch's run %s made", runs, created, err, name)
	}
	want, err := Build(fullInput(t))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Resource(AnalysisRunsResource).Namespace("demo").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !equalSpecs(got, want) {
		t.Errorf("the run made from live reads differs from the golden build:\n got %v\nwant %v", got.Object["spec"], want.Object["spec"])
	}
}

// Kargo's run of the collection is followed, even when kargo-latch could
// not build its own: nothing is made and nothing is refused.
func TestStartFollowsKargosRunWhateverTheBuild(t *testing.T) {
	kargos := object(t, `
apiVersion: argoproj.io/v1alpha1
kind: AnalysisRun
metadata:
  name: test.kargo-made
  namespace: demo
  labels: {kargo.akuity.io/stage: test, kargo.akuity.io/freight-collection: `+collectionID+`}
`)
	c := starterWorld(t, kargos)
	if err := c.Resource(AnalysisTemplatesResource).Namespace("demo").Delete(context.Background(), "web-check", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	runs, created, err := (&Starter{Dynamic: c}).Start(context.Background(), "demo", "test", collectionID, fullInput(t).Name)
	if err != nil || created || len(runs) != 1 || runs[0].Name != "test.kargo-made" || runs[0].Ours {
		t.Errorf("Start = %+v, created %v, %v; want Kargo's run followed", runs, created, err)
	}
	if n := calls(c, "create"); n != 0 {
		t.Errorf("%d creates, want 0", n)
	}
}

// Of several failed reads, what kargo-latch cannot build is reported,
// whichever read ended first: it is a Warning retried later, not an error
// retried at once.
func TestStartReportsWhatCannotBeBuiltFirst(t *testing.T) {
	c := starterWorld(t)
	// The first read fails for a reason retried at once; a later one finds
	// a template missing.
	c.PrependReactor("get", "analysistemplates", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "web-check" {
			return true, nil, apierrors.NewInternalError(errors.New("etcd is away"))
		}
		return false, nil, nil
	})
	if err := c.Resource(AnalysisTemplatesResource).Namespace("demo").Delete(context.Background(), "error-rate", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		_, created, err := (&Starter{Dynamic: c}).Start(context.Background(), "demo", "test", collectionID, fullInput(t).Name)
		if created || reasonOf(t, err) != "TemplateMissing" {
			t.Fatalf("Start: created %v, %v; want TemplateMissing", created, err)
		}
	}
	if n := calls(c, "create"); n != 0 {
		t.Errorf("%d creates, want 0", n)
	}
}

func equalSpecs(a, b *unstructured.Unstructured) bool {
	as, _, _ := unstructured.NestedMap(a.Object, "spec")
	bs, _, _ := unstructured.NestedMap(b.Object, "spec")
	return reflect.DeepEqual(as, bs)
}
