package driver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
)

// MetricServer is an HTTP endpoint on loopback for Argo Rollouts' web
// provider (WebMetric): it answers {"status":"ok"} while it succeeds and
// {"status":"fail"} once failing, and counts the requests it answered.
type MetricServer struct {
	// URL is its address, e.g. http://127.0.0.1:port; any path answers.
	URL string

	srv      *httptest.Server
	mu       sync.Mutex
	failing  bool
	requests int
}

// NewMetricServer starts a MetricServer that succeeds. Close it when done.
func NewMetricServer() *MetricServer {
	m := &MetricServer{}
	m.srv = httptest.NewServer(http.HandlerFunc(m.answer))
	m.URL = m.srv.URL
	return m
}

func (m *MetricServer) answer(w http.ResponseWriter, _ *http.Request) {
	m.mu.Lock()
	m.requests++
	status := "ok"
	if m.failing {
		status = "fail"
	}
	m.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"status": status})
}

// SetFailing switches its answer: failing (true) or succeeding (false).
func (m *MetricServer) SetFailing(failing bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failing = failing
}

// Requests is how many requests it has answered.
func (m *MetricServer) Requests() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.requests
}

// Close stops it.
func (m *MetricServer) Close() { m.srv.Close() }
