// Package windows is kargo-latch's pure core for Kargo's promotion windows
// (`promotionWindows` on the ProjectConfig and the ClusterConfig), which
// Kargo OSS carries in its API but does not enforce.
//
// It reads a window as Kargo writes it (ParseWindow, ParseWindows), checks and
// compiles it once (Compile, CompileClusterWide), tells which Stages it
// selects (Matches, by Kargo's PromotionPolicySelector rules), and turns one
// Stage's windows into the intervals during which that Stage is closed
// (Schedule) or its state at one instant (ActiveAt), by Kargo's semantics:
// a Stage is closed while any Deny window is active, or while at least one
// Allow window matches it and none is active.
//
// Times follow RFC 5545: recurrences are expanded in local (wall-clock) time
// in the window's TZID zone, from the IANA database embedded in the binary,
// and each local time is then read as §3.3.5 says (a time that occurs twice
// is the first; a time in a gap is read with the offset before the gap).
// Each occurrence lasts the exact duration dtend - dtstart (§3.8.5.3).
//
// The package reads no clock and does no I/O: the caller passes the times,
// so every rule is tested with plain values.
package windows
