package controller

import (
	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// reportInput reports, once per new problem, a Stage's status that cannot
// be used: a health Kargo does not define, more Applications than the
// per-App latch handles.
func (c *Controller) reportInput(stage *kargo.Stage, m *memo, unknownHealth string, apps int) {
	c.reportHealth(stage, m, unknownHealth)
	c.reportApps(stage, m, apps)
}

// reportConfig warns once per new invalid-settings message.
func (c *Controller) reportConfig(stage *kargo.Stage, m *memo, problem string) {
	if warnOnce(&m.configProblem, problem) {
		c.report.Warn(stage, api.ReasonInvalidConfig, "Invalid setting: %s", problem)
		c.cfg.Metrics.InvalidConfig.WithLabelValues(stage.Namespace, stage.Name).Inc()
	}
}

// reportHealth warns once per new health string Kargo does not define.
func (c *Controller) reportHealth(stage *kargo.Stage, m *memo, unknown string) {
	if warnOnce(&m.badHealth, unknown) {
		c.report.Warn(stage, api.ReasonUnknownHealth, "Stage health %q is not one Kargo defines; the latch holds its phase until Kargo reports a known health", unknown)
		c.cfg.Metrics.InvalidInput.WithLabelValues(stage.Namespace, stage.Name, "health").Inc()
	}
}

// reportApps warns once when a Stage lists more Applications than the
// per-App latch handles; its aggregate health alone then counts.
func (c *Controller) reportApps(stage *kargo.Stage, m *memo, apps int) {
	tooMany := apps > latch.MaxApps
	if tooMany && !m.tooManyApps {
		c.report.Warn(stage, api.ReasonTooManyApps, "Stage lists more than %d Applications in its health output; kargo-latch latches it on the Stage's aggregate health alone", latch.MaxApps)
		c.cfg.Metrics.InvalidInput.WithLabelValues(stage.Namespace, stage.Name, "apps").Inc()
	}
	m.tooManyApps = tooMany
}

// warnOnce remembers value in last and reports whether it is a new problem
// to report: not empty, and not the one reported last time.
func warnOnce(last *string, value string) bool {
	if value == *last {
		return false
	}
	*last = value
	return value != ""
}
