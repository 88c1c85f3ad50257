package kargo

import (
	"encoding/json"
	"strings"
)

// RequestTokenID is the verification id a Stage's request token
// (AbortAnnotation, ReverifyAnnotation) names: Kargo takes the value as the
// id itself, or as a JSON VerificationRequest {"id", "actor",
// "controlPlane"} (pkg/api/annotations.go). "" when it names none.
func RequestTokenID(value string) string {
	value = strings.TrimSpace(value)
	if !strings.HasPrefix(value, "{") {
		return value
	}
	var req struct {
		ID string `json:"id"`
	}
	if json.Unmarshal([]byte(value), &req) != nil {
		return ""
	}
	return req.ID
}
