// Package latch is kargo-latch's pure state machine.
//
// Step takes the per-Stage settings, the record the operator stored on the
// Stage last time, what Kargo reports now, and the current time, and returns
// the next record, the actions that the transition calls for, and when the
// machine next needs to look. It reads no clock and talks to no API server,
// so every rule of the contract (../shared/docs/contract.md, "The latch") is
// tested here with plain values.
package latch
