package pausing

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
)

// The holds of an operator's writes after the undos let be: doubling from
// 10 s to 5 minutes.
func TestUndoneBackoff(t *testing.T) {
	var got []time.Duration
	for n := 1; n <= 8; n++ {
		got = append(got, undoneBackoff(n))
	}
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 5 * time.Minute, 5 * time.Minute, 5 * time.Minute}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("holds %v, want %v", got, want)
	}
}

// logPause is a pause at version rv whose status.shards holds shards.
func logPause(uid, rv string, shards map[string]int32) *v1alpha1.StagePause {
	p := &v1alpha1.StagePause{}
	p.Namespace, p.Name, p.UID, p.ResourceVersion = "shop", "all", types.UID(uid), rv
	p.Status.Shards = shards
	return p
}

// Which undos count: one within undoWindow of the write it undid; not a
// write that stands, nor a change long after the write. A write that
// stands for undoWindow ends the run of undos.
func TestUndosCountWithinTheWindow(t *testing.T) {
	var l pauseWriteLog
	term := new(int)
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	own := map[string]int32{"eu": 1}
	write := func(rv string) {
		l.wrote(term, logPause("u", rv, nil), "eu", &v1alpha1.StagePauseStatus{Shards: own}, "", at)
	}
	observe := func(rv string, shards map[string]int32, after time.Duration) (time.Duration, int) {
		return l.observe(term, logPause("u", rv, shards), "eu", at.Add(after))
	}
	// Two quick undos are let be; the third holds.
	write("1")
	observe("2", nil, time.Second)
	write("2")
	observe("3", nil, time.Second)
	write("3")
	if held, undos := observe("4", nil, time.Second); held != 10*time.Second || undos != 3 {
		t.Fatalf("third quick undo: held %v, undos %d; want 10s, 3", held, undos)
	}
	// The cache still at the version the write was conditional on says
	// nothing, and neither does a write that stands.
	l = pauseWriteLog{}
	write("1")
	if held, undos := observe("1", nil, time.Second); held != 0 || undos != 0 {
		t.Errorf("before the cache shows the write: held %v, undos %d", held, undos)
	}
	for i, rv := range []string{"2", "3", "4"} {
		write(rv)
		if _, undos := observe(fmt.Sprint(i+10), own, time.Second); undos != 0 {
			t.Errorf("a write that stands counted as an undo")
		}
	}
	// A change long after the write is not an undo.
	l = pauseWriteLog{}
	for _, rv := range []string{"1", "2", "3"} {
		write(rv)
		if held, undos := observe(rv+"0", nil, undoWindow+time.Second); held != 0 || undos != 0 {
			t.Errorf("a late change: held %v, undos %d; want none", held, undos)
		}
	}
	// Two quick undos, then a write that stands for undoWindow: the run
	// starts over, and two more quick undos are let be.
	l = pauseWriteLog{}
	write("1")
	observe("2", nil, time.Second)
	write("2")
	observe("3", nil, time.Second)
	write("3")
	observe("4", own, undoWindow)
	for _, rv := range []string{"5", "6"} {
		write(rv)
		if held, undos := observe(rv+"0", nil, time.Second); held != 0 || undos != 0 {
			t.Errorf("undo after a standing write: held %v, undos %d; want none", held, undos)
		}
	}
}

// The key superseded is removed once per term and pause: again in a new
// term, and for a new pause of the same name, not after its removal.
func TestSupersededKeyIsRemovedOncePerTerm(t *testing.T) {
	var l pauseWriteLog
	first, second := new(int), new(int)
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	p := logPause("u", "1", map[string]int32{"*": 3})
	if got := l.supersededToRemove(first, p, "default"); got != "*" {
		t.Fatalf("the first time: removes %q, want \"*\"", got)
	}
	l.wrote(first, p, "default", &v1alpha1.StagePauseStatus{Shards: map[string]int32{"default": 2}}, "*", at)
	if got := l.supersededToRemove(first, p, "default"); got != "" {
		t.Errorf("after its removal in the term: removes %q, want none", got)
	}
	if got := l.supersededToRemove(second, p, "default"); got != "*" {
		t.Errorf("in a new term: removes %q, want \"*\"", got)
	}
	l.wrote(second, p, "default", &v1alpha1.StagePauseStatus{Shards: map[string]int32{"default": 2}}, "*", at)
	if got := l.supersededToRemove(second, logPause("v", "1", nil), "default"); got != "*" {
		t.Errorf("a new pause of the same name: removes %q, want \"*\"", got)
	}
}
