package main

import "testing"

// TestLatchToResultQuantiles: four results in the hour, two of them within
// 30 s of their latch, one within a minute and one within 10 minutes: p50
// is 30 s, and p99 lies in the 300-600 s bucket (Prometheus interpolates
// linearly: 300 + 300 * 0.96).
func TestLatchToResultQuantiles(t *testing.T) {
	evaluate(t, `
load 1m
  kargo_latch_latch_to_verification_seconds_bucket{le="5", instance="r1"} 0x60
  kargo_latch_latch_to_verification_seconds_bucket{le="15", instance="r1"} 0x60
  kargo_latch_latch_to_verification_seconds_bucket{le="30", instance="r1"} 0x20 2x40
  kargo_latch_latch_to_verification_seconds_bucket{le="60", instance="r1"} 0x20 3x40
  kargo_latch_latch_to_verification_seconds_bucket{le="300", instance="r1"} 0x20 3x40
  kargo_latch_latch_to_verification_seconds_bucket{le="600", instance="r1"} 0x20 4x40
  kargo_latch_latch_to_verification_seconds_bucket{le="+Inf", instance="r1"} 0x20 4x40
  kargo_latch_latch_to_verification_seconds_bucket{le="30", instance="r2"} 0x60
  kargo_latch_latch_to_verification_seconds_bucket{le="+Inf", instance="r2"} 0x60

eval instant at 60m %s
  {} 30

eval instant at 60m %s
  {} 588
`, latchToResultQuantile("0.5"), latchToResultQuantile("0.99"))
}

// TestResultsPerHourByPhase: the results panel counts a phase born in the
// hour (Failed, at 1 from 80m) and one older than the hour (Successful, +1
// every 10 minutes), across Stages.
func TestResultsPerHourByPhase(t *testing.T) {
	evaluate(t, `
load 10m
  kargo_latch_verification_results_total{project="p", stage="a", phase="Successful"} 1+1x12
  kargo_latch_verification_results_total{project="p", stage="b", phase="Successful"} 1x12
  kargo_latch_verification_results_total{project="p", stage="b", phase="Failed"} _x7 1x5

eval instant at 120m %s
  {phase="Successful"} 6
  {phase="Failed"} 1
`, perHour("phase", inProject("kargo_latch_verification_results_total")))
}
