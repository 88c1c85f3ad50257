// Package doclinks checks the relative links of the project's Markdown: that
// each names a file of the repository that exists and, with a #fragment into
// a Markdown file, a heading of that file, by the anchors GitHub gives
// headings. Its test runs the check on the README, docs/ and the chart's
// README, so a page moved or a heading renamed breaks `make unit`, not a
// reader's click.
package doclinks

import (
	"bufio"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// A Problem is one link that does not resolve.
type Problem struct {
	File   string // relative to the root, slash-separated
	Line   int
	Target string
	Why    string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: (%s): %s", p.File, p.Line, p.Target, p.Why)
}

// A Link is one link target found in a Markdown file.
type Link struct {
	Line   int
	Target string
}

var (
	// The target of an inline link or image: `](target)` or
	// `](target "title")`. Only the target, which CommonMark keeps on one
	// line, whereas a link's text may wrap.
	inlineLink = regexp.MustCompile(`\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+"[^"]*")?\s*\)`)
	// A link reference definition: `[label]: target`.
	referenceDef = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	// An HTML link, and an HTML anchor of one's own.
	htmlHref   = regexp.MustCompile(`<a\s[^>]*href="([^"]*)"`)
	htmlAnchor = regexp.MustCompile(`<a\s[^>]*(?:id|name)="([^"]*)"`)
	heading    = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	// What GitHub renders of a heading's inline markup: a link's text, an
	// image's alt text; HTML tags render to nothing.
	headingLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag     = regexp.MustCompile(`<[^>]+>`)
	scheme      = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	lineAnchor  = regexp.MustCompile(`^L\d+(?:-L\d+)?$`)
)

// Slug is the anchor GitHub gives a heading of this text (its Markdown
// source, inline markup and all), before duplicates are numbered: the
// rendered text lowercased, every character but letters, digits, marks,
// '-', '_' and spaces dropped, and each space turned into '-'.
func Slug(text string) string {
	text = replaceCodeSpans(text, func(code string) string { return code })
	text = headingLink.ReplaceAllString(text, "$1")
	text = htmlTag.ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Anchors lists the anchors of a Markdown document: its headings' slugs,
// a repeated slug numbered -1, -2, … in order as GitHub does, and the ids
// of its own HTML anchors. Lines in fenced code blocks are no headings.
func Anchors(markdown string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	forEachProseLine(markdown, func(_ int, line string) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			return
		}
		slug := Slug(m[2])
		if n := seen[slug]; n > 0 {
			seen[slug]++
			slug = fmt.Sprintf("%s-%d", slug, n)
		} else {
			seen[slug] = 1
		}
		anchors[slug] = true
	})
	return anchors
}

// Links lists the link targets of a Markdown document outside code: code
// blocks and code spans hold examples, not links.
func Links(markdown string) []Link {
	var links []Link
	forEachProseLine(markdown, func(n int, line string) {
		line = replaceCodeSpans(line, func(string) string { return "" })
		for _, re := range []*regexp.Regexp{inlineLink, referenceDef, htmlHref} {
			for _, m := range re.FindAllStringSubmatch(line, -1) {
				links = append(links, Link{Line: n, Target: strings.Trim(m[1], "<>")})
			}
		}
	})
	return links
}

// replaceCodeSpans replaces each code span of a line (a run of backticks,
// up to the next run of as many) with what fn makes of its content. A run
// with no match is literal text.
func replaceCodeSpans(line string, fn func(code string) string) string {
	var b strings.Builder
	for {
		start := strings.Index(line, "`")
		if start < 0 {
			b.WriteString(line)
			return b.String()
		}
		run := len(line[start:]) - len(strings.TrimLeft(line[start:], "`"))
		end := closingRun(line[start+run:], run)
		if end < 0 {
			b.WriteString(line[:start+run])
			line = line[start+run:]
			continue
		}
		b.WriteString(line[:start])
		b.WriteString(fn(line[start+run : start+run+end]))
		line = line[start+run+end+run:]
	}
}

// closingRun returns the index in s of the first run of exactly n
// backticks, or -1.
func closingRun(s string, n int) int {
	for i := 0; i < len(s); {
		if s[i] != '`' {
			i++
			continue
		}
		j := i
		for j < len(s) && s[j] == '`' {
			j++
		}
		if j-i == n {
			return i
		}
		i = j
	}
	return -1
}

// forEachProseLine calls fn with each line (numbered from 1) outside fenced
// code blocks. A fence may be indented, as in a list item.
func forEachProseLine(markdown string, fn func(n int, line string)) {
	fence := ""
	sc := bufio.NewScanner(strings.NewReader(markdown))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " \t")
		if fence != "" {
			if closesFence(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if f := fenceOpening(trimmed); f != "" {
			fence = f
			continue
		}
		fn(n, line)
	}
}

// fenceOpening returns the fence a line opens (three or more backticks or
// tildes), or "".
func fenceOpening(trimmed string) string {
	for _, c := range []string{"`", "~"} {
		n := len(trimmed) - len(strings.TrimLeft(trimmed, c))
		if n >= 3 {
			return strings.Repeat(c, n)
		}
	}
	return ""
}

// closesFence says whether a line closes the fence: at least as many of
// its character, and nothing else.
func closesFence(trimmed, fence string) bool {
	rest := strings.TrimLeft(trimmed, fence[:1])
	return len(trimmed)-len(rest) >= len(fence) && strings.TrimSpace(rest) == ""
}

// Check checks every relative link of the named Markdown files (paths
// relative to root): the file or directory it names exists inside root,
// and its #fragment, if any, is an anchor of the Markdown file it names
// (or a line anchor, #L12, of another file). Links with a scheme (https:,
// mailto:) are not followed.
func Check(root string, files []string) ([]Problem, error) {
	anchorsOf := map[string]map[string]bool{}
	anchors := func(path string) (map[string]bool, error) {
		if a, ok := anchorsOf[path]; ok {
			return a, nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		anchorsOf[path] = Anchors(string(data))
		return anchorsOf[path], nil
	}
	var problems []Problem
	for _, file := range files {
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			return nil, err
		}
		for _, link := range Links(string(data)) {
			why, err := checkTarget(root, file, link.Target, anchors)
			if err != nil {
				return nil, err
			}
			if why != "" {
				problems = append(problems, Problem{File: filepath.ToSlash(file), Line: link.Line, Target: link.Target, Why: why})
			}
		}
	}
	return problems, nil
}

// checkTarget says what is wrong with one link of file, or "".
func checkTarget(root, file, target string, anchors func(string) (map[string]bool, error)) (string, error) {
	if target == "" {
		return "empty link", nil
	}
	if scheme.MatchString(target) {
		return "", nil
	}
	rawPath, fragment, _ := strings.Cut(target, "#")
	path, err := url.PathUnescape(rawPath)
	if err != nil {
		return fmt.Sprintf("bad escape in the path: %v", err), nil
	}
	if strings.HasPrefix(path, "/") {
		return "an absolute path: write it relative to the file", nil
	}
	resolved := filepath.Join(root, file)
	if path != "" {
		resolved = filepath.Join(filepath.Dir(resolved), filepath.FromSlash(path))
	}
	rel, err := filepath.Rel(root, resolved)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "leaves the repository: the link works nowhere but in this checkout", nil
	}
	info, err := os.Stat(resolved)
	if err != nil {
		return fmt.Sprintf("no such file or directory: %s", filepath.ToSlash(rel)), nil
	}
	if fragment == "" {
		return "", nil
	}
	switch {
	case info.IsDir():
		return "an anchor into a directory", nil
	case strings.EqualFold(filepath.Ext(resolved), ".md"):
		a, err := anchors(resolved)
		if err != nil {
			return "", err
		}
		if !a[fragment] {
			return fmt.Sprintf("%s has no heading with the anchor #%s", filepath.ToSlash(rel), fragment), nil
		}
	case !lineAnchor.MatchString(fragment):
		return fmt.Sprintf("#%s: only line anchors (#L12) point into a file that is not Markdown", fragment), nil
	}
	return "", nil
}
