package e2e

import (
	"fmt"

	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// scenarioStories plays the stories of the reliability scenario. Each runs
// outside the test's goroutine and returns its error.
type scenarioStories struct {
	w    *world
	ns   string
	slow poller
}

// play takes s through the story of kind.
func (st *scenarioStories) play(kind int, s *driver.Stage) error {
	err := st.latch(s)
	if err == nil {
		err = st.after(kind, s)
	}
	if err != nil {
		return fmt.Errorf("%s (kind %d): %w", s.Name, kind, err)
	}
	return nil
}

func (st *scenarioStories) latch(s *driver.Stage) error {
	if _, err := s.FinishPromotion(ctx, "Succeeded"); err != nil {
		return err
	}
	for _, h := range []string{kargo.HealthProgressing, kargo.HealthHealthy} {
		if err := s.SetHealth(ctx, h); err != nil {
			return err
		}
	}
	return st.slow.wait(s.Name+" latched", func() (bool, error) {
		r, err := readRecord(s)
		return r.Phase == latch.PhaseLatched, err
	})
}

// after plays what follows the latch in a story of kind.
func (st *scenarioStories) after(kind int, s *driver.Stage) error {
	switch kind {
	case kindFlapper:
		for range 3 {
			for _, h := range []string{kargo.HealthProgressing, kargo.HealthHealthy} {
				if err := s.SetHealth(ctx, h); err != nil {
					return err
				}
			}
		}
		return nil
	case kindPromotionFails:
		if _, err := s.FinishPromotion(ctx, "Failed"); err != nil {
			return err
		}
		return st.waitPaused(s, true, "paused")
	case kindDegrades:
		if err := s.SetHealth(ctx, kargo.HealthUnhealthy); err != nil {
			return err
		}
		return st.waitPaused(s, true, "paused")
	case kindManualPause:
		if err := createPause(st.w.dev, pause(st.ns, s.Name+"-manual", s.Name, "Manual")); err != nil {
			return err
		}
		return st.waitPaused(s, true, "paused")
	case kindResumed:
		if _, err := s.FinishPromotion(ctx, "Errored"); err != nil {
			return err
		}
		if err := st.waitPaused(s, true, "paused"); err != nil {
			return err
		}
		r, err := readRecord(s)
		if err != nil {
			return err
		}
		if r.Failure == nil {
			return fmt.Errorf("paused with no failure in its record (phase %s)", r.Phase)
		}
		if err := deletePause(st.w.lead, st.ns, r.Failure.Pause); err != nil {
			return err
		}
		return st.waitPaused(s, false, "resumed")
	}
	return nil
}

// pauseProjectWide latches the Stages of wideNS, pauses the project, waits
// until every Stage is paused, resumes it and waits until none is.
func (st *scenarioStories) pauseProjectWide(wideNS string, stages []*driver.Stage) error {
	for _, s := range stages {
		if _, err := s.FinishPromotion(ctx, "Succeeded"); err != nil {
			return err
		}
		if err := s.SetHealth(ctx, kargo.HealthHealthy); err != nil {
			return err
		}
	}
	if err := createPause(st.w.dev, pause(wideNS, "big-red-button", "*", "ProjectPause")); err != nil {
		return err
	}
	for _, s := range stages {
		if err := st.waitPaused(s, true, "paused project-wide"); err != nil {
			return err
		}
	}
	if err := deletePause(st.w.lead, wideNS, "big-red-button"); err != nil {
		return err
	}
	for _, s := range stages {
		if err := st.waitPaused(s, false, "resumed project-wide"); err != nil {
			return err
		}
	}
	return nil
}

func (st *scenarioStories) waitPaused(s *driver.Stage, want bool, what string) error {
	return st.slow.wait(s.Name+" "+what, func() (bool, error) {
		p, err := isPaused(s)
		return p == want, err
	})
}
