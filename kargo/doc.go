// Package kargo mirrors the few fields of Kargo's objects that kargo-latch
// reads (see ../shared/docs/contract.md, "Kargo objects read").
//
// Kargo's Go API module is not a dependency: these small types are built
// from unstructured objects, tolerate any missing field or odd value, and
// are what the informers keep in memory instead of whole Stages, whose
// status can hold tens of kilobytes of health output and history.
package kargo
