package kargo

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	sjson "sigs.k8s.io/json"
)

// The Stage client's decoder must read every Stage exactly as the dynamic
// informer's transform does: the operator switches between them (unit tests
// use the dynamic one) and the latch must not tell which fed it.

// viaMaps reads doc as the dynamic client (unstructured's JSON decoding)
// and stageFromMap do; ok is false
// when doc is no JSON object.
func viaMaps(doc []byte) (*Stage, bool) {
	var obj map[string]any
	if err := sjson.UnmarshalCaseSensitivePreserveInts(doc, &obj); err != nil || obj == nil {
		return nil, false
	}
	return stageFromMap(obj), true
}

func viaDocs(t testing.TB, doc []byte) *Stage {
	t.Helper()
	obj, _, err := stageCodec{}.Decode(doc, nil, nil)
	if err != nil {
		t.Fatalf("the Stage codec refused a document the maps read: %v\n%s", err, doc)
	}
	s, ok := obj.(*Stage)
	if !ok {
		t.Fatalf("decoded a %T, want *Stage", obj)
	}
	return s
}

// stageDocs are Stages as Kargo writes them and as garbage makes them.
func stageDocs() map[string]string {
	docs := map[string]string{
		"busy Stage of stage_test.go":                           busyStage,
		"a busy Stage as the bench writes it, before its latch": busyBenchStage(""),
		"a busy Stage as the bench writes it, latched":          busyBenchStage(`{"version":1,"phase":"Latched","promotion":"p"}`),
		"no status":            `{"kind": "Stage", "metadata": {"name": "a", "namespace": "p"}}`,
		"null status and spec": `{"kind": "Stage", "metadata": {"name": "a"}, "spec": null, "status": null}`,
		"mistyped fields": `{"kind": "Stage", "metadata": {"name": "a", "namespace": "p", "annotations": {"kargo-latch.io/x": 5, "kargo-latch.io/y": "ok"}, "labels": "nope"},
			"spec": {"verification": null},
			"status": {"health": {"status": 7, "output": "x"}, "freightHistory": [5], "currentPromotion": {"name": ["x"]}}}`,
		"a mistyped freight history entry":    `{"metadata": {"name": "a"}, "status": {"freightHistory": [{"id": 5, "items": {"a": "x", "b": {"name": "f"}}, "verificationHistory": ["x"]}]}}`,
		"freight history not an array":        `{"metadata": {"name": "a"}, "status": {"freightHistory": {"id": "x"}}}`,
		"an empty freight history":            `{"metadata": {"name": "a"}, "status": {"freightHistory": []}}`,
		"unparsable times":                    `{"metadata": {"name": "a", "creationTimestamp": "then", "deletionTimestamp": 5}, "status": {"lastPromotion": {"name": "p", "finishedAt": "soon"}}}`,
		"being deleted":                       `{"metadata": {"name": "a", "deletionTimestamp": "2026-11-30T10:00:00Z", "uid": "u", "resourceVersion": "9"}}`,
		"keys spelled otherwise are not read": `{"metadata": {"Name": "a", "name": "b"}, "Status": {"health": {"status": "Healthy"}}, "status": {"Health": {"status": "Unknown"}}}`,
	}
	for name, holds := range map[string]string{
		"in Kargo's shape": `{"Warehouse/w": {"freightName": "f1", "origin": {"kind": "Warehouse", "name": "w"}, "promotionName": "s.01m.f1", "actor": "admin", "createdAt": "2026-12-01T10:00:00Z"},
			"Warehouse/a": {"freightName": "f2", "origin": {"kind": "Warehouse", "name": "a"}}}`,
		"empty":                    `{}`,
		"null":                     `null`,
		"an array":                 `[{"freightName": "f1"}]`,
		"entries not objects":      `{"Warehouse/w": "f1", "Warehouse/x": null, "Warehouse/y": 5, "Warehouse/z": {"freightName": "f3"}}`,
		"mistyped fields":          `{"Warehouse/w": {"freightName": 7, "actor": ["x"], "promotionName": {}, "createdAt": "yesterday"}}`,
		"keys spelled otherwise":   `{"Warehouse/w": {"FreightName": "f1", "Actor": "admin", "createdat": "2026-12-01T10:00:00Z"}}`,
		"fractional creation time": `{"Warehouse/w": {"freightName": "f1", "createdAt": "2026-12-01T10:00:00.123456Z"}}`,
	} {
		docs["effective holds: "+name] = `{"metadata": {"name": "a"}, "status": {"autoPromotionHolds": {"Warehouse/old": {"freightName": "f0"}}, "effectiveAutoPromotionHolds": ` + holds + `}}`
	}
	for name, output := range map[string]string{
		"apps in Kargo's shape":              `[{"applicationStatuses": [{"Name": "a", "Namespace": "argocd", "health": {"status": "Healthy"}, "sync": {"status": "Synced"}}]}]`,
		"apps with lower-case keys":          `[{"applicationStatuses": [{"name": "a", "namespace": "x", "health": {"status": "Healthy"}}]}]`,
		"an empty Name, a name":              `[{"applicationStatuses": [{"Name": "", "name": "a"}]}]`,
		"another checker's output":           `[{"deployments": [{"name": "a"}]}]`,
		"one known and one other":            `[{"applicationStatuses": [{"Name": "a"}]}, {"other": 1}]`,
		"an App without a name":              `[{"applicationStatuses": [{"Namespace": "x"}]}]`,
		"App entries not objects":            `[{"applicationStatuses": ["a", 5]}]`,
		"applicationStatuses a string":       `[{"applicationStatuses": "a"}]`,
		"a mistyped check before a good one": `[{"applicationStatuses": "a"}, {"applicationStatuses": [{"Name": "b"}]}]`,
		"an object check before a good one":  `[{"applicationStatuses": {"Name": "a"}}, {"applicationStatuses": [{"Name": "b"}]}]`,
		"numbers for strings":                `[{"applicationStatuses": [{"Name": 7, "health": {"status": 1}}]}]`,
		"an object":                          `{"applicationStatuses": [{"Name": "a"}]}`,
		"a string":                           `"Healthy"`,
		"an empty array":                     `[]`,
		"checks not objects":                 `[1, "x"]`,
		"null":                               `null`,
	} {
		docs["health output: "+name] = `{"metadata": {"name": "a"}, "status": {"health": {"status": "Progressing", "output": ` + output + `}}}`
	}
	// The health checks the last promotion left, beside the health output
	// (as in TestMirrorCountsHealthChecksAndOutputs).
	const argoCD = `{"applicationStatuses": [{"Name": "a", "Namespace": "argocd", "health": {"status": "Healthy"}, "sync": {"status": "Synced"}}]}`
	const check = `{"uses": "argocd-update", "config": {"apps": [{"name": "a", "namespace": "argocd"}]}}`
	for name, tc := range map[string]struct{ healthChecks, output string }{
		"one check, its output":             {`[` + check + `]`, `[` + argoCD + `]`},
		"two checks, one output":            {`[` + check + `,` + check + `]`, `[` + argoCD + `]`},
		"no checks recorded":                {`null`, `[` + argoCD + `]`},
		"an empty array":                    {`[]`, `[]`},
		"checks and output of other shapes": {`[1, "x"]`, `[1, "x", {}]`},
		"neither an array":                  {`{"uses": "x"}`, `"Healthy"`},
		"a string":                          {`"x"`, `null`},
	} {
		docs["health checks: "+name] = `{"metadata": {"name": "a"}, "status": {"lastPromotion": {"name": "p", "status": {"phase": "Succeeded", "healthChecks": ` +
			tc.healthChecks + `}}, "health": {"status": "Progressing", "output": ` + tc.output + `}}}`
	}
	docs["health checks: no status of the last promotion"] = `{"metadata": {"name": "a"}, "status": {"lastPromotion": {"name": "p", "status": null}}}`
	// A kept garbage record, which the mirror leaves out (as in
	// TestMirrorLeavesOutTheKeptGarbage), beside the record and other keys.
	for name, annotations := range map[string]string{
		"beside a record": `{"kargo-latch.io/state": "{\"version\":1,\"phase\":\"Latched\",\"promotion\":\"p\"}",
			"kargo-latch.io/invalid-state": "{\"version\":1,\"phase\":\"Failed\",\"note\":\"` + strings.Repeat("x", 1<<10) + `",
			"kargo-latch.io/latch-deadline": "10m", "example.com/foreign": "x"}`,
		"alone":      `{"kargo-latch.io/invalid-state": "garbage"}`,
		"empty":      `{"kargo-latch.io/invalid-state": ""}`,
		"mistyped":   `{"kargo-latch.io/invalid-state": 5, "kargo-latch.io/state": "{}"}`,
		"null":       `{"kargo-latch.io/invalid-state": null}`,
		"misspelled": `{"kargo-latch.io/Invalid-State": "garbage", "Kargo-latch.io/invalid-state": "garbage"}`,
	} {
		docs["kept garbage: "+name] = `{"metadata": {"name": "a", "annotations": ` + annotations + `}}`
	}
	return docs
}

// busyBenchStage is a Stage in service for a while, with 40 Apps, 10
// freightHistory entries of 10 verifications each, and record as its state.
func busyBenchStage(record string) string {
	var history, apps []string
	for i := range 10 {
		var v []string
		for j := range 10 {
			v = append(v, fmt.Sprintf(`{"id": "v-%d-%d", "actor": "controller:kargo", "phase": "Successful", "startTime": "2026-11-30T07:58:16Z",
				"analysisRun": {"namespace": "bench", "name": "s.f.%d", "phase": "Successful"}}`, i, j, j))
		}
		history = append(history, fmt.Sprintf(`{"id": "c%d", "items": {"Warehouse/w": {"name": "f%d", "origin": {"kind": "Warehouse", "name": "w"}}}, "verificationHistory": [%s]}`,
			i, i, strings.Join(v, ",")))
	}
	for i := range 40 {
		apps = append(apps, fmt.Sprintf(`{"Name": "s-app-%02d", "Namespace": "argocd", "health": {"status": "Healthy"}, "sync": {"status": "Synced", "revision": "8f14e45"},
			"operationState": {"phase": "Succeeded", "operation": {"info": [{"name": "kargo.akuity.io/promotion", "value": "s.01m.8f14e45"}]}}}`, i))
	}
	annotations := `{"kubectl.kubernetes.io/last-applied-configuration": "{\"big\": true}"}`
	if record != "" {
		b, _ := json.Marshal(map[string]string{StateAnnotation: record, "other": "x"})
		annotations = string(b)
	}
	return fmt.Sprintf(`{"apiVersion": "kargo.akuity.io/v1alpha1", "kind": "Stage",
		"metadata": {"name": "s", "namespace": "bench", "uid": "u", "resourceVersion": "7", "generation": 1, "creationTimestamp": "2026-11-30T07:00:00Z",
			"annotations": %s, "managedFields": [{"manager": "kargo", "fieldsV1": {"f:status": {}}}]},
		"spec": {"requestedFreight": [{"origin": {"kind": "Warehouse", "name": "w"}, "sources": {"direct": true}}]},
		"status": {"lastPromotion": {"name": "p", "finishedAt": "2026-11-30T07:58:16Z", "freight": {"name": "f0"}, "status": {"phase": "Succeeded"}},
			"freightHistory": [%s],
			"health": {"status": "Healthy", "output": [{"applicationStatuses": [%s]}]}}}`,
		annotations, strings.Join(history, ","), strings.Join(apps, ","))
}

func TestStageCodecReadsAsTheMapsDo(t *testing.T) {
	for name, doc := range stageDocs() {
		t.Run(name, func(t *testing.T) {
			want, ok := viaMaps([]byte(doc))
			if !ok {
				t.Fatalf("bad test document:\n%s", doc)
			}
			if diff := cmp.Diff(want, viaDocs(t, []byte(doc))); diff != "" {
				t.Errorf("the Stage codec reads otherwise than the maps (-maps +codec):\n%s", diff)
			}
		})
	}
}

func TestStageCodecReadsLists(t *testing.T) {
	list := `{"kind": "StageList", "apiVersion": "kargo.akuity.io/v1alpha1", "metadata": {"resourceVersion": "99", "continue": "c"},
		"items": [` + busyBenchStage("") + `, {"metadata": {"name": "b"}}]}`
	obj, _, err := stageCodec{}.Decode([]byte(list), nil, &StageList{})
	if err != nil {
		t.Fatal(err)
	}
	got, ok := obj.(*StageList)
	if !ok || got.ResourceVersion != "99" || got.Continue != "c" || len(got.Items) != 2 {
		t.Fatalf("decoded %#v, want a StageList at 99 with 2 items", obj)
	}
	want, _ := viaMaps([]byte(busyBenchStage("")))
	if diff := cmp.Diff(*want, got.Items[0]); diff != "" {
		t.Errorf("first item (-maps +codec):\n%s", diff)
	}
}

func TestStageCodecRefusesWhatIsNoStage(t *testing.T) {
	if _, _, err := (stageCodec{}).Decode([]byte(`{"kind": "Table", "rows": []}`), nil, &StageList{}); err == nil {
		t.Error("a Table decoded as an empty StageList: the reflector would empty the cache")
	}
	if _, _, err := (stageCodec{}).Decode([]byte(`{}`), nil, &StageList{}); err == nil {
		t.Error("an empty object decoded as an empty StageList")
	}
	if _, _, err := (stageCodec{}).Decode([]byte(`{"kind": "Table"}`), nil, nil); err == nil {
		t.Error("a Table decoded as a Stage")
	}
}

func TestStageCodecKeepsTheBookmarkThatEndsTheInitialEvents(t *testing.T) {
	obj, _, err := stageCodec{}.Decode([]byte(`{"kind": "Stage", "metadata": {"resourceVersion": "12", "annotations": {"k8s.io/initial-events-end": "true"}}}`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := obj.(*Stage); s.ResourceVersion != "12" || s.Annotations["k8s.io/initial-events-end"] != "true" {
		t.Errorf("bookmark decoded as %+v; the reflector needs its resourceVersion and annotation", s.ObjectMeta)
	}
}

func TestStageCodecDecodesAWatchErrorAsStatus(t *testing.T) {
	obj, _, err := stageCodec{}.Decode([]byte(`{"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "code": 410}`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := obj.(interface{ Status() any }); ok {
		t.Fatalf("unexpected %v", st)
	}
	if fmt.Sprintf("%T", obj) != "*v1.Status" {
		t.Errorf("decoded a %T, want *v1.Status", obj)
	}
}

func TestStageCodecRefusesSyntaxErrors(t *testing.T) {
	if _, _, err := (stageCodec{}).Decode([]byte(`{"metadata": {"name": "a"`), nil, nil); err == nil {
		t.Error("a truncated document decoded without error")
	}
}

// FuzzStageCodec checks the codec against the maps on any JSON Stage whose
// status and status.lastPromotion are objects, as Kargo's CRD schema makes
// them.
func FuzzStageCodec(f *testing.F) {
	for _, doc := range stageDocs() {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		want, ok := viaMaps(doc)
		if !ok || !schemaShaped(doc) {
			return
		}
		if diff := cmp.Diff(want, viaDocs(t, doc)); diff != "" {
			t.Errorf("the Stage codec reads otherwise than the maps (-maps +codec):\n%s\n%s", diff, doc)
		}
	})
}

// schemaShaped reports whether doc is a Stage as an API server may send it
// (no key twice; of kind Stage, or none) whose status and
// status.lastPromotion are objects or absent.
func schemaShaped(doc []byte) bool {
	var obj map[string]any
	// An API server never sends a key twice (it encodes what it decoded).
	if strict, err := sjson.UnmarshalStrict(doc, &obj, sjson.DisallowDuplicateFields); err != nil || len(strict) > 0 {
		return false
	}
	if kind, present := obj["kind"]; present && kind != "Stage" {
		return false
	}
	status, present := obj["status"]
	if !present || status == nil {
		return true
	}
	st, ok := status.(map[string]any)
	if !ok {
		return false
	}
	lp, present := st["lastPromotion"]
	_, isObject := lp.(map[string]any)
	return !present || lp == nil || isObject
}

func BenchmarkStageDecode(b *testing.B) {
	doc := []byte(busyBenchStage(""))
	b.Run("maps", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		b.ReportAllocs()
		for b.Loop() {
			viaMaps(doc)
		}
	})
	b.Run("codec", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		b.ReportAllocs()
		for b.Loop() {
			viaDocs(b, doc)
		}
	})
}
