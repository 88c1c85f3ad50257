package dashboard

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// The page acts with the user's credentials, so any page the user has open
// in the same browser must not act through it. Three guards, on every
// request:
//
//   - Host: only the names of the loopback address it is bound to. A
//     foreign page that rebinds its own DNS name to 127.0.0.1 (DNS
//     rebinding) reaches this server as a same-origin page of that name;
//     its Host header gives it away.
//   - A state-changing request needs the per-process token (the page reads
//     it from its own HTML, which another origin cannot read), in a header
//     another origin cannot set without a CORS preflight this server never
//     grants, and, when the browser says where it comes from (Origin,
//     Sec-Fetch-Site), that must be this very origin.
//   - Every response forbids framing, sniffing and any source but this
//     server itself (Content-Security-Policy).

// TokenHeader carries the per-process token of a state-changing request.
const TokenHeader = "X-Kargo-Latch-Token" //nolint:gosec // a header's name, not a credential

// contentSecurityPolicy lets the page load its own script and styles and
// talk to its own server, and nothing else: no inline script, no frames,
// no form posting elsewhere.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// newToken is the per-process secret, 256 random bits.
func newToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

// allowedHosts are the Host values that name the bound loopback address:
// the address itself, and localhost for 127.0.0.1 and ::1 (the link Kargo's
// UI shows says localhost). The last one is the address people are given.
func allowedHosts(addr *net.TCPAddr) []string {
	port := strconv.Itoa(addr.Port)
	hosts := []string{net.JoinHostPort(addr.IP.String(), port)}
	// localhost names 127.0.0.1 or ::1, never another loopback address
	// (127.0.0.2 is another server's).
	if addr.IP.Equal(net.IPv4(127, 0, 0, 1)) || addr.IP.Equal(net.IPv6loopback) {
		hosts = append(hosts, net.JoinHostPort("localhost", port))
	}
	return hosts
}

type guard struct {
	hosts []string
	token string
	next  http.Handler
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	if !slices.Contains(g.hosts, r.Host) {
		http.Error(w, "refused: this dashboard answers only to "+g.hosts[0]+" (Host "+strconv.Quote(r.Host)+")", http.StatusMisdirectedRequest)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if why := g.refuseChange(r); why != "" {
			http.Error(w, "refused: "+why, http.StatusForbidden)
			return
		}
	} else if strings.HasPrefix(r.URL.Path, "/api/") {
		// Another origin cannot read these answers, but it must not make
		// this process read the cluster as the user, or hold feeds open.
		if why := g.refuseForeign(r); why != "" {
			http.Error(w, "refused: "+why, http.StatusForbidden)
			return
		}
	}
	g.next.ServeHTTP(w, r)
}

// refuseForeign says why a request the browser marks as another origin's
// is refused, or "".
func (g *guard) refuseForeign(r *http.Request) string {
	if o := r.Header.Get("Origin"); o != "" && !slices.Contains(g.origins(), o) {
		return "a request from another origin (" + o + ") may not use this dashboard"
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
		return "a " + s + " request may not use this dashboard"
	}
	return ""
}

// refuseChange says why a state-changing request is refused, or "".
func (g *guard) refuseChange(r *http.Request) string {
	if why := g.refuseForeign(r); why != "" {
		return why
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s == "none" {
		return "a change must come from the dashboard's page"
	}
	got := r.Header.Get(TokenHeader)
	if subtle.ConstantTimeCompare([]byte(got), []byte(g.token)) != 1 {
		return "the request lacks this dashboard's token (" + TokenHeader + "): only its own page may change anything"
	}
	return ""
}

func (g *guard) origins() []string {
	out := make([]string, len(g.hosts))
	for i, h := range g.hosts {
		out[i] = "http://" + h
	}
	return out
}
