package dashboard

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestGuardRefusesForeignHostsAndForeignChanges(t *testing.T) {
	reached := 0
	g := &guard{hosts: allowedHosts(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 3100}), token: "secret",
		next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached++ })}
	cases := []struct {
		name    string
		method  string
		host    string
		headers map[string]string
		want    int
	}{
		{"the page", http.MethodGet, "localhost:3100", nil, http.StatusOK},
		{"the page by address", http.MethodGet, "127.0.0.1:3100", nil, http.StatusOK},
		{"a rebound name", http.MethodGet, "evil.example:3100", nil, http.StatusMisdirectedRequest},
		{"another port", http.MethodGet, "localhost:3101", nil, http.StatusMisdirectedRequest},
		{"a rebound name posting", http.MethodPost, "evil.example:3100", map[string]string{TokenHeader: "secret"}, http.StatusMisdirectedRequest},
		{"a change with the token", http.MethodPost, "localhost:3100", map[string]string{TokenHeader: "secret", "Origin": "http://localhost:3100", "Sec-Fetch-Site": "same-origin"}, http.StatusOK},
		{"a change without the token", http.MethodPost, "localhost:3100", map[string]string{"Origin": "http://localhost:3100"}, http.StatusForbidden},
		{"a change with a wrong token", http.MethodPost, "localhost:3100", map[string]string{TokenHeader: "guess"}, http.StatusForbidden},
		{"a change from another origin", http.MethodPost, "localhost:3100", map[string]string{TokenHeader: "secret", "Origin": "http://evil.example"}, http.StatusForbidden},
		{"a cross-site change", http.MethodPost, "localhost:3100", map[string]string{TokenHeader: "secret", "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"a same-site change (another port)", http.MethodPost, "localhost:3100", map[string]string{TokenHeader: "secret", "Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		{"a delete without the token", http.MethodDelete, "localhost:3100", nil, http.StatusForbidden},
		{"a typed address posting", http.MethodPost, "localhost:3100", map[string]string{TokenHeader: "secret", "Sec-Fetch-Site": "none"}, http.StatusForbidden},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := reached
			r := httptest.NewRequest(c.method, "/api/projects/p/pause", strings.NewReader("{}"))
			r.Host = c.host
			for k, v := range c.headers {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			g.ServeHTTP(w, r)
			if w.Code != c.want {
				t.Fatalf("status %d, want %d: %s", w.Code, c.want, w.Body)
			}
			if passed := reached > before; passed != (c.want == http.StatusOK) {
				t.Errorf("reached the handler: %v, want %v", passed, c.want == http.StatusOK)
			}
			if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") {
				t.Errorf("Content-Security-Policy %q", csp)
			}
		})
	}
}

func TestAllowedHostsOfAnIPv6Loopback(t *testing.T) {
	got := allowedHosts(&net.TCPAddr{IP: net.IPv6loopback, Port: 8080})
	if strings.Join(got, " ") != "[::1]:8080 localhost:8080" {
		t.Errorf("hosts %v", got)
	}
}

func TestTokensDiffer(t *testing.T) {
	if a, b := newToken(), newToken(); a == b || len(a) < 40 {
		t.Errorf("tokens %q and %q", a, b)
	}
}

// Another origin cannot read the feed or the Events, and must not make the
// dashboard read them as the user either.
func TestGuardRefusesForeignReads(t *testing.T) {
	g := &guard{hosts: []string{"localhost:3100"}, token: "secret", next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})}
	for _, c := range []struct {
		path    string
		headers map[string]string
		want    int
	}{
		{"/api/live", map[string]string{"Sec-Fetch-Site": "same-origin"}, http.StatusOK},
		{"/api/live", map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden},
		{"/api/projects/p/stages/s/events", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"/projects/p/stages/s", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusOK}, // a link from Kargo's UI
	} {
		r := httptest.NewRequest(http.MethodGet, c.path, nil)
		r.Host = "localhost:3100"
		for k, v := range c.headers {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Errorf("GET %s %v: %d, want %d", c.path, c.headers, w.Code, c.want)
		}
	}
}
