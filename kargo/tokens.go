package kargo

import "encoding/json"

// RequestTokenID is the verification id a Stage's request token
// (AbortAnnotation, ReverifyAnnotation) names, read exactly as Kargo reads
// it (pkg/api/annotations.go, ReverifyAnnotationValue): a value that is
// valid JSON must decode as a VerificationRequest {"id", "actor",
// "controlPlane"}, and names its id; any other value is the id itself. ""
// means no request: Kargo then acts as if the token were absent.
func RequestTokenID(value string) string {
	b := []byte(value)
	if !json.Valid(b) {
		return value
	}
	var req struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(b, &req) != nil {
		return ""
	}
	return req.ID
}

// requestToken reports whether key is one of Kargo's request tokens on a
// Stage, which the mirror keeps as the id they name.
func requestToken(key string) bool { return key == AbortAnnotation || key == ReverifyAnnotation }
