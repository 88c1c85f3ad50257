package e2e

import (
	"testing"

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
	page.waitText(field(ns, "prod", "paused"), "▶ Not paused")

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
	page.waitText(field(ns, "prod", "paused"), "⏸ Paused — Incident")
	pauseSel := field(ns, "prod", "pauses") + ` [data-pause="` + ns + "/" + p.GetName() + `"]`
	page.waitText(pauseSel+" blockquote", "INC-1 from the page")
	page.waitText(pauseSel, "by dev")
	page.screenshot("dashboard-pauser-pauses")
}
