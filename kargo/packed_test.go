package kargo

import (
	"fmt"
	"hash/maphash"
	"strings"
	"testing"
	"time"

	"github.com/kargo-latch/kargo-latch/latch"
)

// latchedRecord is the record of a cycle latched by 40 Apps, with a full
// verification history: about 4 KB.
func latchedRecord() string {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	r := latch.Record{Promotion: "s.01m8nq4kw9g5026g6wkck5k1xv.8f14e45", Freight: "8f14e45fceea167a5a36dedd4bea25438f14e45f",
		Phase: latch.PhaseLatched, PromotedAt: &now, LatchedAt: &now, AppsHealthy: map[string]time.Time{}}
	for i := range 40 {
		r.AppsHealthy[fmt.Sprintf("argocd/stage-00001-app-%02d", i)] = now.Add(time.Duration(i) * 1300 * time.Millisecond)
	}
	for i := range latch.HistoryLimit {
		r.History = append(r.History, latch.VerificationRecord{ID: fmt.Sprintf("0d7d5e6a-1d2c-4f8b-9d2e-5c1b2a3d4e%02d", i), Actor: "kargo-latch",
			StartTime: now, FinishTime: now, Phase: latch.VerificationSuccessful})
	}
	return r.Encode()
}

func TestPackedKeepsEveryValue(t *testing.T) {
	for name, value := range map[string]string{
		"empty":          "",
		"small":          `{"version":1,"phase":"Promoted"}`,
		"latched":        latchedRecord(),
		"incompressible": strings.Repeat("x", 10) + fmt.Sprint(time.Now().UnixNano()),
		"large garbage":  strings.Repeat("garbage\x00\xff", 5000),
	} {
		p := Pack(value)
		if !p.Present() || p.Value() != value {
			t.Errorf("%s: packed %d bytes read back as %d bytes (present %v)", name, len(value), len(p.Value()), p.Present())
		}
	}
	if p := Pack(latchedRecord()); len(p.data) > len(latchedRecord())/4 {
		t.Errorf("a latched record of %d bytes packed to %d, want a quarter at most", len(latchedRecord()), len(p.data))
	}
	var absent Packed
	if absent.Present() || absent.Value() != "" {
		t.Error("the zero Packed is not an absent annotation")
	}
	seed := maphash.MakeSeed()
	one, again := Pack(latchedRecord()), Pack(latchedRecord())
	if one.Hash(seed) != again.Hash(seed) || Pack("a").Hash(seed) == Pack("b").Hash(seed) {
		t.Error("equal values hash apart, or different ones alike")
	}
}

// unreadable is a present value that fails to inflate, as a bug in Packed
// would leave one.
func unreadable() Packed {
	return Packed{data: "\xff not deflated", size: 64, deflated: true, present: true}
}

// An unreadable value is told from an absent or empty one: read as "no
// record", it would have the sync store a fresh record over the Stage's.
func TestPackedTellsAnUnreadableValueFromNone(t *testing.T) {
	bad := unreadable()
	if v, err := bad.Read(); err == nil || v != "" || !bad.Present() {
		t.Errorf("an unreadable value read as %q, err %v, present %v; want an error and present", v, err, bad.Present())
	}
	for name, p := range map[string]Packed{"absent": {}, "empty": Pack(""), "latched": Pack(latchedRecord())} {
		if _, err := p.Read(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if p.Equal(bad) || bad.Equal(p) {
			t.Errorf("%s equals an unreadable value", name)
		}
	}
	if !bad.Equal(unreadable()) || !Pack(latchedRecord()).Equal(Pack(latchedRecord())) {
		t.Error("equal packed values are not Equal")
	}
}

func TestMirrorPacksTheRecord(t *testing.T) {
	record := latchedRecord()
	doc := strings.Replace(busyBenchStage(`X`), `"X"`, fmt.Sprintf("%q", record), 1)
	s := viaDocs(t, []byte(doc))
	if _, kept := s.Annotations[StateAnnotation]; kept || s.State.Value() != record {
		t.Errorf("the mirror kept the record in Annotations (%v) or lost it from State", kept)
	}
	if s.Status.Apps != nil {
		t.Errorf("a latched Stage's mirror kept %d Apps", len(s.Status.Apps))
	}
}

func BenchmarkPacked(b *testing.B) {
	record := latchedRecord()
	b.Run("pack", func(b *testing.B) {
		for b.Loop() {
			Pack(record)
		}
	})
	p := Pack(record)
	b.Run("value", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = p.Value()
		}
	})
}
