package verification

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/expr-lang/expr"
)

// Kargo's pkg/expressions EvaluateTemplate, as verification arguments and
// Stage vars use it (json_templates.go):
//   - a string with neither "${{" nor "${%" is returned as is (so "42" stays
//     a string);
//   - otherwise each ${{ … }} or ${% … %} segment (the earliest opening
//     first; an unclosed one is an error) is compiled with the given
//     functions plus quote() and unsafeQuote(), without a typed env, and run
//     against the env map; a string result is inserted as is, any other
//     result JSON-encoded;
//   - the joined text then loses one trailing newline; text wrapped in double
//     quotes loses them and stays a string (newline restored); else text that
//     parses as a float64 becomes one, then as a bool, then as any JSON
//     value; else it stays a string (newline restored).
//
// Before the alternative delimiter "${%" (Kargo PR #5473, December 2025)
// quote() differed; kargo-latch follows the behaviour since then.
var delimiters = [...]struct{ open, close string }{{"${{", "}}"}, {"${%", "%}"}}

// disabledBuiltins read the clock or the local time zone: Kargo's and
// kargo-latch's answers would differ, so their use is *Unsupported.
var disabledBuiltins = []string{"now", "date", "timezone"}

type evaluator struct {
	env  map[string]any
	opts []expr.Option
}

func newEvaluator(env map[string]any, functions []expr.Option) *evaluator {
	opts := append([]expr.Option{}, functions...)
	for _, name := range disabledBuiltins {
		opts = append(opts, expr.DisableBuiltin(name))
	}
	opts = append(opts,
		expr.Function("quote", quoteFunc, new(func(any) string)),
		expr.Function("unsafeQuote", unsafeQuoteFunc, new(func(any) string)),
	)
	return &evaluator{env: env, opts: opts}
}

// evaluate evaluates one template string.
func (e *evaluator) evaluate(template string) (any, error) {
	if !strings.Contains(template, delimiters[0].open) && !strings.Contains(template, delimiters[1].open) {
		return template, nil
	}
	var out strings.Builder
	rest := template
	for {
		at, d := -1, -1
		for i, dl := range delimiters {
			if j := strings.Index(rest, dl.open); j >= 0 && (at < 0 || j < at) {
				at, d = j, i
			}
		}
		if at < 0 {
			out.WriteString(rest)
			break
		}
		out.WriteString(rest[:at])
		body := rest[at+len(delimiters[d].open):]
		end := strings.Index(body, delimiters[d].close)
		if end < 0 {
			return nil, fmt.Errorf("unclosed expression: expected %q but reached end of template", delimiters[d].close)
		}
		text, err := e.run(body[:end])
		if err != nil {
			return nil, err
		}
		out.WriteString(text)
		rest = body[end+len(delimiters[d].close):]
	}
	return typed(out.String()), nil
}

func (e *evaluator) run(expression string) (string, error) {
	program, err := expr.Compile(expression, e.opts...)
	if err != nil {
		return "", err
	}
	result, err := expr.Run(program, e.env)
	if err != nil {
		return "", err
	}
	if s, ok := result.(string); ok {
		return s, nil
	}
	b, err := json.Marshal(result)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// typed gives the joined text the type Kargo gives it.
func typed(result string) any {
	trimmed, hadNewline := strings.CutSuffix(result, "\n")
	restore := func(s string) string {
		if hadNewline {
			return s + "\n"
		}
		return s
	}
	if len(trimmed) > 1 && strings.HasPrefix(trimmed, `"`) && strings.HasSuffix(trimmed, `"`) {
		return restore(trimmed[1 : len(trimmed)-1])
	}
	if f, err := strconv.ParseFloat(trimmed, 64); err == nil {
		return f
	}
	if b, err := strconv.ParseBool(trimmed); err == nil {
		return b
	}
	var v any
	if err := json.Unmarshal([]byte(trimmed), &v); err == nil {
		return v
	}
	return restore(trimmed)
}

// quoteFunc: a string is Go-quoted (%q); anything else as unsafeQuote.
func quoteFunc(a ...any) (any, error) {
	if s, ok := a[0].(string); ok {
		return fmt.Sprintf("%q", s), nil
	}
	return unsafeQuoteFunc(a...)
}

// unsafeQuoteFunc: the value's JSON inside double quotes.
func unsafeQuoteFunc(a ...any) (any, error) {
	b, err := json.Marshal(a[0])
	if err != nil {
		return nil, fmt.Errorf("error applying quote() function: %w", err)
	}
	return fmt.Sprintf(`"%s"`, b), nil
}
