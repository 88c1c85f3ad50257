package cluster

import (
	"maps"
	"slices"
)

// overrideArgs returns args, a list of "--flag", "value" pairs, with the
// value of each flag over names replaced by over's, or the flag dropped
// when over's value is empty; over's flags args lacks come last, in order
// of name.
func overrideArgs(args []string, over map[string]string) []string {
	out := make([]string, 0, len(args)+2*len(over))
	seen := map[string]bool{}
	for i := 0; i+1 < len(args); i += 2 {
		flag, value := args[i], args[i+1]
		if v, ok := over[flag]; ok {
			seen[flag] = true
			if v == "" {
				continue
			}
			value = v
		}
		out = append(out, flag, value)
	}
	for _, flag := range slices.Sorted(maps.Keys(over)) {
		if !seen[flag] && over[flag] != "" {
			out = append(out, flag, over[flag])
		}
	}
	return out
}

// argValue is the value of flag in args, "--flag", "value" pairs.
func argValue(args []string, flag string) string {
	for i := 0; i+1 < len(args); i += 2 {
		if args[i] == flag {
			return args[i+1]
		}
	}
	return ""
}
