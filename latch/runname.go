package latch

import (
	"crypto/sha256"
	"fmt"
	"math/big"
	"strings"
)

// Kargo names a run <stage>.<ULID>.<collection id>, lower case, with the
// stage cut to 218 bytes and the collection id to 7 (pkg/rollouts
// analysis_run_options.go: 253 - (1+26) - (1+7)).
const (
	nameHashLen      = 8
	ulidLen          = 26
	maxNameSuffixLen = 7
	maxNamePrefixLen = 253 - (1 + ulidLen) - (1 + maxNameSuffixLen)
)

// Crockford's base32, the ULID alphabet, in lower case.
const ulidAlphabet = "0123456789abcdefghjkmnpqrstvwxyz"

// ulidShaped writes 128 bits as a ULID does: 26 base32 digits, the first
// within 0-7.
func ulidShaped(b [16]byte) string {
	n := new(big.Int).SetBytes(b[:])
	out := make([]byte, ulidLen)
	base := big.NewInt(32)
	digit := new(big.Int)
	for i := ulidLen - 1; i >= 0; i-- {
		n.DivMod(n, base, digit)
		out[i] = ulidAlphabet[digit.Int64()]
	}
	return string(out)
}

// RunName is the deterministic name of the run kargo-latch starts for one
// cycle: Kargo's <stage>.<ULID>.<collection id[:7]> shape, with the ULID
// replaced by a ULID-shaped hash of the Stage, the collection id and the
// cycle key (the cycle's promotion name or promotedAt). The same inputs give
// the same name, so a restarted operator finds its run instead of creating a
// second one. Unlike Kargo, a long stage is shortened with a hash rather than
// cut, so the name is always a valid DNS subdomain.
//
// A second attempt (a run someone deleted, started again) is a cycle key of
// its own.
func RunName(stage, collectionID, cycle string, attempt int) string {
	if attempt > 1 {
		cycle = fmt.Sprintf("%s\x00attempt %d", cycle, attempt)
	}
	sum := sha256.Sum256([]byte(stage + "\x00" + collectionID + "\x00" + cycle))
	id := ulidShaped([16]byte(sum[:16]))
	suffix := dnsLabelish(collectionID)
	if len(suffix) > maxNameSuffixLen {
		suffix = strings.TrimRight(suffix[:maxNameSuffixLen], "-.")
	}
	prefix := dnsLabelish(stage)
	if prefix == "" {
		prefix = "stage"
	}
	if len(prefix) > maxNamePrefixLen {
		// Cut as Kargo's HashShorten does, but also trim a dot so that no label
		// of the name starts with the dash.
		prefix = strings.TrimRight(prefix[:maxNamePrefixLen-(nameHashLen+1)], "-.") + "-" + fmt.Sprintf("%x", sha256.Sum256([]byte(prefix)))[:nameHashLen]
	}
	parts := []string{prefix, id}
	if suffix != "" {
		parts = append(parts, suffix)
	}
	return strings.Join(parts, ".")
}

// dnsLabelish lower-cases s, turns characters a DNS subdomain does not allow
// into dashes, and trims dashes from each dot-separated part, dropping empty
// parts. Kargo's Stage names and collection ids pass through unchanged.
func dnsLabelish(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if !subdomainChar(c) {
			b[i] = '-'
		}
	}
	var parts []string
	for _, p := range strings.Split(string(b), ".") {
		if p = strings.Trim(p, "-"); p != "" {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, ".")
}

func subdomainChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.'
}
