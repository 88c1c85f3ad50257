package kargo

import (
	"bytes"
	"compress/flate"
	"fmt"
	"hash/maphash"
	"io"
	"strings"
	"sync"
)

// Packed holds a Stage's latch record (its kargo-latch.io/state annotation)
// in the mirror. A latched cycle's record runs to about 4 KB (the time each
// of 40 Apps was first Healthy, ten verification records), which made it
// four fifths of a busy Stage's mirror; deflated it takes about an eighth
// of that. Only the syncs and a changed Stage's gauges read it, a few
// hundred times a second at most, at tens of microseconds each.
//
// The zero value is an absent annotation. Packed values are immutable and
// may be copied.
type Packed struct {
	data     string // the value, deflated when deflated is set
	size     int    // of the value
	deflated bool
	present  bool
}

// packAbove is the size under which a value is kept as it is: small records
// (a new cycle's) gain too little to be worth the CPU.
const packAbove = 512

// Pack packs value, a present annotation.
func Pack(value string) Packed {
	if len(value) <= packAbove {
		return Packed{data: value, present: true}
	}
	w := writers.Get().(*packWriter)
	defer writers.Put(w)
	w.buf.Reset()
	w.fw.Reset(&w.buf)
	if _, err := io.WriteString(w.fw, value); err != nil || w.fw.Close() != nil || w.buf.Len() >= len(value) {
		return Packed{data: value, present: true}
	}
	return Packed{data: w.buf.String(), size: len(value), deflated: true, present: true}
}

// Present reports whether the Stage has the annotation at all.
func (p Packed) Present() bool { return p.present }

// Read returns the annotation's value; empty when absent. An error means
// this process cannot inflate what it deflated itself (a bug, or corrupted
// memory): the value is unknown, which is not "no record". Taken for none,
// it would make the sync store a fresh record over the Stage's, losing its
// failure, pauses and marks; the API server's copy is intact.
func (p Packed) Read() (string, error) {
	if !p.deflated {
		return p.data, nil
	}
	r := readers.Get().(io.ReadCloser)
	defer readers.Put(r)
	if err := r.(flate.Resetter).Reset(strings.NewReader(p.data), nil); err != nil {
		return "", fmt.Errorf("inflating the cached %s annotation: %w", StateAnnotation, err)
	}
	out := make([]byte, p.size)
	if _, err := io.ReadFull(r, out); err != nil {
		return "", fmt.Errorf("inflating the cached %s annotation (%d of %d bytes): %w", StateAnnotation, len(p.data), p.size, err)
	}
	return string(out), nil
}

// Value is Read for tests and views that decide nothing: an unreadable
// value reads as empty. What writes on the strength of the value uses Read.
func (p Packed) Value() string {
	v, _ := p.Read()
	return v
}

// Hash hashes the value as packed, for telling a change without inflating
// it: equal values pack alike.
func (p Packed) Hash(seed maphash.Seed) uint64 {
	h := maphash.String(seed, p.data)
	if p.deflated {
		h = ^h
	}
	return h
}

type packWriter struct {
	buf bytes.Buffer
	fw  *flate.Writer
}

// Writers and readers are reused: a flate.Writer allocates about a megabyte.
var (
	writers = sync.Pool{New: func() any {
		fw, _ := flate.NewWriter(nil, flate.BestSpeed) // BestSpeed is a valid level
		return &packWriter{fw: fw}
	}}
	readers = sync.Pool{New: func() any { return flate.NewReader(strings.NewReader("")) }}
)

// Equal reports whether p and q hold the same annotation (go-cmp uses it):
// equal values pack alike, and an unreadable value equals only itself.
func (p Packed) Equal(q Packed) bool { return p == q }
