package dashboard

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// hub holds the page's state, each Stage and pause encoded once, and tells
// every open page what changed. A page is sent everything when it connects,
// then only the Stages and pauses whose encoding changed since what it was
// last sent: with a thousand Stages, a pause sends one Stage, not all.
type hub struct {
	mu     sync.Mutex
	stages map[string][]byte
	pauses map[string][]byte
	// versions are the Stages' Versions, which spare encoding them again.
	versions map[string]string
	problems map[string]string
	failing  bool
	access   map[string]Access
	// version counts the changes; each subscriber waits for a newer one.
	version uint64
	wake    chan struct{} // closed and replaced on every change
}

// Access is what the user may do in one project, as the API server answered
// a SelfSubjectAccessReview: Why says why not, for people.
type Access struct {
	Pause     bool   `json:"pause"`
	PauseWhy  string `json:"pauseWhy,omitempty"`
	Resume    bool   `json:"resume"`
	ResumeWhy string `json:"resumeWhy,omitempty"`
	// ReadWhy says which reads the user may no longer make.
	ReadWhy []string `json:"readWhy,omitempty"`
}

func newHub() *hub {
	return &hub{stages: map[string][]byte{}, pauses: map[string][]byte{}, wake: make(chan struct{})}
}

// update takes a new snapshot; it wakes the pages only if anything changed.
func (h *hub) update(s Snapshot) error {
	stages := make(map[string][]byte, len(s.Stages))
	versions := make(map[string]string, len(s.Stages))
	h.mu.Lock()
	prevStages, prevVersions := h.stages, h.versions
	h.mu.Unlock()
	for _, st := range s.Stages {
		k := Key(st.Project, st.Name)
		versions[k] = st.Version
		if st.Version != "" && prevVersions[k] == st.Version {
			if b, ok := prevStages[k]; ok {
				stages[k] = b // unchanged: not encoded again
				continue
			}
		}
		b, err := json.Marshal(st)
		if err != nil {
			return err
		}
		stages[k] = b
	}
	pauses := make(map[string][]byte, len(s.Pauses))
	for _, p := range s.Pauses {
		b, err := json.Marshal(p)
		if err != nil {
			return err
		}
		pauses[Key(p.Project, p.Name)] = b
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	// Both keeps run: each makes its map share the unchanged values.
	stagesChanged, pausesChanged := keep(h.stages, stages), keep(h.pauses, pauses)
	changed := stagesChanged || pausesChanged || !maps.Equal(h.problems, s.Problems) || h.failing != s.Failing
	h.stages, h.pauses, h.problems, h.versions, h.failing = stages, pauses, s.Problems, versions, s.Failing
	if changed {
		h.bump()
	}
	return nil
}

// keep makes next reuse prev's slice wherever the bytes are equal, so that
// subscribers compare pointers' worth of work, and reports whether anything
// changed.
func keep(prev, next map[string][]byte) bool {
	changed := len(prev) != len(next)
	for k, b := range next {
		if old, ok := prev[k]; ok && bytes.Equal(old, b) {
			next[k] = old
		} else {
			changed = true
		}
	}
	return changed
}

func (h *hub) setAccess(a map[string]Access) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if maps.EqualFunc(h.access, a, func(x, y Access) bool {
		return x.Pause == y.Pause && x.PauseWhy == y.PauseWhy && x.Resume == y.Resume && x.ResumeWhy == y.ResumeWhy && slices.Equal(x.ReadWhy, y.ReadWhy)
	}) {
		return
	}
	h.access = a
	h.bump()
}

// projects are the projects the state holds, for the access checks.
func (h *hub) projects() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	add := func(m map[string][]byte) {
		for k := range m {
			p, _, _ := strings.Cut(k, "/")
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	add(h.stages)
	add(h.pauses)
	return out
}

func (h *hub) bump() {
	h.version++
	close(h.wake)
	h.wake = make(chan struct{})
}

// view is what one page was last sent.
type view struct {
	version        uint64
	stages, pauses map[string][]byte
}

// message is one message of the live feed.
type message struct {
	// Full: the page drops what it had and takes this.
	Full bool `json:"full"`
	// Stages and Pauses map keys to the new value, or to null for gone.
	Stages   map[string]json.RawMessage `json:"stages"`
	Pauses   map[string]json.RawMessage `json:"pauses"`
	Problems map[string]string          `json:"problems"`
	Failing  bool                       `json:"failing"`
	Access   map[string]Access          `json:"access"`
	Now      time.Time                  `json:"now"`
}

// next returns the message that brings v up to date, and a channel closed
// on the next change. The message is nil when v is up to date.
func (h *hub) next(v *view, now time.Time) (*message, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v.stages != nil && v.version == h.version {
		return nil, h.wake
	}
	m := &message{Full: v.stages == nil, Problems: h.problems, Failing: h.failing, Access: h.access, Now: now,
		Stages: diff(v.stages, h.stages), Pauses: diff(v.pauses, h.pauses)}
	v.version, v.stages, v.pauses = h.version, h.stages, h.pauses
	return m, h.wake
}

// diff is what turns prev into next: changed and new keys with their
// values, removed ones with null. Equal values share their slice (keep).
func diff(prev, next map[string][]byte) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for k, b := range next {
		if old, ok := prev[k]; !ok || len(old) != len(b) || (len(b) > 0 && &old[0] != &b[0]) {
			out[k] = b
		}
	}
	for k := range prev {
		if _, ok := next[k]; !ok {
			out[k] = json.RawMessage("null")
		}
	}
	return out
}
