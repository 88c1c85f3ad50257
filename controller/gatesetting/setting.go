// Package gatesetting holds the one setting that still names Kargo's
// controllers, and checks it against the installed admission policies.
//
// Promotions are gated by their shape alone (no create-actor, or a
// controller: one), whoever creates them. The identities matter only where
// the shape cannot tell: PromotionRequests (Kargo does not stamp them), the
// opt-in people gate's exemption, and the advice of GateBypassed. The
// policies carry the setting in CEL raw string literals that the install copied
// there (kustomize's components/kargo-controllers, the chart's
// pauseGate.kargoController* values); the operator is given it by flags.
// Two copies can drift: an overlay that forgets the component, a chart
// upgraded with other values than the flags. So the operator reads the
// policies at start and says where they differ from what it was given.
package gatesetting

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// DefaultKargoController is the username of Kargo's controller as Kargo's
// chart installs it: the setting's default, in the flags and the policies.
const DefaultKargoController = "system:serviceaccount:kargo:kargo-controller"

// Setting names Kargo's controllers: exact usernames, and one RE2 regular
// expression that a username must match whole.
type Setting struct {
	Usernames []string
	Regex     string
	anchored  *regexp.Regexp
}

// Parse reads the setting as the flags and the policies write it:
// usernames comma-separated (blanks around them dropped), a regex anchored
// as the policies anchor it (^(?:regex)$).
func Parse(usernames, regex string) (*Setting, error) {
	s := &Setting{Regex: regex}
	for _, u := range strings.Split(usernames, ",") {
		if u = strings.TrimSpace(u); u != "" && !slices.Contains(s.Usernames, u) {
			s.Usernames = append(s.Usernames, u)
		}
	}
	slices.Sort(s.Usernames)
	if regex != "" {
		re, err := regexp.Compile("^(?:" + regex + ")$")
		if err != nil {
			return nil, fmt.Errorf("the regex %q: %w", regex, err)
		}
		s.anchored = re
	}
	return s, nil
}

// Is reports whether username is one of Kargo's controllers.
func (s *Setting) Is(username string) bool {
	return slices.Contains(s.Usernames, username) || (s.anchored != nil && s.anchored.MatchString(username))
}

// Equal reports whether s and o name the same controllers the same way:
// the same usernames (in any order) and the very same regex.
func (s *Setting) Equal(o *Setting) bool {
	return slices.Equal(s.Usernames, o.Usernames) && s.Regex == o.Regex
}

// String shows the setting as its flags would.
func (s *Setting) String() string {
	return fmt.Sprintf("usernames %q, regex %q", strings.Join(s.Usernames, ","), s.Regex)
}

// The matchConditions of kargo-latch's policies that name Kargo's
// controllers (manifests/components/pause-gate and gate-people, and the
// chart's copies): the policy is found by them, under whatever name the
// install gave it (a kustomize namePrefix, a Helm release).
var conditions = []string{"from-kargo-controller", "not-kargo-auto-promotion"}

// fromExpression reads the setting out of such a condition's CEL. The
// install writes it in three CEL raw literals (r and three single quotes on
// each side): the usernames, the regex alone, and the regex anchored.
// Split at the quotes, the usernames are the second piece and the lone
// regex the fourth (the layout
// components/kargo-controllers replaces into). An expression of another
// layout (edited by hand) is not read: ok is false.
func fromExpression(expr string) (s *Setting, ok bool) {
	pieces := strings.Split(expr, "'''")
	if len(pieces) < 7 || !strings.HasSuffix(pieces[0], "r") || !strings.HasSuffix(pieces[2], "r") || !strings.HasSuffix(pieces[4], "r") {
		return nil, false
	}
	// The anchored literal decides the match; the lone one only makes the
	// API server check the regex. Both must say the same.
	if pieces[5] != "^(?:(?:)"+pieces[3]+"(?:))$" {
		return nil, false
	}
	s, err := Parse(pieces[1], pieces[3])
	if err != nil {
		return nil, false
	}
	return s, true
}
