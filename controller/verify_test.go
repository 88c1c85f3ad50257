package controller

import (
	"testing"
	"time"
)

func TestRefusedStartsBackOff(t *testing.T) {
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 30 * time.Minute, 30 * time.Minute}
	for i, w := range want {
		if got := verifyBackoff(i + 1); got != w {
			t.Errorf("wait after refusal %d = %v, want %v", i+1, got, w)
		}
	}
}
