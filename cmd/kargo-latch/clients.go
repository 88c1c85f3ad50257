package main

import (
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// The Lease client's own budget. Renewing every 2s is 0.5 requests a
// second; the rest is headroom for acquiring after a lost term.
const (
	leaseQPS   = 5
	leaseBurst = 10
)

// clients are the operator's API clients, each with its own rate limiter.
type clients struct {
	// dynamic reads and writes Kargo's objects and StagePauses.
	dynamic dynamic.Interface
	// stages lists and watches Stages straight into their mirror.
	stages rest.Interface
	// kube sends Events.
	kube kubernetes.Interface
	// leases is for leader election only. A burst of Events (a project-wide
	// pause of 500 Stages makes 500) must not hold a renewal back past the
	// renew deadline, which would stop the leader for nothing.
	leases kubernetes.Interface
}

// newClients builds the clients from cfg, whose QPS and Burst apply to
// each of the dynamic, Stage and Event clients.
func newClients(cfg *rest.Config) (*clients, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	stages, err := kargo.NewStageClient(cfg)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	leaseCfg := rest.CopyConfig(cfg)
	leaseCfg.RateLimiter = nil // NewForConfig then makes one for this client alone
	leaseCfg.QPS, leaseCfg.Burst = leaseQPS, leaseBurst
	leaseCfg.UserAgent = cfg.UserAgent + " (leader-election)"
	leases, err := kubernetes.NewForConfig(leaseCfg)
	if err != nil {
		return nil, err
	}
	return &clients{dynamic: dyn, stages: stages, kube: kube, leases: leases}, nil
}
