package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/latch"
)

func TestSettingsFor(t *testing.T) {
	defaults := latch.Settings{LatchDeadline: 30 * time.Minute, DegradedGrace: 5 * time.Minute, DrainOnPause: true}
	cases := map[string]struct {
		annotations map[string]string
		want        latch.Settings
		problems    []string
	}{
		"none": {want: defaults},
		"all valid": {
			annotations: map[string]string{
				api.LatchDeadlineAnnotation: "10m", api.DegradedGraceAnnotation: " 0s ",
				api.PauseOnFailureAnnotation: "true", api.DrainOnPauseAnnotation: "false",
			},
			want: latch.Settings{LatchDeadline: 10 * time.Minute, PauseOnFailure: true},
		},
		"zero deadline disables": {
			annotations: map[string]string{api.LatchDeadlineAnnotation: "0"},
			want:        latch.Settings{DegradedGrace: 5 * time.Minute, DrainOnPause: true},
		},
		"invalid values keep defaults": {
			annotations: map[string]string{
				api.LatchDeadlineAnnotation: "soon", api.DegradedGraceAnnotation: "-1m",
				api.PauseOnFailureAnnotation: "yes", api.DrainOnPauseAnnotation: "",
			},
			want:     defaults,
			problems: []string{`latch-deadline="soon"`, `degraded-grace="-1m"`, `pause-on-failure="yes"`, `drain-on-pause=""`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, problems := settingsFor(tc.annotations, defaults)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("settings mismatch (-want +got):\n%s", diff)
			}
			if len(tc.problems) == 0 && problems != "" {
				t.Errorf("unexpected problems %q", problems)
			}
			for _, p := range tc.problems {
				if !strings.Contains(problems, p) {
					t.Errorf("problems %q do not mention %s", problems, p)
				}
			}
		})
	}
}
