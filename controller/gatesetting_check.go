package controller

import (
	"context"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/controller/gatesetting"
)

// kargoController is how gate-bypass detection tells Kargo's controllers:
// the override, else the setting the operator was given.
func kargoController(cfg Config) func(string) bool {
	if cfg.KargoController == nil && cfg.GateSetting != nil {
		return cfg.GateSetting.Is
	}
	return cfg.KargoController
}

// checkGateSetting compares the operator's setting of Kargo's controllers
// with the installed pause-gate policies, once, bounded so that an API
// server slow to answer does not hold the caches back.
func (c *Controller) checkGateSetting(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	gatesetting.Check(ctx, c.cfg.Kube, c.cfg.GateSetting, func(policy *admissionv1.ValidatingAdmissionPolicy, msg string) {
		c.report.WarnAbout(policy, api.ReasonGateSettingDiffers, "%s", msg)
	}, c.cfg.Metrics)
}
