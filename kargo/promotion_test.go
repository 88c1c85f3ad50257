package kargo

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// promotionTablePage is a page of Promotions as kube-apiserver v1.37 lists
// them with Kargo's CRD, Accept: application/json;as=Table;v=v1;g=meta.k8s.io
// and includeObject=Metadata (recorded, descriptions shortened): a queued
// auto-promotion (no status: a null Phase cell) and a person's finished one.
const promotionTablePage = `{
 "kind": "Table", "apiVersion": "meta.k8s.io/v1",
 "metadata": {"resourceVersion": "289", "continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6Mjg5fQ", "remainingItemCount": 1},
 "columnDefinitions": [
  {"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0},
  {"name": "Shard", "type": "string", "format": "", "description": "Custom resource definition column (in JSONPath format): .metadata.labels.kargo\\.akuity\\.io/shard", "priority": 0},
  {"name": "Stage", "type": "string", "format": "", "description": "Custom resource definition column (in JSONPath format): .spec.stage", "priority": 0},
  {"name": "Freight", "type": "string", "format": "", "description": "Custom resource definition column (in JSONPath format): .spec.freight", "priority": 0},
  {"name": "Phase", "type": "string", "format": "", "description": "Custom resource definition column (in JSONPath format): .status.phase", "priority": 0},
  {"name": "Age", "type": "date", "format": "", "description": "Custom resource definition column (in JSONPath format): .metadata.creationTimestamp", "priority": 0}
 ],
 "rows": [
  {"cells": ["prod.01m8pxww5x485gjj35s00dfhs2.87fbbff", null, "prod", "87fbbffbda10b16d0ac65ff18af911d3f2706a56", null, "0s"],
   "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": {
    "name": "prod.01m8pxww5x485gjj35s00dfhs2.87fbbff", "namespace": "shop", "uid": "f0b37d76-44a0-48fb-8267-deeea0a4790f",
    "resourceVersion": "287", "generation": 1, "creationTimestamp": "2026-11-30T19:11:22Z",
    "labels": {"kargo.akuity.io/stage": "prod"}, "annotations": {"kargo.akuity.io/stage": "prod"},
    "managedFields": [{"manager": "kargo", "operation": "Update", "apiVersion": "kargo.akuity.io/v1alpha1", "time": "2026-11-30T19:11:22Z",
     "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {".": {}, "f:freight": {}, "f:stage": {}, "f:steps": {}}}}]}}},
  {"cells": ["prod.01m8pxww619gdx8kwkxwj3h95e.3353bb8", null, "prod", "3353bb8e", "Succeeded", "0s"],
   "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": {
    "name": "prod.01m8pxww619gdx8kwkxwj3h95e.3353bb8", "namespace": "shop", "uid": "d83e21c8-1a80-4b5d-b2b3-923276790cec",
    "resourceVersion": "289", "creationTimestamp": "2026-11-30T19:11:22Z",
    "labels": {"kargo.akuity.io/stage": "prod"},
    "annotations": {"kargo.akuity.io/create-actor": "kubernetes:dev", "kargo.akuity.io/abort": "{\"action\":\"terminate\"}", "example.com/other": "x"}}}}
 ]
}`

func TestDecodePromotionTable(t *testing.T) {
	page, err := DecodePromotionTable([]byte(promotionTablePage))
	if err != nil {
		t.Fatal(err)
	}
	created := metav1.NewTime(time.Date(2026, 11, 30, 19, 11, 22, 0, time.UTC))
	want := &PromotionPage{
		ResourceVersion: "289", Continue: "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6Mjg5fQ",
		Items: []*Promotion{
			{
				TypeMeta: metav1.TypeMeta{APIVersion: "kargo.akuity.io/v1alpha1", Kind: "Promotion"},
				ObjectMeta: metav1.ObjectMeta{Name: "prod.01m8pxww5x485gjj35s00dfhs2.87fbbff", Namespace: "shop",
					UID: "f0b37d76-44a0-48fb-8267-deeea0a4790f", ResourceVersion: "287", CreationTimestamp: created},
				Stage: "prod",
			},
			{
				TypeMeta: metav1.TypeMeta{APIVersion: "kargo.akuity.io/v1alpha1", Kind: "Promotion"},
				ObjectMeta: metav1.ObjectMeta{Name: "prod.01m8pxww619gdx8kwkxwj3h95e.3353bb8", Namespace: "shop",
					UID: "d83e21c8-1a80-4b5d-b2b3-923276790cec", ResourceVersion: "289", CreationTimestamp: created,
					Annotations: map[string]string{CreateActorAnnotation: "kubernetes:dev", AbortAnnotation: `{"action":"terminate"}`}},
				Stage: "prod", Phase: "Succeeded",
			},
		},
	}
	if diff := cmp.Diff(want, page); diff != "" {
		t.Errorf("page (-want +got):\n%s", diff)
	}
	if page.Items[0].Terminal() || !page.Items[0].AutoPromotion() || !page.Items[1].Terminal() || page.Items[1].AutoPromotion() {
		t.Error("the queued auto-promotion and the person's finished one are told wrong")
	}
}

// Anything but a table with Kargo's Stage and Phase columns is refused with
// ErrNoPromotionTable, so that the caller reads the Promotions whole rather
// than read every one as a queued Promotion of no Stage.
func TestDecodePromotionTableRefusesOtherShapes(t *testing.T) {
	for name, body := range map[string]string{
		"a plain list":          `{"kind": "PromotionList", "apiVersion": "kargo.akuity.io/v1alpha1", "metadata": {}, "items": []}`,
		"no Phase column":       strings.Replace(promotionTablePage, `"name": "Phase"`, `"name": "Status"`, 1),
		"rows without metadata": strings.ReplaceAll(promotionTablePage, `"object"`, `"x"`),
	} {
		if _, err := DecodePromotionTable([]byte(body)); !errors.Is(err, ErrNoPromotionTable) {
			t.Errorf("%s: %v, want ErrNoPromotionTable", name, err)
		}
	}
}

// ListPromotionTable asks for the table and pages as any list does.
func TestListPromotionTableRequest(t *testing.T) {
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		w.Header().Set("Content-Type", "application/json;as=Table;v=v1;g=meta.k8s.io")
		_, _ = w.Write([]byte(promotionTablePage))
	}))
	defer srv.Close()
	client, err := NewStageClient(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	page, err := ListPromotionTable(context.Background(), client, "shop", metav1.ListOptions{Limit: 500, Continue: "abc", LabelSelector: "kargo.akuity.io/shard=a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 2 {
		t.Errorf("%d Promotions, want 2", len(page.Items))
	}
	q := got.URL.Query()
	if got.URL.Path != "/apis/kargo.akuity.io/v1alpha1/namespaces/shop/promotions" || q.Get("limit") != "500" || q.Get("continue") != "abc" ||
		q.Get("labelSelector") != "kargo.akuity.io/shard=a" || q.Get("includeObject") != "Metadata" {
		t.Errorf("request %s", got.URL)
	}
	if accept := got.Header.Get("Accept"); accept != promotionTableAccept {
		t.Errorf("Accept %q, want %q", accept, promotionTableAccept)
	}
}
