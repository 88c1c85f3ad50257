package cluster

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// Rule is one RBAC policy rule.
func Rule(group, resource string, verbs ...string) map[string]any {
	vs := make([]any, len(verbs))
	for i, v := range verbs {
		vs[i] = v
	}
	return map[string]any{"apiGroups": []any{group}, "resources": []any{resource}, "verbs": vs}
}

// NewClusterRole builds a ClusterRole with rules made by Rule.
func NewClusterRole(name string, rules ...map[string]any) *unstructured.Unstructured {
	rs := make([]any, len(rules))
	for i, r := range rules {
		rs[i] = r
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
		"metadata": map[string]any{"name": name}, "rules": rs,
	}}
}

// BindUser binds a ClusterRole to a user in every namespace.
func BindUser(name, role, user string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
		"metadata": map[string]any{"name": name},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
		"subjects": []any{map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}},
	}}
}
