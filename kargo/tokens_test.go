package kargo

import (
	"encoding/json"
	"strings"
	"testing"
)

// Kargo's own reading (pkg/api/annotations.go): valid JSON decodes as a
// VerificationRequest, and a failed decode or an empty id is no request;
// anything else is the id.
func TestRequestTokenIDReadsAsKargo(t *testing.T) {
	for _, c := range []struct{ value, want string }{
		{"", ""},
		{"v1", "v1"},
		{`{"id":"v2","actor":"kubernetes:alice","controlPlane":false}`, "v2"},
		{"\t" + `{"id":"v3"}`, "v3"},
		{`{"actor":"x"}`, ""},
		{`{garbage`, "{garbage"},
		{`"x"`, ""},
		{`123`, ""},
		{"   ", "   "},
	} {
		if got := RequestTokenID(c.value); got != c.want {
			t.Errorf("RequestTokenID(%q) = %q, want %q", c.value, got, c.want)
		}
	}
}

// A token larger than the mirror keeps is read before it is cut: a long
// valid request still names its id.
func TestMirrorKeepsTheTokensID(t *testing.T) {
	long := `{"id":"v9","actor":"` + strings.Repeat("a", 4*maxTokenLen) + `"}`
	for name, decode := range stageDecoders(t, map[string]any{AbortAnnotation: long, ReverifyAnnotation: `"x"`}) {
		if got := decode.Annotations[AbortAnnotation]; got != "v9" {
			t.Errorf("%s: abort token kept as %q, want its id v9", name, got)
		}
		if got, ok := decode.Annotations[ReverifyAnnotation]; ok && got != "" {
			t.Errorf("%s: reverify token kept as %q, want no request", name, got)
		}
	}
}

// stageDecoders reads busyStage with the given annotations each way the
// operator reads a Stage.
func stageDecoders(t *testing.T, annotations map[string]any) map[string]*Stage {
	t.Helper()
	b, err := json.Marshal(annotations)
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Replace(busyStage, `{"kargo-latch.io/latch-deadline": "10m", "kubectl.kubernetes.io/last-applied-configuration": "{}"}`, string(b), 1)
	fromMaps, ok := viaMaps([]byte(doc))
	if !ok {
		t.Fatal("bad test document")
	}
	return map[string]*Stage{"unstructured": StageFromUnstructured(mustUnstructured(t, doc)), "maps": fromMaps, "codec": viaDocs(t, []byte(doc))}
}
