package cli

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestCheckReason: what a reason may be, and the suggestion for what it may
// not. Every accepted reason is also a valid label value (it is copied into
// the label kargo-latch.io/reason).
func TestCheckReason(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"", "Manual", "ProjectPause", "DBMigration", "PromotionFailed", "Incident1234", strings.Repeat("A", 63)} {
		if err := checkReason(ok, false); err != nil {
			t.Errorf("%q: %v, want accepted", ok, err)
		}
		if errs := validation.IsValidLabelValue(ok); len(errs) != 0 {
			t.Errorf("%q is accepted but no label value: %v", ok, errs)
		}
	}
	for _, c := range []struct{ reason, want string }{
		{"DB migration", `Did you mean --reason DBMigration --message "DB migration"?`},
		{"db migration", "Did you mean --reason DbMigration"},
		{"INC-1234", "Did you mean --reason INC1234"},
		{"manual", "Did you mean --reason Manual"},
		{"über", "one CamelCase word"},
		{"1st try", "starting with a capital letter"},
		{strings.Repeat("A", 64), "at most 63"},
	} {
		err := checkReason(c.reason, false)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "put free text in --message") {
			t.Errorf("%q: %v, want an error containing %q", c.reason, err, c.want)
		}
	}
	if err := checkReason("DB migration", true); err == nil || !strings.HasSuffix(err.Error(), "Did you mean --reason DBMigration?") {
		t.Errorf("with a message of its own: %v, want the reason suggested alone", err)
	}
}
