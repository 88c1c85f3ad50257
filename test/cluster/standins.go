package cluster

import (
	"fmt"

	"sigs.k8s.io/yaml"
)

// StandInCRDFiles are the Kargo CRDs the project keeps stand-ins of in
// test/crds, one file each, named as in Kargo's charts/kargo/resources/crds:
// every Kargo kind that `make demo`, the operator and the CLI create or
// read (Stage, Promotion, Freight, Warehouse, Project), and ProjectConfig,
// which the tests' people update. A test checks that the list covers
// every resource of package kargo.
var StandInCRDFiles = []string{
	"kargo.akuity.io_freights.yaml",
	"kargo.akuity.io_projectconfigs.yaml",
	"kargo.akuity.io_projects.yaml",
	"kargo.akuity.io_promotions.yaml",
	"kargo.akuity.io_stages.yaml",
	"kargo.akuity.io_warehouses.yaml",
}

// standInDepth is how many levels of a Kargo CRD's schema a stand-in keeps
// typed: at 4, status.verifiedIn.<stage>.verifiedAt of a Freight, or
// spec.verification.analysisTemplates[] of a Stage. A deeper object is kept
// as it comes (x-kubernetes-preserve-unknown-fields), a deeper scalar keeps
// its type.
const standInDepth = 4

// standInHeader opens every stand-in file; %s is the kind.
const standInHeader = `# kargo-latch's stand-in for Kargo's %s CRD (kargo.akuity.io/v1alpha1),
# used by ` + "`make demo`" + ` and the tests only when Kargo's real CRDs are out
# of reach (no ../shared/kargo-crds and no KARGO_CRDS_DIR, outside CI) or
# asked for (KARGO_LATCH_STAND_IN_CRDS=1). Derived from Kargo's own CRD
# (github.com/akuity/kargo, charts/kargo/resources/crds, Apache License
# 2.0): its names, scope, status subresource and printer columns, and its
# schema's fields, types, formats, enums, defaults and required fields %d
# levels deep; deeper objects are kept as they come. No descriptions, CEL
# rules, patterns or length limits: only Kargo's real CRDs check those.
# Generated; do not edit. With Kargo's CRDs at hand (../shared/kargo-crds or
# KARGO_CRDS_DIR), test/cluster's TestStandInCRDsFollowKargo checks that this
# file is still what Kargo's CRD gives, and rewrites it with
#   go test ./test/cluster -run TestStandInCRDsFollowKargo -update
`

// StandInCRD derives a stand-in from one of Kargo's CRDs (YAML): the file's
// whole text, header included.
func StandInCRD(real []byte) ([]byte, error) {
	var crd map[string]any
	if err := yaml.Unmarshal(real, &crd); err != nil {
		return nil, err
	}
	if crd["kind"] != "CustomResourceDefinition" {
		return nil, fmt.Errorf("not a CustomResourceDefinition: %v", crd["kind"])
	}
	spec, _ := crd["spec"].(map[string]any)
	names, _ := spec["names"].(map[string]any)
	kind, _ := names["kind"].(string)
	meta, _ := crd["metadata"].(map[string]any)
	var versions []any
	vs, _ := spec["versions"].([]any)
	for _, v := range vs {
		v, _ := v.(map[string]any)
		out := pick(v, "name", "served", "storage", "subresources", "additionalPrinterColumns")
		if s, ok := v["schema"].(map[string]any); ok {
			out["schema"] = map[string]any{"openAPIV3Schema": skeleton(s["openAPIV3Schema"], 0)}
		}
		versions = append(versions, out)
	}
	standIn := map[string]any{
		"apiVersion": crd["apiVersion"],
		"kind":       "CustomResourceDefinition",
		"metadata": map[string]any{
			"name":   meta["name"],
			"labels": map[string]any{"kargo-latch.io/stand-in": "true"},
		},
		"spec": map[string]any{
			"group":    spec["group"],
			"names":    names,
			"scope":    spec["scope"],
			"versions": versions,
		},
	}
	b, err := yaml.Marshal(standIn)
	if err != nil {
		return nil, err
	}
	return append([]byte(fmt.Sprintf(standInHeader, kind, standInDepth)), b...), nil
}

// The keys of a schema node a stand-in keeps: what gives a value its shape
// and its defaults, not Kargo's finer rules.
var keptSchemaKeys = []string{
	"type", "format", "enum", "default", "nullable", "required",
	"x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string",
	"x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
}

// skeleton keeps a schema node's shape down to standInDepth levels.
func skeleton(node any, depth int) any {
	n, ok := node.(map[string]any)
	if !ok {
		return node
	}
	out := pick(n, keptSchemaKeys...)
	_, hasProps := n["properties"]
	_, hasItems := n["items"]
	additional, hasAdditional := n["additionalProperties"].(map[string]any)
	if depth >= standInDepth {
		if hasProps || hasAdditional || (n["type"] == "object" && !hasItems) {
			out["x-kubernetes-preserve-unknown-fields"] = true
		}
		if hasItems {
			out["items"] = skeleton(n["items"], depth)
		}
		return out
	}
	if props, ok := n["properties"].(map[string]any); ok {
		kept := map[string]any{}
		for k, v := range props {
			kept[k] = skeleton(v, depth+1)
		}
		out["properties"] = kept
	}
	if hasItems {
		out["items"] = skeleton(n["items"], depth+1)
	}
	if hasAdditional {
		out["additionalProperties"] = skeleton(additional, depth+1)
	}
	return out
}

// pick copies the keys of m that are set.
func pick(m map[string]any, keys ...string) map[string]any {
	out := map[string]any{}
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}
