// Package verification builds the AnalysisRun that starts a Stage's
// configured verification exactly as Kargo's own controller would build it,
// so that Kargo adopts kargo-latch's run on its next Healthy pass instead of
// starting a second analysis. Build is pure: it is given the Stage, the
// templates, the Freight and the Warehouses. Starter reads them live, and
// makes, reads, cuts short and terminates runs. Verifier is verify-on-latch's
// part of a Stage's sync (observe, start, end, report), with what it
// remembers per Stage in a Memo; the sync judges when each is due. Anything
// it cannot do exactly as Kargo would is an *Unsupported error and no run:
// never a run with a wrong argument.
//
// Facts from Kargo's source (akuity/kargo, read 2026-12-06; the same shape on
// v1.11.2 and main unless noted):
//   - pkg/controller/stages (startVerification): the run is built only when
//     no run carries the two lookup labels; the builder is given the Stage
//     name as name prefix, the collection id as name suffix, the labels
//     kargo.akuity.io/stage (shortened) and kargo.akuity.io/freight-collection,
//     the annotation kargo.akuity.io/stage with the full name when the label
//     had to be shortened, an owner per Freight of the collection, and
//     kargo.akuity.io/promotion (the last Promotion's name; the last
//     PromotionRequest's on target-aware Stages) on a collection's first
//     verification only.
//   - pkg/rollouts/analysis_run_builder.go: metadata labels and annotations
//     from spec.verification.analysisRunMetadata first, then the extra ones
//     above (which win), then the controller-instance-id label; owner
//     references carry apiVersion, kind, name and uid read from each Freight
//     and blockOwnerDeletion false; templates are fetched in list order but
//     all AnalysisTemplates come before all ClusterAnalysisTemplates when
//     they are combined; a kind other than ClusterAnalysisTemplate means
//     AnalysisTemplate.
//   - pkg/rollouts (the builder's name options): the name prefix is cut to 218
//     characters and the suffix to 7; the name is prefix.ULID.suffix, lower
//     case.
package verification
