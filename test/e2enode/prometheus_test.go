package e2enode

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/kargo-latch/kargo-latch/test/cluster"
)

// prometheusConfig scrapes the release's Pods that Kubernetes service
// discovery finds behind the chart's metrics Service (role endpointslice,
// as the chart's ServiceMonitor selects them), at the Service's port named
// metrics, through the node's bridge, and evaluates the shipped rules
// every second. A Service whose selector or port does not reach the Pods
// leaves Prometheus with no target.
const prometheusConfig = `global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%[1]q]
scrape_configs:
- job_name: kargo-latch
  kubernetes_sd_configs:
  - role: endpointslice
    api_server: %[2]q
    authorization: {credentials: %[3]q}
    tls_config: {insecure_skip_verify: true}
    namespaces: {names: [%[4]q]}
  relabel_configs:
  - source_labels: [__meta_kubernetes_service_name]
    regex: %[5]s
    action: keep
  - source_labels: [__meta_kubernetes_endpointslice_port_name]
    regex: metrics
    action: keep
  - source_labels: [__meta_kubernetes_pod_name]
    target_label: pod
`

// TestPrometheusFindsThePodsAndAlerts: the project's Prometheus, with
// Kubernetes service discovery, finds both Pods behind the chart's metrics
// Service, scrapes them at their Pod IPs, and the shipped KargoStagePaused fires for a Stage a failure
// paused.
func TestPrometheusFindsThePodsAndAlerts(t *testing.T) {
	bin := filepath.Join(env.cluster.Root, "bin", "prometheus-kubernetes-sd")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%v: run `make e2e-node`, which builds it", err)
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf(prometheusConfig, filepath.Join(env.cluster.Root, "manifests", "prometheus", "rules.yaml"),
		env.cluster.Config.Host, cluster.AdminToken, releaseNS, release+"-metrics")
	must(t, os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600))
	ports, err := cluster.FreePorts(1)
	must(t, err)
	url := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	must(t, err)
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), "--log.level=warn")
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

	must(t, env.waitDeployment(t.Context(), time.Minute))
	pods, err := env.pods(t.Context())
	must(t, err)
	var want []string
	for _, p := range pods {
		want = append(want, p.Name+" "+p.Status.PodIP)
	}
	slices.Sort(want)
	var got []string
	waitFor(t, "Prometheus to scrape both Pods it discovered", time.Minute, func() (bool, error) {
		var targets struct {
			Data struct {
				ActiveTargets []struct {
					Labels     map[string]string `json:"labels"`
					ScrapeURL  string            `json:"scrapeUrl"`
					Health     string            `json:"health"`
					Discovered map[string]string `json:"discoveredLabels"`
				} `json:"activeTargets"`
			} `json:"data"`
		}
		if err := getJSON(url+"/api/v1/targets?state=active", &targets); err != nil {
			return false, nil //nolint:nilerr // Prometheus is starting
		}
		got = nil
		for _, tg := range targets.Data.ActiveTargets {
			if tg.Health != "up" {
				return false, nil
			}
			got = append(got, tg.Labels["pod"]+" "+tg.Discovered["__meta_kubernetes_pod_ip"])
		}
		slices.Sort(got)
		return slices.Equal(got, want), nil
	})

	project := env.newProject(t)
	prod := env.createStage(t, project, "prod")
	fail(t, prod)
	waitPaused(t, prod, true, waitLimit)
	waitFor(t, "KargoStagePaused to fire for the paused Stage", time.Minute, func() (bool, error) {
		var alerts struct {
			Data struct {
				Alerts []struct {
					Labels map[string]string `json:"labels"`
					State  string            `json:"state"`
				} `json:"alerts"`
			} `json:"data"`
		}
		if err := getJSON(url+"/api/v1/alerts", &alerts); err != nil {
			return false, err
		}
		for _, a := range alerts.Data.Alerts {
			if a.Labels["alertname"] == "KargoStagePaused" && a.Labels["project"] == project && a.Labels["stage"] == "prod" && a.State == "firing" {
				return true, nil
			}
		}
		return false, nil
	})
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url) //nolint:gosec,noctx // a loopback test Prometheus
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return json.Unmarshal(b, v)
}
