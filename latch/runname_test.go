package latch

import (
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

const collectionID = "0c9f4b7a6d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a"

var kargoLikeName = regexp.MustCompile(`^(.+)\.([0-7][0-9a-hjkmnp-tv-z]{25})(?:\.([0-9a-z.-]{1,7}))?$`)

func TestRunName(t *testing.T) {
	long := strings.Repeat("very-long.stage-", 20) // 320 characters
	tests := []struct {
		name, stage, collection, cycle string
		wantStage                      string // "" = the stage itself
	}{
		{name: "plain", stage: "test", collection: collectionID, cycle: "test.01jabc.1234567"},
		{name: "dots and dashes", stage: "prod.eu-west-1", collection: collectionID, cycle: "2026-12-06T00:00:00Z"},
		{name: "long stage", stage: long, collection: collectionID, cycle: "c"},
		{name: "upper case and odd characters", stage: "Prod_EU", collection: "ABCDEF0123", cycle: "c", wantStage: "prod-eu"},
		{name: "empty collection", stage: "test", collection: "", cycle: "c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := RunName(tt.stage, tt.collection, tt.cycle, 1)
			if got != RunName(tt.stage, tt.collection, tt.cycle, 1) {
				t.Fatal("the same inputs gave two names")
			}
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Errorf("%q is not a DNS subdomain: %v", got, errs)
			}
			m := kargoLikeName.FindStringSubmatch(got)
			if m == nil {
				t.Fatalf("%q is not <stage>.<ulid>.<collection[:7]>", got)
			}
			switch {
			case len(tt.stage) > maxNamePrefixLen:
				if len(m[1]) > maxNamePrefixLen || !strings.HasPrefix(tt.stage, strings.TrimSuffix(m[1], m[1][len(m[1])-9:])) {
					t.Errorf("stage part %q is not a shortened %q", m[1], tt.stage)
				}
			case tt.wantStage != "":
				if m[1] != tt.wantStage {
					t.Errorf("stage part = %q, want %q", m[1], tt.wantStage)
				}
			default:
				if m[1] != tt.stage {
					t.Errorf("stage part = %q, want %q", m[1], tt.stage)
				}
			}
			if want := strings.ToLower(tt.collection); len(want) > 7 && m[3] != want[:7] {
				t.Errorf("collection part = %q, want %q", m[3], want[:7])
			}
		})
	}
	base := RunName("test", collectionID, "cycle-1", 1)
	for _, other := range []string{
		RunName("test", collectionID, "cycle-2", 1),
		RunName("test2", collectionID, "cycle-1", 1),
		RunName("test", strings.Replace(collectionID, "0c9", "1c9", 1), "cycle-1", 1),
		RunName("test", collectionID, "cycle-1", 2),
	} {
		if other == base {
			t.Errorf("different inputs gave the same name %q", base)
		}
	}
}

func FuzzRunName(f *testing.F) {
	f.Add("test", collectionID, "promo")
	f.Add(strings.Repeat("a.", 200), "", "")
	f.Add("-.-", "..", "x")
	f.Fuzz(func(t *testing.T, stage, collection, cycle string) {
		got := RunName(stage, collection, cycle, 1)
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Fatalf("RunName(%q, %q, %q) = %q: %v", stage, collection, cycle, got, errs)
		}
	})
}
