package controller

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/latch"
)

// settingsFor reads a Stage's setting annotations over the operator's
// defaults. A value that does not parse keeps the default and is described
// in problems, which is empty when every setting is valid.
func settingsFor(annotations map[string]string, defaults latch.Settings) (s latch.Settings, problems string) {
	s = defaults
	var bad []string
	duration := func(key string, into *time.Duration) {
		v, ok := annotations[key]
		if !ok {
			return
		}
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d < 0 {
			bad = append(bad, fmt.Sprintf("%s=%q is not a non-negative duration such as 10m; using %s", key, v, *into))
			return
		}
		*into = d
	}
	boolean := func(key string, into *bool) {
		v, ok := annotations[key]
		if !ok {
			return
		}
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s=%q is not true or false; using %t", key, v, *into))
			return
		}
		*into = b
	}
	duration(api.LatchDeadlineAnnotation, &s.LatchDeadline)
	duration(api.DegradedGraceAnnotation, &s.DegradedGrace)
	boolean(api.PauseOnFailureAnnotation, &s.PauseOnFailure)
	boolean(api.DrainOnPauseAnnotation, &s.DrainOnPause)
	boolean(api.MarkVerifiedAnnotation, &s.MarkVerified)
	boolean(api.VerifyOnLatchAnnotation, &s.VerifyOnLatch)
	return s, strings.Join(bad, "; ")
}

// joinProblems joins two descriptions of invalid settings.
func joinProblems(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
