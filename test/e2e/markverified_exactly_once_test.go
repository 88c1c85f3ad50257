package e2e

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// TestMarkVerifiedExactlyOnceAcrossKills kills the real operator with
// SIGKILL at random moments while 20 cycles latch and mark their Freight,
// half per Application, half on the Stage's health. Every cycle's Freight
// must end verified in its Stage (no lost mark), its mark must never change
// once written, and each mark must have exactly one FreightVerified Event.
func TestMarkVerifiedExactlyOnceAcrossKills(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := newMeteredProcess(t, env.marker, "--namespace", ns, "--mark-verified", "--latch-deadline", "1m",
		"--health-probe-bind-address", "0", "-v", "2")
	op.start()
	marks := watchMarks(t, ns)

	const stageCount, cyclesPerStage = 4, 5
	stages := make([]*driver.Stage, stageCount)
	for i := range stages {
		stages[i] = env.createStage(t, ns, fmt.Sprintf("s%d", i), nil, appsAB)
	}
	cycles := make([][]markedCycle, stageCount)
	errs := make([]error, stageCount)
	var wg sync.WaitGroup
	for i, s := range stages {
		wg.Go(func() {
			for k := range cyclesPerStage {
				c, err := runMarkCycle(s, k%2 == 0)
				if err != nil {
					errs[i] = fmt.Errorf("%s, cycle %d: %w", s.Name, k+1, err)
					return
				}
				cycles[i] = append(cycles[i], c)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	// Kills come often, so that some land inside a mark: a restarted
	// operator needs about 100 ms to list and watch before it acts again.
	kills, began := 0, time.Now()
	for i, running := 0, true; running; i++ {
		if i%2 == 1 && !op.awaitSync(done) {
			break
		}
		select {
		case <-done:
			running = false
		case <-time.After(time.Duration(50+rand.IntN(300)) * time.Millisecond): //nolint:gosec // test jitter, not security
			op.kill()
			kills++
			op.start()
		}
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// A last restart must not mark again: once it has caught up, it has
	// judged every Stage.
	op.kill()
	op.start()
	op.caughtUp(t)
	t.Logf("the operator was killed %d times during %d marking cycles (%v)", kills, stageCount*cyclesPerStage, time.Since(began).Round(time.Millisecond))

	for i, s := range stages {
		events := env.stageEvents(t, s)[api.ReasonFreightVerified]
		if n := env.eventCount(t, s, api.ReasonFreightVerified); n != cyclesPerStage {
			t.Errorf("%s: %d FreightVerified Events for %d marks", s.Name, n, cyclesPerStage)
		}
		for _, c := range cycles[i] {
			f := freightOnServer(t, ns, c.freight)
			at, ok := verifiedAt(f, s.Name)
			switch {
			case !ok:
				t.Errorf("%s: Freight %s is not verified: a lost mark", s.Name, c.freight)
				continue
			case len(verifiedIn(f)) != 1:
				t.Errorf("%s: Freight %s is verified in %v, want only %s", s.Name, c.freight, verifiedIn(f), s.Name)
			}
			if got := marks.values(c.freight, s.Name); len(got) != 1 {
				t.Errorf("%s: the mark of Freight %s took the values %q, want one", s.Name, c.freight, got)
			}
			naming := 0
			for _, ev := range events {
				if strings.Contains(ev.Message, c.freight) {
					naming++
					if !strings.Contains(ev.Message, " at "+at+":") {
						t.Errorf("%s: the FreightVerified Event for %s states another time than the mark's %s: %q", s.Name, c.freight, at, ev.Message)
					}
				}
			}
			if naming != 1 {
				t.Errorf("%s: %d FreightVerified Events name Freight %s, want 1", s.Name, naming, c.freight)
			}
			// The latch is stored before the mark: whatever a kill
			// interrupted, verifiedAt is the stored latchedAt.
			if latched := rfc3339(c.latchedAt); at != latched {
				t.Errorf("%s: Freight %s verified at %s, but the cycle latched at %s", s.Name, c.freight, at, latched)
			}
		}
	}
}
