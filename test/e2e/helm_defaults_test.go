package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// operatorFlagDefaults are the chart values that set an operator flag,
// which must default to that flag's default.
var operatorFlagDefaults = map[string]string{
	"controller.logLevel":                     "v",
	"controller.workers":                      "workers",
	"controller.kubeApiQPS":                   "kube-api-qps",
	"controller.kubeApiBurst":                 "kube-api-burst",
	"controller.newFailureWindow":             "new-failure-window",
	"controller.stageDefaults.pauseOnFailure": "pause-on-failure",
	"controller.stageDefaults.latchDeadline":  "latch-deadline",
	"controller.stageDefaults.degradedGrace":  "degraded-grace",
	"controller.stageDefaults.drainOnPause":   "drain-on-pause",
	"controller.stageDefaults.markVerified":   "mark-verified",
	"controller.stageDefaults.verifyOnLatch":  "verify-on-latch",
	"controller.verifyGrace":                  "verify-grace",
	"controller.verifyPickupTimeout":          "verify-pickup-timeout",
	"controller.rolloutsControllerInstanceID": "rollouts-controller-instance-id",
}

// TestChartDefaultsAreTheOperatorDefaults: each setting's default in the
// chart's values.yaml is the operator's own flag default, as its -help
// prints it. (The chart passes a flag only when its value differs, so a
// default that drifted would silently not apply.)
func TestChartDefaultsAreTheOperatorDefaults(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(buildOperator(t), "-help").CombinedOutput()
	if err != nil {
		t.Fatalf("kargo-latch -help: %v\n%s", err, out)
	}
	defaults := flagDefaults(string(out))
	b, err := os.ReadFile(filepath.Join(env.cluster.Root, chartPath, "values.yaml"))
	must(t, err)
	var values map[string]any
	must(t, yaml.Unmarshal(b, &values))
	for key, flag := range operatorFlagDefaults {
		v, found, err := unstructured.NestedFieldNoCopy(values, strings.Split(key, ".")...)
		if !found || err != nil {
			t.Errorf("values.yaml has no %s", key)
			continue
		}
		def, ok := defaults[flag]
		if !ok {
			t.Errorf("kargo-latch has no flag --%s (for %s)", flag, key)
			continue
		}
		if !sameSetting(fmt.Sprint(v), def) {
			t.Errorf("%s defaults to %v in values.yaml, --%s to %q in kargo-latch", key, v, flag, def)
		}
	}
}

// flagDefaults reads each flag's default from Go's flag -help output; a
// flag whose default is its type's zero value has none printed.
func flagDefaults(help string) map[string]string {
	defaults := map[string]string{}
	var name, kind string
	sc := bufio.NewScanner(strings.NewReader(help))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "  -") {
			fields := strings.Fields(line)
			name, kind = strings.TrimPrefix(fields[0], "-"), ""
			if len(fields) > 1 {
				kind = fields[1]
			}
			defaults[name] = map[string]string{"": "false", "duration": "0s", "int": "0", "float": "0", "value": "0"}[kind]
			continue
		}
		if _, def, ok := strings.Cut(line, "(default "); ok && name != "" {
			defaults[name] = strings.Trim(strings.TrimSuffix(strings.TrimSpace(def), ")"), `"`)
		}
	}
	return defaults
}

// sameSetting compares a chart value with a flag default as the operator
// parses them: durations as durations, numbers as numbers.
func sameSetting(value, def string) bool {
	if a, err := time.ParseDuration(value); err == nil {
		b, err := time.ParseDuration(def)
		return err == nil && a == b
	}
	if a, err := strconv.ParseFloat(value, 64); err == nil {
		b, err := strconv.ParseFloat(def, 64)
		return err == nil && a == b
	}
	return value == def
}
