package verification

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestShortenLabelValue(t *testing.T) {
	// Expected values computed independently (Python: value[:54] with
	// trailing dashes stripped, "-", sha256 hex[:8]).
	tests := map[string]string{
		"test":                       "test",
		strings.Repeat("a", 63):      strings.Repeat("a", 63),
		strings.Repeat("a", 64):      strings.Repeat("a", 54) + "-ffe054fe",
		strings.Repeat("stage-", 11): "stage-stage-stage-stage-stage-stage-stage-stage-stage-7216074d",
		strings.Repeat("x", 53) + "-----" + strings.Repeat("y", 10): strings.Repeat("x", 53) + "-96a7aa7a",
	}
	for in, want := range tests {
		got := ShortenLabelValue(in)
		if got != want {
			t.Errorf("ShortenLabelValue(%q) = %q, want %q", in, got, want)
		}
		if errs := validation.IsValidLabelValue(got); len(errs) > 0 {
			t.Errorf("ShortenLabelValue(%q) = %q is not a label value: %v", in, got, errs)
		}
	}
}
