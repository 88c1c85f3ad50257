package cluster

import (
	"crypto/rand"
	"encoding/hex"
)

// The bearer tokens of the cluster's own identities are drawn anew by each
// process: with a node, the API server listens on the node's bridge address
// too, which a host on the same network could route to, so no token may be
// one anyone can read in this repository.
var (
	// AdminToken is the bearer token of the cluster's admin (system:masters).
	AdminToken             = newToken("admin")
	controllerManagerToken = newToken("kcm")
	kubeletToken           = newToken("kubelet")
	schedulerToken         = newToken("scheduler")
)

func newToken(who string) string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic("cluster: no randomness for the " + who + " token: " + err.Error())
	}
	return "kargo-latch-test-" + who + "-" + hex.EncodeToString(b)
}
