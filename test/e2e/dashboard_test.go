package e2e

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/chromedp/chromedp"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
)

// A pauser pauses a Stage from the page: Pause, a reason and a message,
// confirm. The StagePause is theirs (paused-by), with what they typed, and
// the card says so.
func TestDashboardPauserPausesByClicking(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	env.createStage(t, ns, "prod", nil)
	d := startDashboard(t, env.cluster.UserConfig(devToken), ns)
	page := newTab(t, newBrowser(t))
	page.open(d.url)
	page.waitBadge(ns, "prod", "Not paused")

	page.do(chromedp.Click(chromedp.CSS(card(ns, "prod") + ` button[data-action="pause"]`)))
	page.waitJS("the pause dialog to open", `document.getElementById("pause-dialog").open`)
	if got := evalJS[string](page, `document.getElementById("pause-reason").value`); got != "Manual" {
		t.Errorf("the dialog's reason is %q, want the default Manual", got)
	}
	page.do(
		chromedp.Clear(chromedp.ID("pause-reason")),
		chromedp.SendKeys(chromedp.ID("pause-reason"), "Incident"),
		chromedp.SendKeys(chromedp.ID("pause-message"), "INC-1 from the page"),
		chromedp.Click(chromedp.CSS(`#pause-dialog button[data-action="confirm-pause"]`)),
	)
	page.waitJS("the dialog to close on the pause", `!document.getElementById("pause-dialog").open`)
	page.waitJS("the notice that it paused", `document.querySelector('#notice[data-kind="done"]')?.textContent.includes("paused (reason Incident)")`)

	p := onePause(t, ns)
	if spec(p, "stage") != "prod" || spec(p, "reason") != "Incident" || spec(p, "message") != "INC-1 from the page" {
		t.Errorf("StagePause spec %v, want prod, Incident and the message typed", p.Object["spec"])
	}
	if by := p.GetAnnotations()[v1alpha1.PausedByAnnotation]; by != "dev" {
		t.Errorf("StagePause %s = %q, want dev", v1alpha1.PausedByAnnotation, by)
	}
	page.waitBadge(ns, "prod", "Paused — Incident")
	pauseSel := field(ns, "prod", "pauses") + ` [data-pause="` + ns + "/" + p.GetName() + `"]`
	page.waitText(pauseSel+" blockquote", "INC-1 from the page")
	page.waitText(pauseSel, "by dev")
	page.screenshot("dashboard-pauser-pauses")
}

// The pauser may not resume: Resume is disabled with the API server's
// reason beside it, and a forced click (the attribute removed, as a person
// with the developer tools could) is refused by the API server itself,
// whose message the page shows as given.
func TestDashboardPauserCannotResume(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	env.createStage(t, ns, "prod", nil)
	must(t, createPause(env.dev, pause(ns, "dev-pause", "prod", "Incident")))
	d := startDashboard(t, env.cluster.UserConfig(devToken), ns)
	page := newTab(t, newBrowser(t))
	page.open(d.url)
	page.waitBadge(ns, "prod", "Paused — Incident")

	resume := card(ns, "prod") + ` button[data-action="resume"]`
	if !evalJS[bool](page, fmt.Sprintf(`document.querySelector(%s).disabled`, js(resume))) {
		t.Errorf("Resume is enabled for a pauser")
	}
	if why := page.text(card(ns, "prod") + ` [data-why="resume"]`); !strings.HasPrefix(why, "Not allowed:") {
		t.Errorf("beside the disabled Resume: %q, want a reason starting Not allowed:", why)
	}

	// What the API server says to dev's own delete, to compare.
	err := deletePause(env.dev, ns, "dev-pause")
	var status apierrors.APIStatus
	if !errors.As(err, &status) || !apierrors.IsForbidden(err) {
		t.Fatalf("dev deleting the pause: %v, want Forbidden", err)
	}
	// The refused POST is a 403, which the browser logs as a failed load.
	page.expect("/api/projects/" + ns + "/resume")
	evalJS[bool](page, fmt.Sprintf(`(() => { const b = document.querySelector(%s); b.disabled = false; b.click(); return true })()`, js(resume)))
	page.waitJS("the refusal", `document.querySelector('#notice[data-kind="refused"]') && !document.getElementById("notice").hidden`)
	notice := page.text("#notice")
	if want := "Refused: " + status.Status().Message; notice != want {
		t.Errorf("notice %q, want %q", notice, want)
	}
	if !strings.Contains(notice, "forbidden") || !strings.Contains(notice, "stagepauses") {
		t.Errorf("notice %q, want the API server's forbidden message about stagepauses", notice)
	}
	if p := onePause(t, ns); p.GetName() != "dev-pause" || p.GetDeletionTimestamp() != nil {
		t.Errorf("after the refused resume: StagePause %s (deleting: %v), want dev-pause, kept", p.GetName(), p.GetDeletionTimestamp())
	}
	page.waitBadge(ns, "prod", "Paused — Incident")
	page.screenshot("dashboard-pauser-cannot-resume")
}

// A resumer resumes from the page; what still holds the Stage, Kargo's own
// auto-promotion hold of a rollback, stays on the card.
func TestDashboardResumerResumesAndHoldsStay(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	prod := env.createStage(t, ns, "prod", nil)
	good, err := promoteFreight(prod)
	must(t, err)
	_, err = promoteFreight(prod)
	must(t, err)
	must(t, createPause(env.dev, pause(ns, "incident", "prod", "Incident")))
	// The on-call rolls back while paused: Kargo holds the Warehouse.
	rollback := rollBack(t, prod, good)

	d := startDashboard(t, env.cluster.UserConfig(resumerToken), ns)
	page := newTab(t, newBrowser(t))
	page.open(d.url)
	page.waitBadge(ns, "prod", "Paused — Incident")
	page.waitText(field(ns, "prod", "holds"), "Warehouse/warehouse: "+good+" promoted by kubernetes:dev")

	page.do(chromedp.Click(chromedp.CSS(card(ns, "prod") + ` button[data-action="resume"]`)))
	page.waitBadge(ns, "prod", "Not paused")
	page.waitJS("the notice that it resumed", `document.querySelector('#notice[data-kind="done"]')?.textContent.includes("Stage prod resumed")`)
	if n := len(env.listPauses(t, ns)); n != 0 {
		t.Errorf("%d StagePauses after the resume, want 0", n)
	}
	if holds := page.text(field(ns, "prod", "holds")); !strings.Contains(holds, "Warehouse/warehouse: "+good) {
		t.Errorf("after the resume the card's holds say %q, want Kargo's hold of %s (promotion %s)", holds, good, rollback)
	}
	if n := evalJS[int](page, fmt.Sprintf(`document.querySelectorAll(%s).length`, js(field(ns, "prod", "pauses")+" [data-pause]"))); n != 0 {
		t.Errorf("the card still shows %d pauses", n)
	}
	page.screenshot("dashboard-resumer-resumes")
}
