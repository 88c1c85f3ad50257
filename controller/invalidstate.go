package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// recordOf reads the record of a cached Stage. A cached copy this process
// cannot inflate (kargo.Packed.Read) is not "no record": taken for one, the
// sync would store a fresh record over the Stage's and lose its failure,
// pauses and marks. It is reported as an invalid record, and the record is
// read from the Stage on the API server, whose copy is intact; one that
// cannot be read either is never written over: the sync fails and is
// retried. A nil Stage is gone, or has left this shard.
func (c *Controller) recordOf(ctx context.Context, key cache.ObjectName, stage *kargo.Stage, m *memo) (*kargo.Stage, string, error) {
	value, err := stage.State.Read()
	if err == nil {
		return stage, value, nil
	}
	live, liveErr := c.liveStage(ctx, key)
	if live != nil && liveErr == nil {
		value, liveErr = live.State.Read()
	}
	// Reported once per copy (not per resourceVersion: Kargo's status
	// writes do not make it a new problem), and counted once in a sync
	// that reports the Stage's record as garbage too.
	if copyDigest := (stateDigest{known: true, sum: stage.State.Hash(digestSeed)}); m.unreadableCopy != copyDigest {
		m.unreadableCopy = copyDigest
		c.report.Warn(stage, api.ReasonInvalidState, "kargo-latch cannot read its cached copy of the %s annotation (%v); it reads the Stage from the API server instead, and writes over no record it cannot read. This is a bug in kargo-latch: please report it", api.StateAnnotation, err)
		if live == nil || liveErr != nil || !c.reportsGarbage(value, m) {
			c.cfg.Metrics.InvalidInput.WithLabelValues(stage.Namespace, stage.Name, "state").Inc()
		}
	}
	if live == nil || liveErr != nil {
		return nil, "", liveErr
	}
	return live, value, nil
}

// maxKeptGarbage bounds what kargo-latch.io/invalid-state keeps of a garbage
// record. The API server refuses a Stage whose annotations total more than
// 256 KiB: a record near that size, kept whole beside the fresh one, would
// have every store refused and the Stage never latch, and would weigh on
// the Stage for good.
const maxKeptGarbage = 16 << 10

// keptGarbage is what kargo-latch.io/invalid-state keeps of a garbage
// record: the record itself when it fits maxKeptGarbage; otherwise a first
// line naming its length and the SHA-256 of the whole, then as much of its
// beginning as fits (cut between characters), maxKeptGarbage bytes in all:
//
//	kargo-latch.io/invalid-state: the first 16287 of 261990 bytes, sha256 9f86d0…
//	{"version":1,"phase":"Failed",…
//
// prefix is how many bytes of the record it keeps: all of them, or fewer.
func keptGarbage(value string) (kept string, prefix int) {
	if len(value) <= maxKeptGarbage {
		return value, len(value)
	}
	header := func(n int) string {
		return fmt.Sprintf("%s: the first %d of %d bytes, sha256 %s\n", kargo.InvalidStateAnnotation, n, len(value), sha256Hex(value))
	}
	// The header of a shorter prefix is no longer than that of the whole.
	n := maxKeptGarbage - len(header(len(value)))
	for n > 0 && !utf8.RuneStart(value[n]) {
		n--
	}
	return header(n) + value[:n], n
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// garbageReport is the part of the InvalidState Warning about a garbage
// record that says where it is kept.
func (c *Controller) garbageReport(value string) string {
	where := "the fresh record's first write keeps it in"
	if c.cfg.DryRun {
		where = "a run without --dry-run would keep it in"
	}
	what := ""
	if _, prefix := keptGarbage(value); prefix < len(value) {
		what = fmt.Sprintf(" (its first %d of %d bytes, with the SHA-256 of the whole: that annotation holds at most %d KiB)", prefix, len(value), maxKeptGarbage>>10)
	}
	return fmt.Sprintf("%s the %s annotation%s, to be mended from there; delete that annotation once mended", where, kargo.InvalidStateAnnotation, what)
}

// reportsGarbage reports whether priorRecord is about to report value as a
// garbage record, counting it: a sync counts one bad record once.
func (c *Controller) reportsGarbage(value string, m *memo) bool {
	if c.cfg.DryRun && m.dryRunRecord != nil || value == m.badState || latch.NewerVersion(value) != nil {
		return false
	}
	_, err := latch.Decode(value)
	return err != nil
}

// annotationsTooLong reports whether the API server refused a write because
// the object's annotations would total more than its limit (256 KiB).
func annotationsTooLong(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, cause := range status.Status().Details.Causes {
		if cause.Type == metav1.CauseTypeTooLong && cause.Field == "metadata.annotations" {
			return true
		}
	}
	return false
}

// storeWithoutGarbage is the store's second try when the API server refused
// its write because the kept garbage record would push the Stage's
// annotations past the limit (other annotations filling it): the fresh
// record is stored without it, and a Warning says so. The garbage is then
// lost but for its length and hash in the Warning; the fresh record is never
// held back by it. A second refusal is the store's error, retried as any.
func (c *Controller) storeWithoutGarbage(ctx context.Context, stage *kargo.Stage, garbage string, annotations, labels map[string]any, refused error) (*kargo.Stage, error) {
	delete(annotations, kargo.InvalidStateAnnotation)
	stored, err := c.patchMetadata(ctx, stage, annotations, labels)
	if err != nil {
		return nil, err
	}
	c.report.Warn(stage, api.ReasonInvalidState, "The garbage %s record (%d bytes, sha256 %s) could not be kept in the %s annotation: the Stage's other annotations leave no room for it (%v). The fresh record is stored without it, and the garbage is lost",
		api.StateAnnotation, len(garbage), sha256Hex(garbage), kargo.InvalidStateAnnotation, refused)
	return stored, nil
}
