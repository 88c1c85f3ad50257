// Package pausing is kargo-latch's pausing of Stages: failure pauses, the
// drain, resume and release, and StagePause status. The controller passes
// in the clients, caches and reporters it needs; it imports nothing of the
// controller's.
package pausing
