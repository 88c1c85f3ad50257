package verification

import (
	"crypto/sha256"
	"fmt"
	"strings"
)

// Kargo's pkg/kubernetes ShortenLabelValue → pkg/strings HashShorten(value,
// 63, "-", 8): a value of at most 63 bytes is kept; a longer one becomes its
// first 54 bytes with trailing dashes trimmed, a dash, and the first 8 hex
// digits of the SHA-256 of the whole value.
const (
	maxLabelValue = 63
	shortHashLen  = 8
)

// ShortenLabelValue shortens a label value exactly as Kargo does.
func ShortenLabelValue(v string) string {
	if len(v) <= maxLabelValue {
		return v
	}
	return strings.TrimRight(v[:maxLabelValue-(shortHashLen+1)], "-") + "-" + shortHash(v)
}

func shortHash(s string) string {
	return fmt.Sprintf("%x", sha256.Sum256([]byte(s)))[:shortHashLen]
}
