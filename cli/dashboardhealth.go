package cli

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// readHealth is what the dashboard's watches last heard from the API
// server. An informer retries a refused or broken watch for ever by itself,
// without a word; the page must not show what it read an hour ago as if it
// were live, so every failing watch is a problem the page shows until a
// request of that watch succeeds again.
type readHealth struct {
	mu      sync.Mutex
	failing map[readKey]readFailure
	changed chan<- struct{}
}

// readKey is one watch: a resource in a project ("" for all of them).
type readKey struct{ resource, ns string }

type readFailure struct {
	since time.Time
	err   string
}

func newReadHealth(changed chan<- struct{}) *readHealth {
	return &readHealth{failing: map[readKey]readFailure{}, changed: changed}
}

// hearing is the heard hook of one watch.
func (h *readHealth) hearing(resource, ns string) func(error) {
	k := readKey{resource, ns}
	return func(err error) {
		h.mu.Lock()
		_, was := h.failing[k]
		switch {
		case err == nil:
			delete(h.failing, k)
		case !was:
			h.failing[k] = readFailure{since: time.Now(), err: readError(err)}
		}
		_, is := h.failing[k]
		h.mu.Unlock()
		if was != is {
			select {
			case h.changed <- struct{}{}:
			default:
			}
		}
	}
}

func readError(err error) string {
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		return "the API server refuses: " + apiMessage(err)
	}
	return "the API server does not answer: " + err.Error()
}

// anyFailing reports whether any watch fails now.
func (h *readHealth) anyFailing() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.failing) > 0
}

// failingIn reports whether resource cannot be read in ns now.
func (h *readHealth) failingIn(resource, ns string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, one := h.failing[readKey{resource, ns}]
	_, all := h.failing[readKey{resource, ""}]
	return one || all
}

// problems adds the failing watches to the problems found at start, by
// project ("" for a cluster-wide watch).
func (h *readHealth) problems(static map[string]string) map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]string, len(static)+len(h.failing))
	for k, v := range static {
		out[k] = v
	}
	byNS := map[string][]string{}
	for k, f := range h.failing {
		byNS[k.ns] = append(byNS[k.ns], fmt.Sprintf("Cannot read %s since %s (what the page shows of them may be old): %s",
			k.resource, f.since.Format(time.TimeOnly), f.err))
	}
	for ns, lines := range byNS {
		sort.Strings(lines)
		if out[ns] != "" {
			lines = append([]string{out[ns]}, lines...)
		}
		out[ns] = strings.Join(lines, " ")
	}
	return out
}
