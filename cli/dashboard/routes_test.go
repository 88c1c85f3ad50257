package dashboard

import "testing"

// Only Kubernetes names reach a request to the API server: a Stage "name"
// that would widen the Events' field selector is refused.
func TestBadNames(t *testing.T) {
	for _, c := range []struct {
		project, stage string
		bad            bool
	}{
		{"shop", "prod", false},
		{"shop", "prod.eu-1", false},
		{"shop", "x,type=Normal", true},
		{"shop", "../secrets", true},
		{"Shop", "prod", true},
		{"", "prod", true},
	} {
		if got := badNames(c.project, c.stage) != ""; got != c.bad {
			t.Errorf("badNames(%q, %q) refused %v, want %v", c.project, c.stage, got, c.bad)
		}
	}
}
