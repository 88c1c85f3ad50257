package e2e

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kargo-latch/kargo-latch/cli"
	"github.com/kargo-latch/kargo-latch/controller"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// The incident of the README and of the KargoStagePaused runbook: a release
// degrades, the on-call engineer pauses the Stage and rolls back to the
// Freight before. Kargo (v1.11+) then holds auto-promotion from the
// Warehouse, and that hold outlives the pause: after the resume nothing
// flows. kargo-latch never writes the hold, but status, resume, the
// StageResumed Event and wait --for=resumed each say it is there and how
// to release it; once released, wait --for=resumed is satisfied.
func TestKargoHoldAfterAnIncident(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	startOperator(t, ns, fastSettings())
	prod := env.latchedStages(t, ns, "prod")[0]
	good, err := prod.CurrentFreight(ctx)
	must(t, err)
	admin, dev := env.cluster.Config, env.cluster.UserConfig(devToken)

	// The next release degrades.
	promote(t, prod)
	must(t, prod.SetHealth(ctx, kargo.HealthHealthy))
	waitPhase(t, prod, latch.PhaseLatched)
	must(t, prod.SetHealth(ctx, kargo.HealthUnhealthy))
	waitPhase(t, prod, latch.PhaseDegraded)

	// Pause, then roll back: a person's Promotion passes the gate, and
	// Kargo records the hold when it replays it.
	if out, errOut, code := runCLI(t, dev, "pause", "prod", "-n", ns, "--reason", "Incident"); code != 0 {
		t.Fatalf("pause: exit %d, %q %q", code, out, errOut)
	}
	waitPaused(t, prod, true)
	rollback, err := prod.StartPromotionOf(ctx, good)
	must(t, err)
	_, err = prod.FinishPromotion(ctx, "Succeeded")
	must(t, err)
	must(t, prod.HoldAutoPromotion(ctx, driver.Hold{Freight: good, Promotion: rollback, Actor: "kubernetes:dev", CreatedAt: time.Now()}))
	must(t, prod.SetHealth(ctx, kargo.HealthHealthy))
	if r := waitPhase(t, prod, latch.PhaseLatched); r.Promotion != rollback {
		t.Fatalf("latched cycle of %s, want the rollback's (%s)", r.Promotion, rollback)
	}

	// status shows the hold beside the pause.
	pauses := env.listPauses(t, ns)
	if len(pauses) != 1 {
		t.Fatalf("%d StagePauses, want the on-call's", len(pauses))
	}
	holdLine := []string{"prod", "Warehouse/warehouse", good, "kubernetes:dev", rollback}
	checkStatusHolds(t, admin, ns, map[string][]string{"prod": {"Latched", "-", "yes", "Incident", pauses[0].GetName(), "warehouse"}}, [][]string{holdLine})

	// resume says the hold still stops auto-promotion, and how to release it.
	release := "to release it, promote the held Warehouse's current candidate Freight to the Stage (kargo promote --project " + ns +
		" --stage prod --freight NAME), or resume auto-promotion in Kargo's UI"
	hold := "Kargo itself still holds auto-promotion from Warehouse/warehouse at Freight " + good + " (by kubernetes:dev, promotion " + rollback + ", since "
	out, errOut, code := runCLI(t, admin, "resume", "prod", "-n", ns)
	if code != 0 || !strings.Contains(out, "Stage prod resumed") || !strings.Contains(out, "Stage prod: "+hold) || !strings.Contains(out, release) || errOut != "" {
		t.Errorf("resume: exit %d, stdout %q, stderr %q; want the hold and how to release it", code, out, errOut)
	}
	waitPaused(t, prod, false)
	if ev := waitEvent(t, prod, controller.ReasonStageResumed); !strings.Contains(ev.Message, "But "+hold) || !strings.Contains(ev.Message, release) {
		t.Errorf("StageResumed says %q; want the hold and how to release it", ev.Message)
	}

	// A pipeline waiting for the resume learns that Kargo still holds.
	_, errOut, code = runCLI(t, admin, "wait", "prod", "-n", ns, "--for=resumed", "--timeout", "1m")
	if code != cli.ExitHeld || !strings.Contains(errOut, "the Stage is not paused, but "+hold) {
		t.Errorf("wait --for=resumed: exit %d, stderr %q; want exit %d and the hold", code, errOut, cli.ExitHeld)
	}

	checkHoldsWrittenByKargoOnly(t, prod)

	// Someone promotes the candidate: Kargo drops the hold.
	must(t, prod.ReleaseAutoPromotionHold(ctx))
	out, errOut, code = runCLI(t, admin, "wait", "prod", "-n", ns, "--for=resumed", "--timeout", "1m")
	if code != cli.ExitOK || out != "stage "+ns+"/prod: the Stage is not paused\n" {
		t.Errorf("wait --for=resumed after the release: exit %d, %q %q", code, out, errOut)
	}
	checkStatusHolds(t, admin, ns, map[string][]string{"prod": {"Latched", "-", "no", "-", "-", "-"}}, nil)
}

// resume needs no right on Stages: without one, it resumes all the same
// and says that it could not look for Kargo's holds.
func TestResumeWithoutRightsToStagesSaysItCannotSeeHolds(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	startOperator(t, ns, fastSettings())
	prod := env.latchedStages(t, ns, "prod")[0]
	must(t, prod.HoldAutoPromotion(ctx, driver.Hold{Freight: "f", Promotion: "p", Actor: "admin", CreatedAt: time.Now()}))
	if _, errOut, code := runCLI(t, env.cluster.UserConfig(devToken), "pause", "prod", "-n", ns); code != 0 {
		t.Fatalf("pause: exit %d: %s", code, errOut)
	}
	waitPaused(t, prod, true)
	out, errOut, code := runCLI(t, env.cluster.UserConfig(leadToken), "resume", "prod", "-n", ns)
	if code != 0 || !strings.Contains(out, "Stage prod resumed") ||
		!strings.Contains(errOut, "warning: cannot read Stage prod in project "+ns+" to check for Kargo's own auto-promotion holds") {
		t.Errorf("resume by a resumer who cannot read Stages: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	waitPaused(t, prod, false)
}

// checkStatusHolds runs status and checks its table (checkTable's rules)
// and the lines below it, one per hold, each starting with the cells given.
func checkStatusHolds(t *testing.T, cfg *rest.Config, ns string, rows map[string][]string, holds [][]string) {
	t.Helper()
	out, errOut, code := runCLI(t, cfg, "status", "-n", ns)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	t.Logf("kargo-latch status -n %s:\n%s", ns, out)
	table, below, _ := strings.Cut(out, "Kargo's own auto-promotion holds (")
	checkTable(t, table, rows)
	if holds == nil {
		if below != "" {
			t.Errorf("status shows holds below the table, want none:\n%s", below)
		}
		return
	}
	lines := strings.Split(strings.TrimSpace(below), "\n")
	if len(lines) != 2+len(holds) || !strings.HasSuffix(lines[0], "or resume auto-promotion in Kargo's UI):") ||
		strings.Join(strings.Fields(lines[1]), " ") != "STAGE ORIGIN FREIGHT ACTOR PROMOTION SINCE" {
		t.Fatalf("the holds below the table:\n%s", below)
	}
	for i, want := range holds {
		if got := strings.Fields(lines[2+i]); len(got) < len(want) || strings.Join(got[:len(want)], " ") != strings.Join(want, " ") {
			t.Errorf("hold %q, want %v ...", lines[2+i], want)
		}
	}
}

// checkHoldsWrittenByKargoOnly checks the managed fields of a held Stage:
// Kargo's controller (the driver's field manager) wrote its holds, and
// nobody else did.
func checkHoldsWrittenByKargoOnly(t *testing.T, s *driver.Stage) {
	t.Helper()
	u, err := s.Get(ctx)
	must(t, err)
	byKargo := false
	for _, m := range u.GetManagedFields() {
		if m.FieldsV1 == nil {
			continue
		}
		fields := m.FieldsV1.GetRawString()
		if !strings.Contains(fields, `"f:autoPromotionHolds"`) && !strings.Contains(fields, `"f:`+kargo.HoldsField+`"`) {
			continue
		}
		if m.Manager != driver.FieldManager {
			t.Errorf("%s wrote Kargo's holds: %s", m.Manager, fields)
		}
		byKargo = true
	}
	if !byKargo {
		t.Error("the managed fields show no writer of the holds")
	}
}
