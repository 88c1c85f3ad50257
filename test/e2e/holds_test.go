package e2e

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/cli"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/cluster"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// The incident of docs/pausing.md and of the KargoStagePaused runbook: a release
// degrades, the on-call engineer pauses the Stage and rolls back to the
// Freight before. Kargo (v1.11.1+) then holds auto-promotion from the
// Warehouse, and that hold outlives the pause: after the resume nothing
// flows. kargo-latch never writes the hold, but status, resume, the
// StageResumed Event and wait --for=resumed each say it is there and how
// to release it. A person promotes the candidate: wait --for=resumed waits
// until Kargo has taken that Promotion in, then exits 0.
func TestKargoHoldAfterAnIncident(t *testing.T) {
	t.Parallel()
	ns, prod, good := latchedProd(t)
	admin, dev := env.cluster.Config, env.cluster.UserConfig(devToken)

	// The next release degrades.
	promote(t, prod)
	must(t, prod.SetHealth(ctx, kargo.HealthHealthy))
	waitPhase(t, prod, latch.PhaseLatched)
	must(t, prod.SetHealth(ctx, kargo.HealthUnhealthy))
	waitPhase(t, prod, latch.PhaseDegraded)

	// Pause, then roll back: a person's Promotion passes the gate. Kargo
	// holds the Warehouse as soon as it takes the Promotion in, and keeps
	// the hold once the Promotion has succeeded.
	if out, errOut, code := runCLI(t, dev, "pause", "prod", "-n", ns, "--reason", "Incident"); code != 0 {
		t.Fatalf("pause: exit %d, %q %q", code, out, errOut)
	}
	waitPaused(t, prod, true)
	rollback := rollBack(t, prod, good)
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
	hold := "Warehouse/warehouse at Freight " + good + " (by kubernetes:dev, promotion " + rollback + ", since "
	out, errOut, code := runCLI(t, admin, "resume", "prod", "-n", ns)
	if code != 0 || !strings.Contains(out, "Stage prod resumed") || !strings.Contains(out, "Stage prod: Kargo itself still holds auto-promotion from "+hold) ||
		!strings.Contains(out, release) || errOut != "" {
		t.Errorf("resume: exit %d, stdout %q, stderr %q; want the hold and how to release it", code, out, errOut)
	}
	waitPaused(t, prod, false)
	if ev := waitEvent(t, prod, api.ReasonStageResumed); !strings.Contains(ev.Message, "But Kargo itself still holds auto-promotion: "+release+". Kargo's holds: "+hold) {
		t.Errorf("StageResumed says %q; want how to release the hold, and the hold", ev.Message)
	}

	// A pipeline waiting for the resume learns that Kargo still holds.
	_, errOut, code = runCLI(t, admin, "wait", "prod", "-n", ns, "--for=resumed", "--timeout", "1m")
	if code != cli.ExitHeld || !strings.Contains(errOut, "the Stage is not paused, but Kargo itself still holds auto-promotion from "+hold) {
		t.Errorf("wait --for=resumed: exit %d, stderr %q; want exit %d and the hold", code, errOut, cli.ExitHeld)
	}

	checkHoldsWrittenByKargoOnly(t, prod)

	// Someone promotes the candidate ("kargo promote"): Kargo's webhook
	// stamps the resume intent, but until Kargo's Stage controller takes
	// the Promotion in, the Stage still shows the hold. The wait waits.
	candidate, err := prod.CreatePersonPromotion(ctx, "", "kubernetes:lead")
	must(t, err)
	wait := startCLI(t, admin, "wait", "prod", "-n", ns, "--for=resumed", "--timeout", "1m")
	wait.says(&wait.stderr, "the Stage is not paused; Kargo has yet to take in promotion "+candidate+
		", which releases its hold on auto-promotion from Warehouse/warehouse")
	wait.stillRunning("Kargo still shows the hold, and the Promotion that releases it")
	must(t, prod.TakeInPromotion(ctx, candidate))
	if code := wait.exit(); code != cli.ExitOK || wait.stdout.String() != "stage "+ns+"/prod: the Stage is not paused\n" {
		t.Errorf("wait --for=resumed while Kargo takes the release in: exit %d, stdout %q, stderr %q", code, wait.stdout.String(), wait.stderr.String())
	}

	// The release succeeds: its cycle latches, and nothing is held.
	_, err = prod.FinishPromotion(ctx, "Succeeded")
	must(t, err)
	must(t, prod.SetHealth(ctx, kargo.HealthHealthy))
	waitLatchedCycle(t, prod, candidate)
	checkStatusHolds(t, admin, ns, map[string][]string{"prod": {"Latched", "-", "no", "-", "-", "-"}}, nil)
	if holds := stageHolds(t, prod); len(holds["autoPromotionHolds"])+len(holds["effectiveAutoPromotionHolds"]) != 0 {
		t.Errorf("holds left after the release: %v", holds)
	}
}

// Kargo drops the effective hold as soon as it takes in the Promotion of
// the candidate; the durable entry goes only when that Promotion is
// terminal. Meanwhile Kargo auto-promotes again (it reads the effective
// map), and kargo-latch, which reads the effective map too, shows no hold:
// status has no HELD and wait --for=resumed exits 0.
func TestKargoHoldBeingReleasedShowsNone(t *testing.T) {
	t.Parallel()
	ns, prod, good := latchedProd(t)
	promote(t, prod)
	must(t, prod.SetHealth(ctx, kargo.HealthHealthy))
	waitPhase(t, prod, latch.PhaseLatched)
	rollback := rollBack(t, prod, good)
	must(t, prod.SetHealth(ctx, kargo.HealthHealthy))
	waitLatchedCycle(t, prod, rollback)
	admin := env.cluster.Config
	checkStatusHolds(t, admin, ns, map[string][]string{"prod": {"Latched", "-", "no", "-", "-", "warehouse"}},
		[][]string{{"prod", "Warehouse/warehouse", good, "kubernetes:dev", rollback}})

	_, err := prod.StartCandidatePromotion(ctx, "kubernetes:lead")
	must(t, err)
	holds := stageHolds(t, prod)
	if _, durable := holds["autoPromotionHolds"]["Warehouse/warehouse"]; !durable || len(holds["effectiveAutoPromotionHolds"]) != 0 {
		t.Fatalf("the test needs the durable hold without the effective one: %v", holds)
	}
	out, errOut, code := runCLI(t, admin, "status", "prod", "-n", ns)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	t.Logf("kargo-latch status prod -n %s:\n%s", ns, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if f := strings.Fields(lines[len(lines)-1]); len(lines) != 2 || f[0] != "prod" || f[6] != "-" {
		t.Errorf("status shows a hold (HELD, or lines below the table) while only the durable entry is left:\n%s", out)
	}
	out, errOut, code = runCLI(t, admin, "wait", "prod", "-n", ns, "--for=resumed", "--timeout", "1m")
	if code != cli.ExitOK || out != "stage "+ns+"/prod: the Stage is not paused\n" {
		t.Errorf("wait --for=resumed: exit %d, stdout %q, stderr %q; want 0", code, out, errOut)
	}
}

// A resumer who may not read Stages (a role of their own, narrower than
// the shipped kargo-latch-resumer) resumes all the same, and resume says
// that it could not look for Kargo's holds.
func TestResumeWithoutRightsToStagesSaysItCannotSeeHolds(t *testing.T) {
	t.Parallel()
	ns, prod, good := latchedProd(t)
	rollBack(t, prod, good)
	if _, errOut, code := runCLI(t, env.cluster.UserConfig(devToken), "pause", "prod", "-n", ns); code != 0 {
		t.Fatalf("pause: exit %d: %s", code, errOut)
	}
	waitPaused(t, prod, true)
	resumer := serviceAccountWith(t, ns, "pauses-only", cluster.Rule("kargo-latch.io", "stagepauses", "get", "list", "delete"))
	if _, err := dynamic.NewForConfigOrDie(resumer).Resource(kargo.StagesResource).Namespace(ns).Get(ctx, "prod", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the resumer reads the Stage (%v): the test proves nothing", err)
	}
	out, errOut, code := runCLI(t, resumer, "resume", "prod", "-n", ns)
	if code != 0 || !strings.Contains(out, "Stage prod resumed") ||
		!strings.Contains(errOut, "warning: cannot read Stage prod in project "+ns+" to check for Kargo's own auto-promotion holds") {
		t.Errorf("resume by a resumer who cannot read Stages: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	waitPaused(t, prod, false)
}

// latchedProd is a project with a running operator and a Stage prod
// promoted to Latched, and the Freight prod runs.
func latchedProd(t *testing.T) (ns string, prod *driver.Stage, freight string) {
	t.Helper()
	ns = env.newProject(t)
	startOperator(t, ns, fastSettings())
	prod = env.latchedStages(t, ns, "prod")[0]
	freight, err := prod.CurrentFreight(ctx)
	must(t, err)
	return ns, prod, freight
}

// rollBack promotes freight to s as a person (kubernetes:dev) and lets
// the Promotion succeed: Kargo then holds auto-promotion from the
// Warehouse. It returns the Promotion's name.
func rollBack(t *testing.T, s *driver.Stage, freight string) string {
	t.Helper()
	promotion, err := s.StartPromotionOf(ctx, freight, "kubernetes:dev")
	must(t, err)
	_, err = s.FinishPromotion(ctx, "Succeeded")
	must(t, err)
	return promotion
}

// serviceAccountWithRole is a ServiceAccount of ns bound to a Role of the
// rules given. The API server may apply the rules a moment later: callers
// wait for a right they need.
func serviceAccountWithRole(t *testing.T, ns, name string, rules ...map[string]any) *rest.Config {
	t.Helper()
	ruleList := make([]any, len(rules))
	for i, r := range rules {
		ruleList[i] = r
	}
	objs := []*unstructured.Unstructured{
		{Object: map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": name, "namespace": ns}}},
		{Object: map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
			"metadata": map[string]any{"name": name, "namespace": ns}, "rules": ruleList}},
		{Object: map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
			"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": name, "namespace": ns}}}},
	}
	must(t, cluster.Apply(ctx, env.cluster.Config, objs...))
	cfg, err := env.cluster.ServiceAccountConfig(ctx, ns, name)
	must(t, err)
	return cfg
}

// serviceAccountWith is a ServiceAccount of ns with a Role of the rules
// given (which let it list StagePauses), once the API server applies them.
func serviceAccountWith(t *testing.T, ns, name string, rules ...map[string]any) *rest.Config {
	t.Helper()
	cfg := serviceAccountWithRole(t, ns, name, rules...)
	pauses := dynamic.NewForConfigOrDie(cfg).Resource(v1alpha1.StagePausesResource).Namespace(ns)
	waitFor(t, "the ServiceAccount's rights", func() bool {
		_, err := pauses.List(ctx, metav1.ListOptions{})
		return err == nil
	})
	return cfg
}

// waitLatchedCycle waits until the cycle of promotion is Latched.
func waitLatchedCycle(t *testing.T, s *driver.Stage, promotion string) {
	t.Helper()
	waitFor(t, "the cycle of "+promotion+" to latch", func() bool {
		r := stageRecord(t, s)
		return r.Promotion == promotion && r.Phase == latch.PhaseLatched
	})
}

// stageHolds reads both of Kargo's holds maps of the Stage: the durable
// autoPromotionHolds and the effective ones kargo-latch reads.
func stageHolds(t *testing.T, s *driver.Stage) map[string]map[string]any {
	t.Helper()
	u, err := s.Get(ctx)
	must(t, err)
	out := map[string]map[string]any{}
	for _, field := range []string{"autoPromotionHolds", "effectiveAutoPromotionHolds"} {
		m, _, _ := unstructured.NestedMap(u.Object, "status", field)
		out[field] = m
	}
	return out
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
