package gatesetting

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	admissionv1 "k8s.io/api/admissionregistration/v1"
)

func TestSettingMatchesUsernamesAndTheWholeRegex(t *testing.T) {
	s, err := Parse(" system:serviceaccount:kargo:kargo-controller , kargo-shard-eu,", "kargo-shard-(us|ap)")
	if err != nil {
		t.Fatal(err)
	}
	for user, want := range map[string]bool{
		DefaultKargoController: true,
		"kargo-shard-eu":       true,
		"kargo-shard-us":       true,
		"x-kargo-shard-us":     false, // matched whole, as the gate matches it
		"kargo-shard-usa":      false,
		"dev":                  false,
	} {
		if got := s.Is(user); got != want {
			t.Errorf("Is(%q) = %v, want %v", user, got, want)
		}
	}
	if _, err := Parse("", "("); err == nil {
		t.Error("an invalid regex was taken")
	}
}

func TestSettingEqualIgnoresOrderAndBlanksNotTheRegex(t *testing.T) {
	a, _ := Parse("b, a", "x|y")
	for _, tc := range []struct {
		usernames, regex string
		want             bool
	}{
		{"a,b", "x|y", true},
		{" a ,b,,a", "x|y", true},
		{"a", "x|y", false},
		{"a,b", "y|x", false}, // the same users, but the policy is not what was given
		{"a,b", "", false},
	} {
		b, err := Parse(tc.usernames, tc.regex)
		if err != nil {
			t.Fatal(err)
		}
		if got := a.Equal(b); got != tc.want {
			t.Errorf("Equal(%q, %q) = %v, want %v", tc.usernames, tc.regex, got, tc.want)
		}
	}
}

// TestFromExpressionReadsTheShippedPolicies: the setting is read back out
// of the policies as the install ships them (the default), and out of the
// layout components/kargo-controllers writes a changed setting into.
func TestFromExpressionReadsTheShippedPolicies(t *testing.T) {
	for _, file := range []string{"../../manifests/components/pause-gate/gate.yaml", "../../manifests/components/gate-people/gate-people.yaml"} {
		exprs := conditionsIn(t, file)
		if len(exprs) != 1 {
			t.Fatalf("%s: %d conditions naming Kargo's controllers, want 1", file, len(exprs))
		}
		for _, expr := range exprs {
			got, ok := fromExpression(expr)
			if !ok {
				t.Fatalf("%s: the setting was not read from %s", file, expr)
			}
			want, _ := Parse(DefaultKargoController, "")
			if !got.Equal(want) {
				t.Errorf("%s: read %s, want %s", file, got, want)
			}
			// As components/kargo-controllers rewrites it.
			changed := strings.Replace(expr, "r'''"+DefaultKargoController+"'''", "r'''a,b'''", 1)
			changed = strings.Replace(changed, "r''''''", "r'''shard-[a-z]+'''", 1)
			changed = strings.Replace(changed, "(?:)(?:)", "(?:)shard-[a-z]+(?:)", 1)
			got, ok = fromExpression(changed)
			want, _ = Parse("b,a", "shard-[a-z]+")
			if !ok || !got.Equal(want) {
				t.Errorf("%s: read %v (%v) from %s, want %s", file, got, ok, changed, want)
			}
		}
	}
	// The anchored literal, which decides, says otherwise than the lone one.
	lopsided := strings.Replace(namesExpr(DefaultKargoController, "a"), "(?:)a(?:)", "(?:).*(?:)", 1)
	for _, expr := range []string{"true", "request.userInfo.username == 'x'", "r'''a''' || r'''b'''", lopsided} {
		if s, ok := fromExpression(expr); ok {
			t.Errorf("read %s from the hand-written %q", s, expr)
		}
	}
}

func conditionsIn(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var p admissionv1.ValidatingAdmissionPolicy
		if err := yaml.Unmarshal([]byte(doc), &p); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, c := range p.Spec.MatchConditions {
			if _, ok := map[string]bool{"from-kargo-controller": true, "not-kargo-auto-promotion": true}[c.Name]; ok {
				exprs = append(exprs, c.Expression)
			}
		}
	}
	return exprs
}
