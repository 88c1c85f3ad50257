package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kargo-latch/kargo-latch/test/cluster"
)

func freePort(t *testing.T) int {
	t.Helper()
	ports, err := cluster.FreePorts(1)
	must(t, err)
	return ports[0]
}

func httpGet(url string) (int, []byte, error) {
	resp, err := http.Get(url) //nolint:gosec,noctx // loopback test endpoints
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// metricsProcess starts the operator binary for ns with its metrics and
// probe servers on loopback, waits until it is ready, and returns the URL of
// its /metrics. The process stops with the test.
func metricsProcess(t *testing.T, ns string, extra ...string) string {
	t.Helper()
	_, url := startMetricsProcess(t, ns, extra...)
	return url
}

// startMetricsProcess is metricsProcess that also returns the process.
func startMetricsProcess(t *testing.T, ns string, extra ...string) (*process, string) {
	t.Helper()
	mport, pport := freePort(t), freePort(t)
	args := append([]string{"--namespace", ns,
		"--metrics-bind-address", "127.0.0.1:" + strconv.Itoa(mport),
		"--health-probe-bind-address", "127.0.0.1:" + strconv.Itoa(pport)}, extra...)
	p := newProcess(t, args...)
	p.start()
	waitFor(t, "the operator to be ready", func() bool {
		code, _, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/readyz", pport))
		return err == nil && code == http.StatusOK
	})
	return p, fmt.Sprintf("http://127.0.0.1:%d/metrics", mport)
}

// scrape reads and parses the operator's /metrics.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body, err := httpGet(url)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, code, err)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return mfs
}

// series returns the value of each series of a family whose labels include
// match, keyed by the remaining labels; histograms give their sample count.
func series(mfs map[string]*dto.MetricFamily, name string, match map[string]string) map[string]float64 {
	out := map[string]float64{}
	mf, ok := mfs[name]
	if !ok {
		return out
	}
next:
	for _, m := range mf.GetMetric() {
		var key []string
		for _, l := range m.GetLabel() {
			if want, ok := match[l.GetName()]; ok {
				if want != l.GetValue() {
					continue next
				}
				continue
			}
			key = append(key, l.GetName()+"="+l.GetValue())
		}
		v := m.GetGauge().GetValue() + m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		out[strings.Join(key, ",")] = v
	}
	return out
}

// promServer is a real Prometheus scraping its targets every second and
// evaluating kargo-latch's shipped rules every second.
type promServer struct {
	url string
}

// startPrometheus runs a real Prometheus with the shipped rules, scraping
// targets every second, and returns once it scrapes every one of them.
func startPrometheus(t *testing.T, targets ...string) *promServer {
	t.Helper()
	bin := prometheusTool(t, "prometheus")
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, target := range targets {
		quoted[i] = strconv.Quote(target)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
- job_name: kargo-latch
  static_configs:
  - targets: [%s]
`, filepath.Join(env.cluster.Root, "manifests", "prometheus", "rules.yaml"), strings.Join(quoted, ", "))
	must(t, os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600))
	port := freePort(t)
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	must(t, err)
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(port), "--log.level=warn")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	})
	p := &promServer{url: fmt.Sprintf("http://127.0.0.1:%d", port)}
	waitFor(t, "Prometheus to scrape every target", func() bool {
		code, body, err := httpGet(p.url + "/api/v1/query?query=" + url.QueryEscape(`count(up == 1)`))
		return err == nil && code == http.StatusOK && strings.Contains(string(body), fmt.Sprintf(`"%d"]`, len(targets)))
	})
	return p
}

// prometheusTool is the path of prometheus or promtool as `make prometheus`
// builds them into the repository's bin/ (the version test/tools/prometheus
// pins), never one from the PATH: the alert tests and the rule checks must
// run the Prometheus that `make rules` runs.
func prometheusTool(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(env.cluster.Root, "bin", name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s is missing: run `make prometheus` (`make e2e` does): %v", bin, err)
	}
	return bin
}

type alert struct {
	Labels model.LabelSet `json:"labels"`
	State  string         `json:"state"`
}

func (p *promServer) alerts(t *testing.T) []alert {
	t.Helper()
	code, body, err := httpGet(p.url + "/api/v1/alerts")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /api/v1/alerts: %d %v", code, err)
	}
	var resp struct {
		Data struct {
			Alerts []alert `json:"alerts"`
		} `json:"data"`
	}
	must(t, json.Unmarshal(body, &resp))
	return resp.Data.Alerts
}

// firing finds a firing alert of that name whose labels include match.
func (p *promServer) firing(t *testing.T, name string, match map[string]string) *alert {
	t.Helper()
	for _, a := range p.alerts(t) {
		if string(a.Labels["alertname"]) != name || a.State != "firing" {
			continue
		}
		ok := true
		for k, v := range match {
			if string(a.Labels[model.LabelName(k)]) != v {
				ok = false
			}
		}
		if ok {
			return &a
		}
	}
	return nil
}

// evaluatedSince reports whether every rule group has been evaluated after
// since: an alert's state read before that may predate a scrape the test
// waited for.
func (p *promServer) evaluatedSince(t *testing.T, since time.Time) bool {
	t.Helper()
	code, body, err := httpGet(p.url + "/api/v1/rules")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /api/v1/rules: %d %v", code, err)
	}
	var resp struct {
		Data struct {
			Groups []struct {
				LastEvaluation time.Time `json:"lastEvaluation"`
			} `json:"groups"`
		} `json:"data"`
	}
	must(t, json.Unmarshal(body, &resp))
	for _, g := range resp.Data.Groups {
		if !g.LastEvaluation.After(since) {
			return false
		}
	}
	return len(resp.Data.Groups) > 0
}

// query runs an instant query and returns the labels of each sample.
func (p *promServer) query(t *testing.T, q string) []map[string]string {
	t.Helper()
	code, body, err := httpGet(p.url + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil || code != http.StatusOK {
		t.Fatalf("query %s: %d %v %s", q, code, err, body)
	}
	var resp struct {
		Data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
			} `json:"result"`
		} `json:"data"`
	}
	must(t, json.Unmarshal(body, &resp))
	out := make([]map[string]string, len(resp.Data.Result))
	for i, r := range resp.Data.Result {
		out[i] = r.Metric
	}
	return out
}
