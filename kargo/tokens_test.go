package kargo

import "testing"

func TestRequestTokenID(t *testing.T) {
	for value, want := range map[string]string{
		"":   "",
		"v1": "v1",
		` {"id":"v2","actor":"kubernetes:alice","controlPlane":false}`: "v2",
		`{"actor":"x"}`: "",
		`{garbage`:      "",
	} {
		if got := RequestTokenID(value); got != want {
			t.Errorf("RequestTokenID(%q) = %q, want %q", value, got, want)
		}
	}
}
