package windows

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Kargo's name pattern prefixes (pkg/pattern/matcher.go, ParseNamePattern).
const (
	globPrefix   = "glob:"
	regexPrefix  = "regex:"
	regexpPrefix = "regexp:"
)

// matcher is a compiled PromotionPolicySelector. A nil name or labels
// selects everything, as an empty field does in Kargo.
type matcher struct {
	name   func(string) bool
	labels labels.Selector
}

// compileSelector compiles a selector exactly as Kargo's
// IsAutoPromotionEnabled does (pkg/api/auto_promotion.go): a non-empty name
// goes through pattern.ParseNamePattern, a non-nil label selector through
// metav1.LabelSelectorAsSelector, and a resource must match both. field is
// the selector's path, for errors.
func compileSelector(field string, s *Selector) (matcher, []*WindowError) {
	if s == nil {
		return matcher{}, nil
	}
	var m matcher
	var errs []*WindowError
	if s.Name != "" {
		name, err := compileName(s.Name)
		if err != nil {
			errs = append(errs, &WindowError{Field: field + ".name", Err: err})
		}
		m.name = name
	}
	if s.LabelSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(s.LabelSelector)
		if err != nil {
			errs = append(errs, &WindowError{Field: field + ".matchExpressions", Err: err})
		}
		m.labels = sel
	}
	return m, errs
}

// compileName mirrors Kargo's pattern.ParseNamePattern:
//   - "glob:" uses github.com/bmatcuk/doublestar/v4 (the version Kargo pins),
//     validated first, and matches the whole name;
//   - "regex:" or "regexp:" is a Go regular expression matched with
//     MatchString: unanchored, so "regex:prod" selects "preprod" too;
//   - anything else is an exact name.
//
// Like Kargo's ProjectConfig webhook for promotionPolicies
// (pkg/webhook/kubernetes/projectconfig/webhook.go), a name with a colon
// and another prefix is refused rather than taken as an exact name that no
// Kubernetes name can equal: "Glob:prod-*" is a typo, and a Deny window that
// silently selects nothing is the worst outcome of a typo.
func compileName(pattern string) (func(string) bool, error) {
	switch {
	case strings.HasPrefix(pattern, globPrefix):
		glob := strings.TrimPrefix(pattern, globPrefix)
		if !doublestar.ValidatePattern(glob) {
			return nil, fmt.Errorf("%q: %w", pattern, doublestar.ErrBadPattern)
		}
		return func(name string) bool { return doublestar.MatchUnvalidated(glob, name) }, nil
	case strings.HasPrefix(pattern, regexPrefix), strings.HasPrefix(pattern, regexpPrefix):
		expr := strings.TrimPrefix(strings.TrimPrefix(pattern, regexpPrefix), regexPrefix)
		re, err := regexp.Compile(expr)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", pattern, err)
		}
		return re.MatchString, nil
	case strings.Contains(pattern, ":"):
		prefix, _, _ := strings.Cut(pattern, ":")
		return nil, fmt.Errorf(`%q: invalid pattern identifier %q: must be "regex", "regexp" or "glob"`, pattern, prefix)
	default:
		return func(name string) bool { return name == pattern }, nil
	}
}

// matches reports whether a resource with this name and these labels is
// selected: by the name if there is one, and by the labels if there is a
// label selector.
func (m matcher) matches(name string, resourceLabels map[string]string) bool {
	if m.name != nil && !m.name(name) {
		return false
	}
	return m.labels == nil || m.labels.Matches(labels.Set(resourceLabels))
}
