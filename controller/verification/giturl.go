package verification

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"unicode"
)

// normalizeGit follows Kargo's pkg/urls NormalizeGit, which commitFrom
// applies to both sides of its comparison:
//   - a URL with internal (possibly percent-encoded) whitespace is kept as is;
//     other whitespace and unprintable characters are removed;
//   - http(s):// and ssh:// URLs are parsed (a query makes them kept as is),
//     lose their user info unless ssh, a trailing "/" and then ".git", and are
//     lower-cased;
//   - [user@]host[:path] (scp syntax) becomes ssh://[user@]host[/path], with
//     the same trimming, lower-cased;
//   - anything else is kept as is.
func normalizeGit(repo string) string {
	if hasInternalSpace(repo) {
		return repo
	}
	orig := repo
	repo = strings.Map(dropSpace, repo)
	if repo == "" {
		return orig
	}
	if strings.HasPrefix(repo, "http://") || strings.HasPrefix(repo, "https://") || strings.HasPrefix(repo, "ssh://") {
		u, err := url.Parse(repo)
		if err != nil || len(u.Query()) > 0 {
			return orig
		}
		if !strings.HasPrefix(repo, "ssh://") {
			u.User = nil
		}
		u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), ".git")
		return strings.ToLower(u.String())
	}
	m := scpSyntax.FindStringSubmatch(repo)
	if m == nil {
		return orig
	}
	p, err := url.Parse(m[2])
	if err != nil {
		return orig
	}
	p.Path = strings.TrimSuffix(strings.TrimSuffix(p.Path, "/"), ".git")
	if p.Path == "" {
		return strings.ToLower("ssh://" + m[1])
	}
	return strings.ToLower(fmt.Sprintf("ssh://%s/%s", m[1], p.String()))
}

var scpSyntax = regexp.MustCompile(`^((?:[\w-]+@)?[\w-]+(?:\.[\w-]+)*)(?::(.*))?$`)

func isSpaceish(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }

func dropSpace(r rune) rune {
	if isSpaceish(r) {
		return -1
	}
	return r
}

func hasInternalSpace(repo string) bool {
	if unescaped, err := url.PathUnescape(repo); err == nil {
		repo = unescaped
	}
	trimmed := strings.TrimRightFunc(strings.TrimLeftFunc(repo, isSpaceish), isSpaceish)
	return strings.Map(dropSpace, trimmed) != trimmed
}
