package kargo

import (
	"bytes"
	"compress/flate"
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

// Value is the annotation's value; empty when absent.
func (p Packed) Value() string {
	if !p.deflated {
		return p.data
	}
	r := readers.Get().(io.ReadCloser)
	defer readers.Put(r)
	if err := r.(flate.Resetter).Reset(strings.NewReader(p.data), nil); err != nil {
		return ""
	}
	out := make([]byte, p.size)
	if _, err := io.ReadFull(r, out); err != nil {
		// Only a bug here could corrupt what this process deflated; an
		// empty value then reads as no record, which is reported.
		return ""
	}
	return string(out)
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

// Equal reports whether p and q hold the same annotation (go-cmp uses it).
func (p Packed) Equal(q Packed) bool {
	return p.present == q.present && p.Value() == q.Value()
}
