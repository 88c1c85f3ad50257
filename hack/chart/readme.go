package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// parametersHeading starts the generated part of the README: everything
// from it to the end is replaced; everything before it is written by hand.
const parametersHeading = "## Parameters"

// param is one `## @param KEY DESCRIPTION` comment of values.yaml.
type param struct {
	key, description string
}

// section is one `## @section TITLE` of values.yaml and its params.
type section struct {
	title  string
	params []param
}

// renderReadme replaces the Parameters part of readme with tables of the
// params of values, in their order, one per section.
func renderReadme(readme, values []byte) ([]byte, error) {
	sections, err := parseParams(values)
	if err != nil {
		return nil, err
	}
	var tree map[string]any
	if err := yaml.Unmarshal(values, &tree); err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	if err := checkCoverage(tree, sections); err != nil {
		return nil, err
	}
	head, _, found := bytes.Cut(readme, []byte(parametersHeading+"\n"))
	if !found {
		return nil, fmt.Errorf("README has no %q heading to generate below", parametersHeading)
	}
	var b bytes.Buffer
	b.Write(head)
	b.WriteString(parametersHeading + "\n\n")
	b.WriteString("Generated from the `## @param` comments of values.yaml by `make generate`; do not edit below.\n")
	for _, s := range sections {
		fmt.Fprintf(&b, "\n### %s\n\n| Name | Description | Value |\n| ---- | ----------- | ----- |\n", s.title)
		for _, p := range s.params {
			v, _ := lookup(tree, p.key)
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", p.key, cell(p.description), cell("`"+formatValue(v)+"`"))
		}
	}
	return b.Bytes(), nil
}

// parseParams reads the sections and params of values.yaml's comments.
func parseParams(values []byte) ([]section, error) {
	var sections []section
	sc := bufio.NewScanner(bytes.NewReader(values))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if title, ok := strings.CutPrefix(line, "## @section "); ok {
			sections = append(sections, section{title: strings.TrimSpace(title)})
			continue
		}
		rest, ok := strings.CutPrefix(line, "## @param ")
		if !ok {
			continue
		}
		key, description, _ := strings.Cut(strings.TrimSpace(rest), " ")
		if len(sections) == 0 {
			return nil, fmt.Errorf("values.yaml: @param %s comes before any @section", key)
		}
		if strings.TrimSpace(description) == "" {
			return nil, fmt.Errorf("values.yaml: @param %s has no description", key)
		}
		s := &sections[len(sections)-1]
		s.params = append(s.params, param{key: key, description: strings.TrimSpace(description)})
	}
	return sections, sc.Err()
}

// checkCoverage holds the values and their params in step: every param
// names a value, and every value has a param, on itself or on a map that
// holds it (such as controller.resources).
func checkCoverage(tree map[string]any, sections []section) error {
	documented := map[string]bool{}
	var errs []error
	for _, s := range sections {
		for _, p := range s.params {
			if documented[p.key] {
				errs = append(errs, fmt.Errorf("values.yaml: @param %s appears twice", p.key))
			}
			documented[p.key] = true
			if _, ok := lookup(tree, p.key); !ok {
				errs = append(errs, fmt.Errorf("values.yaml: @param %s names no value", p.key))
			}
		}
	}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			path := prefix + k
			if documented[path] {
				continue
			}
			if sub, ok := m[k].(map[string]any); ok && len(sub) > 0 {
				walk(path+".", sub)
				continue
			}
			errs = append(errs, fmt.Errorf("values.yaml: %s has no ## @param comment", path))
		}
	}
	walk("", tree)
	return errors.Join(errs...)
}

// lookup finds the value at a dotted path.
func lookup(tree map[string]any, key string) (any, bool) {
	var cur any = tree
	for part := range strings.SplitSeq(key, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// formatValue shows a default as readme-generator-for-helm does: a string
// as it is (the empty one as ""), anything else as JSON.
func formatValue(v any) string {
	if s, ok := v.(string); ok {
		if s == "" {
			return `""`
		}
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// cell escapes text for a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}
