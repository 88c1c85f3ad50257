// Package pausing is kargo-latch's pausing of Stages: failure pauses, the
// drain, the release of held pauses once their resume is stored, and
// StagePause status. The controller passes in the clients, caches and
// reporters it needs; it imports nothing of the controller's.
package pausing
