package verification

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// templateSpec is the part of an AnalysisTemplate's spec Kargo carries into
// its run.
type templateSpec struct {
	metrics, args, dryRun, retention []map[string]any
}

// readTemplateSpec takes a template's spec after checking that every field is
// one Kargo's own AnalysisTemplate types carry (api/stubs/rollouts/v1alpha1,
// Argo Rollouts v1.9's types since Kargo's PR #6472): Kargo decodes templates
// into those types, which drop any other field, so a field they lack would
// be missing from Kargo's run but present in ours.
//
// spec.templates (nested references) is carried by those types but read by
// no part of Kargo's builder: Kargo neither fetches the templates it names nor
// merges them, and an AnalysisRun has no such field, so Kargo's run holds the
// listed templates' own metrics, args, dryRun and measurementRetention only.
// So does ours: the references are left out, unread. (Argo Rollouts follows
// them only when its Rollout controller makes a run, not in a run.)
func readTemplateSpec(name string, obj map[string]any) (templateSpec, error) {
	spec, _ := obj["spec"].(map[string]any)
	if path := unknownField(spec, specShape, "spec"); path != "" {
		return templateSpec{}, unknownFieldError(name, path)
	}
	spec, _ = deepCopy(spec).(map[string]any)
	return templateSpec{
		metrics:   objects(spec["metrics"]),
		args:      objects(spec["args"]),
		dryRun:    objects(spec["dryRun"]),
		retention: objects(spec["measurementRetention"]),
	}, nil
}

// droppedByKargo lists the fields (list indices left out) that Argo Rollouts
// v1.10 knows and Kargo v1.11.2's types lack: Kargo's run would go without
// them.
var droppedByKargo = map[string]bool{
	"spec.metrics.provider.datadog.requestTimeout": true,
}

var listIndex = regexp.MustCompile(`\[\d+\]`)

// unknownFieldError says why a field outside specShape means no run: Kargo's
// types drop it for sure, or kargo-latch does not know whether they carry it.
func unknownFieldError(name, path string) *Unsupported {
	if droppedByKargo[listIndex.ReplaceAllString(path, "")] {
		return unsupported(ReasonUnknownField,
			"%s: Kargo v1.11.2 drops field %s (its copy of the Argo Rollouts types lacks it), so Kargo's run would not do what the template says; kargo-latch starts no such run", name, path)
	}
	return unsupported(ReasonUnknownField,
		"%s: field %s is not one kargo-latch knows Kargo v1.11.2's AnalysisTemplate types to carry (Kargo drops the fields they lack), so kargo-latch cannot build the run exactly as Kargo would", name, path)
}

// Kargo's flattenTemplates (pkg/rollouts/analysis_template.go), in the
// combined order: metrics concatenated (a repeated name is an error), dryRun
// and measurementRetention concatenated (a repeated metricName in either is
// an error), args merged by name (two different values are an error; a value
// fills a valueless arg; a later valueFrom never replaces anything).
func flatten(specs []templateSpec) (templateSpec, error) {
	out := templateSpec{metrics: []map[string]any{}}
	seen := map[string]bool{}
	for _, s := range specs {
		for _, m := range s.metrics {
			n := str(m, "name")
			if seen[n] {
				return templateSpec{}, unsupported(ReasonMerge, "flatten metrics: duplicate metric name: %q", n)
			}
			seen[n] = true
			out.metrics = append(out.metrics, m)
		}
		out.dryRun = append(out.dryRun, s.dryRun...)
		out.retention = append(out.retention, s.retention...)
	}
	if n := repeatedMetricName(out.dryRun); n != nil {
		return templateSpec{}, unsupported(ReasonMerge, "flatten dry-run metrics: duplicate dry-run metric name: %q", *n)
	}
	if n := repeatedMetricName(out.retention); n != nil {
		return templateSpec{}, unsupported(ReasonMerge,
			"flatten measurement retention metrics: duplicate measurement retention metric name: %q", *n)
	}
	for _, s := range specs {
		for _, a := range s.args {
			i := slices.IndexFunc(out.args, func(e map[string]any) bool { return str(e, "name") == str(a, "name") })
			if i < 0 {
				out.args = append(out.args, a)
				continue
			}
			have, hasHave := argValue(out.args[i])
			got, hasGot := argValue(a)
			if hasHave && hasGot && have != got {
				return templateSpec{}, unsupported(ReasonMerge,
					"flatten arguments: conflicting values for argument %q: %q and %q", str(a, "name"), have, got)
			}
			if !hasHave && hasGot {
				out.args[i]["value"] = got
			}
		}
	}
	return out, nil
}

func repeatedMetricName(entries []map[string]any) *string {
	seen := map[string]bool{}
	for _, e := range entries {
		n := str(e, "metricName")
		if seen[n] {
			return &n
		}
		seen[n] = true
	}
	return nil
}

// argValue reads an Argument's value; a value key holding a string (even an
// empty one) is a value, as Kargo's *string is.
func argValue(a map[string]any) (string, bool) {
	v, ok := a["value"].(string)
	return v, ok
}

// mergeArgs is Kargo's mergeArgs: each Stage argument with a value replaces
// the value of the template argument of its name (a valueFrom it had stays);
// a Stage argument no template declares is dropped; then every argument must
// have a value or a valueFrom.
func mergeArgs(templateArgs []map[string]any, stageArgs []evaluatedArg) ([]any, error) {
	for _, s := range stageArgs {
		i := slices.IndexFunc(templateArgs, func(a map[string]any) bool { return str(a, "name") == s.name })
		if i >= 0 && s.hasValue {
			templateArgs[i]["value"] = s.value
		}
	}
	out := make([]any, 0, len(templateArgs))
	for _, a := range templateArgs {
		out = append(out, a)
		_, hasValue := argValue(a)
		if vf, _ := a["valueFrom"].(map[string]any); !hasValue && vf == nil {
			return nil, unsupported(ReasonMerge,
				"merge arguments: validate merged arguments: unresolved argument %q: neither Value nor ValueFrom is set", str(a, "name"))
		}
	}
	return out, nil
}

type evaluatedArg struct {
	name, value string
	hasValue    bool
}

// shape lists the fields an object may have; a nil *shape allows anything.
// A list's elements share its shape.
type shape map[string]*shape

func fields(names ...string) *shape {
	s := shape{}
	for _, n := range names {
		s[n] = nil
	}
	return &s
}

func with(base *shape, nested map[string]*shape) *shape {
	for k, v := range nested {
		(*base)[k] = v
	}
	return base
}

var (
	authShape = with(fields(), map[string]*shape{
		"sigv4":  fields("region", "profile", "roleArn"),
		"oauth2": fields("tokenUrl", "clientId", "clientSecret", "scopes"),
	})
	headerShape = fields("key", "value")
	scopeShape  = fields("scope", "region", "step", "start", "end")
	// specShape follows Kargo's api/stubs/rollouts/v1alpha1 analysis_types.go
	// (Argo Rollouts v1.9's types). spec.templates may hold anything: Kargo
	// reads none of it (readTemplateSpec).
	specShape = with(fields("templates"), map[string]*shape{
		"metrics": with(fields("name", "interval", "initialDelay", "count", "successCondition", "failureCondition",
			"failureLimit", "inconclusiveLimit", "consecutiveErrorLimit", "consecutiveSuccessLimit"), map[string]*shape{
			"provider": with(fields("job", "plugin"), map[string]*shape{
				"prometheus": with(fields("address", "query", "timeout", "insecure"), map[string]*shape{
					"authentication": authShape, "headers": headerShape, "rangeQuery": fields("start", "end", "step"),
				}),
				"web": with(fields("method", "url", "body", "timeoutSeconds", "jsonPath", "insecure", "jsonBody"),
					map[string]*shape{"authentication": authShape, "headers": headerShape}),
				"kayenta": with(fields("address", "application", "canaryConfigName", "metricsAccountName",
					"configurationAccountName", "storageAccountName", "lookback"), map[string]*shape{
					"threshold": fields("pass", "marginal"),
					"scopes": with(fields("name"), map[string]*shape{
						"controlScope": scopeShape, "experimentScope": scopeShape}),
				}),
				"datadog": with(fields("interval", "query", "queries", "formula", "apiVersion", "aggregator"),
					map[string]*shape{"secretRef": fields("name", "namespaced")}),
				"wavefront":  fields("address", "query"),
				"newRelic":   fields("profile", "query", "timeout"),
				"graphite":   fields("address", "query"),
				"influxdb":   fields("profile", "query"),
				"skywalking": fields("address", "query", "interval"),
				"cloudWatch": with(fields("interval"), map[string]*shape{
					"metricDataQueries": with(fields("id", "expression", "label", "period", "returnData"), map[string]*shape{
						"metricStat": with(fields("period", "stat", "unit"), map[string]*shape{
							"metric": with(fields("metricName", "namespace"), map[string]*shape{
								"dimensions": fields("name", "value"),
							}),
						}),
					}),
				}),
			}),
		}),
		"args": with(fields("name", "value"), map[string]*shape{
			"valueFrom": with(fields(), map[string]*shape{
				"secretKeyRef": fields("name", "key"),
				"fieldRef":     fields("fieldPath"),
			}),
		}),
		"dryRun":               fields("metricName"),
		"measurementRetention": fields("metricName", "limit"),
	})
)

// unknownField returns the path of the first field of v outside s, or "".
func unknownField(v any, s *shape, path string) string {
	if s == nil {
		return ""
	}
	switch t := v.(type) {
	case []any:
		for i, e := range t {
			if p := unknownField(e, s, fmt.Sprintf("%s[%d]", path, i)); p != "" {
				return p
			}
		}
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			sub, ok := (*s)[k]
			if !ok {
				return strings.TrimPrefix(path+"."+k, ".")
			}
			if p := unknownField(t[k], sub, path+"."+k); p != "" {
				return p
			}
		}
	}
	return ""
}

// deepCopy copies maps and lists, so that flattening never writes into the
// caller's templates.
func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		c := make(map[string]any, len(t))
		for k, e := range t {
			c[k] = deepCopy(e)
		}
		return c
	case []any:
		c := make([]any, len(t))
		for i, e := range t {
			c[i] = deepCopy(e)
		}
		return c
	default:
		return v
	}
}
