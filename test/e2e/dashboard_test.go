package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/test/browser"
)

// A pauser pauses a Stage from the page: Pause, a reason and a message,
// confirm. The StagePause is theirs (paused-by), with what they typed, and
// the card says so.
func TestDashboardPauserPausesByClicking(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	env.createStage(t, ns, "prod", nil)
	page := openDashboard(t, env.cluster.UserConfig(devToken), ns)
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
	// Who paused is the pausing client's claim, and says so.
	page.waitText(pauseSel, "by dev (as the pausing client said)")
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
	page := openDashboard(t, env.cluster.UserConfig(devToken), ns)
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

	page := openDashboard(t, env.cluster.UserConfig(resumerToken), ns)
	page.waitBadge(ns, "prod", "Paused — Incident")
	for _, part := range []string{"Warehouse/warehouse", good[:12], "kubernetes:dev"} {
		page.waitText(field(ns, "prod", "holds"), part)
	}

	page.do(chromedp.Click(chromedp.CSS(card(ns, "prod") + ` button[data-action="resume"]`)))
	page.waitBadge(ns, "prod", "Not paused")
	page.waitJS("the notice that it resumed", `document.querySelector('#notice[data-kind="done"]')?.textContent.includes("Stage prod resumed")`)
	if n := len(env.listPauses(t, ns)); n != 0 {
		t.Errorf("%d StagePauses after the resume, want 0", n)
	}
	if holds := page.text(field(ns, "prod", "holds")); !strings.Contains(holds, "Warehouse/warehouse") || !strings.Contains(holds, good[:12]) {
		t.Errorf("after the resume the card's holds say %q, want Kargo's hold of %s (promotion %s)", holds, good, rollback)
	}
	if n := evalJS[int](page, fmt.Sprintf(`document.querySelectorAll(%s).length`, js(field(ns, "prod", "pauses")+" [data-pause]"))); n != 0 {
		t.Errorf("the card still shows %d pauses", n)
	}
	page.screenshot("dashboard-resumer-resumes")
}

// A failure's pause, made by the operator while the page is open, shows on
// the card within 2 s of the StagePause appearing in the API, without a
// reload.
func TestDashboardShowsAFailurePauseLive(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	startOperator(t, ns, fastSettings())
	prod := env.createStage(t, ns, "prod", map[string]string{api.PauseOnFailureAnnotation: "true", api.DegradedGraceAnnotation: "1s"})
	promoteAndLatch(t, prod)
	page := openDashboard(t, env.cluster.UserConfig(resumerToken), ns)
	page.waitText(field(ns, "prod", "phase"), "Latched")
	page.waitBadge(ns, "prod", "Not paused")

	// The page notes when the card first says Paused; a reload would lose
	// window.__mark.
	if at := evalJS[float64](page, markPaused(field(ns, "prod", "paused"))); at != 0 {
		t.Fatalf("the card says Paused before the failure (at %v)", at)
	}
	appeared := firstPauseAppears(t, ns)
	must(t, prod.SetHealth(ctx, kargo.HealthUnhealthy, `Argo CD Application "app" in namespace "argocd" has health state "Degraded"`))
	var created time.Time
	select {
	case created = <-appeared:
	case <-time.After(time.Minute):
		t.Fatal("no StagePause within a minute of the Stage degrading past its 1s grace")
	}
	page.waitJS("the card to say Paused", `window.__pausedAt > 0`)
	latency := time.UnixMilli(int64(evalJS[float64](page, `window.__pausedAt`))).Sub(created)
	// Negative when the page's watch got the pause before the test's did.
	t.Logf("the failure's pause appeared on the page %v after it appeared in the API", latency)
	if latency >= 2*time.Second {
		t.Errorf("the failure's pause took %v to appear on the page, want < 2s", latency)
	}
	if mark := evalJS[int](page, `window.__mark ?? 0`); mark != 1 {
		t.Errorf("window.__mark = %d after the pause: the page reloaded", mark)
	}
	p := onePause(t, ns)
	page.waitBadge(ns, "prod", "Paused — "+spec(p, "reason"))
	page.waitText(field(ns, "prod", "pauses")+` [data-pause="`+ns+"/"+p.GetName()+`"]`, "made by kargo-latch on the failure")
	page.screenshot("dashboard-failure-pause-live")
}

// The lead pauses a whole project with the big red button, typing the
// project's name, and resumes it.
func TestDashboardProjectPauseAndResume(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	stages := []string{"qa", "prod"}
	env.createStage(t, ns, "qa", nil)
	env.createStage(t, ns, "prod", nil)
	page := openDashboard(t, env.cluster.UserConfig(leadToken), ns)
	head := fmt.Sprintf(`[data-project-head="%s"]`, ns)
	page.do(chromedp.Click(chromedp.CSS(head + ` button.danger.big[data-action="pause-project"]`)))
	page.waitJS("the project dialog to open", `document.getElementById("project-dialog").open`)

	confirm := `#project-dialog button[data-action="confirm-pause-project"]`
	confirmDisabled := fmt.Sprintf(`document.querySelector(%s).disabled`, js(confirm))
	page.do(chromedp.SendKeys(chromedp.ID("project-confirm"), ns[:len(ns)-1]))
	if !evalJS[bool](page, confirmDisabled) {
		t.Errorf("the confirm button is enabled with %q typed, not the project's name", ns[:len(ns)-1])
	}
	page.do(chromedp.SendKeys(chromedp.ID("project-confirm"), ns[len(ns)-1:]))
	page.waitJS("the confirm button to enable on the project's name", "!"+confirmDisabled)
	page.do(
		chromedp.SendKeys(chromedp.ID("project-message"), "Freeze for the release"),
		chromedp.Click(chromedp.CSS(confirm)),
	)
	page.waitJS("the project's banner", fmt.Sprintf(`document.querySelector('[data-project-pause="%s"]')`, ns))
	for _, s := range stages {
		page.waitBadge(ns, s, "Paused — ProjectPause")
	}
	p := onePause(t, ns)
	if spec(p, "stage") != v1alpha1.AllStages || spec(p, "message") != "Freeze for the release" || p.GetAnnotations()[v1alpha1.PausedByAnnotation] != "lead" {
		t.Errorf("StagePause spec %v, annotations %v; want the whole project, the message, by lead", p.Object["spec"], p.GetAnnotations())
	}
	page.screenshot("dashboard-project-paused")

	page.do(chromedp.Click(chromedp.CSS(head + ` button[data-action="resume-project"]`)))
	page.waitJS("the banner to go", fmt.Sprintf(`!document.querySelector('[data-project-pause="%s"]')`, ns))
	for _, s := range stages {
		page.waitBadge(ns, s, "Not paused")
	}
	if n := len(env.listPauses(t, ns)); n != 0 {
		t.Errorf("%d StagePauses after resuming the project, want 0", n)
	}
	page.screenshot("dashboard-project-resumed")
}

// Keyboard only: Tab to the Stage's Pause, Enter, type, Enter.
func TestDashboardKeyboardOnly(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	env.createStage(t, ns, "prod", nil)
	page := openDashboard(t, env.cluster.UserConfig(devToken), ns)
	page.waitBadge(ns, "prod", "Not paused")

	pauseButton := card(ns, "prod") + ` button[data-action="pause"]`
	presses := 0
	for !page.focused(pauseButton) {
		if presses++; presses > 30 {
			t.Fatalf("30 Tab presses never reached the Stage's Pause; the focus is on %s", evalJS[string](page, `document.activeElement?.outerHTML ?? ""`))
		}
		page.do(chromedp.KeyEvent(kb.Tab))
	}
	t.Logf("%d Tab presses to the Stage's Pause", presses)
	page.do(chromedp.KeyEvent(kb.Enter))
	page.waitJS("the pause dialog to open", `document.getElementById("pause-dialog").open`)
	if !page.focused("#pause-reason") {
		t.Fatalf("the dialog opened with the focus on %s, want the reason", evalJS[string](page, `document.activeElement?.outerHTML ?? ""`))
	}
	page.do(chromedp.KeyEvent("Incident"), chromedp.KeyEvent(kb.Tab)) // Incident over the selected default
	if !page.focused("#pause-message") {
		t.Fatal("Tab from the reason did not reach the message")
	}
	page.do(chromedp.KeyEvent("INC-7 by keyboard"))
	page.do(chromedp.KeyEvent(kb.Tab, chromedp.KeyModifiers(chromedp.ModifierShift)))
	if got := evalJS[string](page, `document.activeElement.value`); !page.focused("#pause-reason") || got != "Incident" {
		t.Fatalf("back on the reason: focus there %v, value %q; want Incident", page.focused("#pause-reason"), got)
	}
	page.do(chromedp.KeyEvent(kb.Enter))
	page.waitJS("the dialog to close on the pause", `!document.getElementById("pause-dialog").open`)
	page.waitBadge(ns, "prod", "Paused — Incident")
	p := onePause(t, ns)
	if spec(p, "reason") != "Incident" || spec(p, "message") != "INC-7 by keyboard" {
		t.Errorf("StagePause spec %v, want what was typed", p.Object["spec"])
	}
	page.screenshot("dashboard-keyboard")

	// The keyboard goes on from the Stage's card, whose Pause became a
	// Resume: not from <body>, where the focus falls if the card is redrawn
	// after the dialog gave the focus back to the Pause button.
	if !evalJS[bool](page, fmt.Sprintf(`document.querySelector(%s)?.contains(document.activeElement) ?? false`, js(card(ns, "prod")))) {
		t.Errorf("after the pause the focus is on %s, want the Stage's card", evalJS[string](page, `document.activeElement?.outerHTML ?? ""`))
	}
}

// On a phone: the page and the Stage's page, with its Events and timeline,
// fit the screen.
func TestDashboardOnAPhone(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	startOperator(t, ns, fastSettings())
	prod := env.createStage(t, ns, "prod", nil)
	env.createStage(t, ns, "qa", nil)
	promoteAndLatch(t, prod)
	waitEvent(t, prod, api.ReasonHealthLatched)
	must(t, createPause(env.dev, pause(ns, "incident", "prod", "Incident")))
	// The resumer role reads Stages, not Events: the viewer role does.
	bindInProject(t, ns, "resumer", "kargo-latch-viewer")
	resumer := env.cluster.UserConfig(resumerToken)
	waitMay(t, resumer, ns, "the viewer RoleBinding", access{"list", "", "events"})
	d := startDashboard(t, resumer, ns)
	page := sharedBrowser(t).newTab(t)
	page.do(browser.Phone())
	page.open(d.url)
	page.waitBadge(ns, "prod", "Paused — Incident")
	if wide := page.tooWide(); wide != "" {
		t.Errorf("the page does not fit a phone: %s", wide)
	}
	page.screenshot("dashboard-phone")

	page.open(d.url + "projects/" + ns + "/stages/prod")
	page.waitJS("the Stage's Events", `document.querySelectorAll("#events table tbody tr").length > 0`)
	if events := page.text("#events"); !strings.Contains(events, api.ReasonHealthLatched) {
		t.Errorf("the Stage's Events %q lack %s", events, api.ReasonHealthLatched)
	}
	page.waitJS("the timeline", `document.querySelectorAll(".timeline li:not(.empty)").length > 0`)
	if timeline := page.text(".timeline"); !strings.Contains(timeline, "Latched") || !strings.Contains(timeline, "Paused: Incident") {
		t.Errorf("the timeline %q, want the latch and the pause", timeline)
	}
	page.screenshot("dashboard-phone-stage")
	if wide := page.tooWide(); wide != "" { // a promotion's name in an Event's message is one long word
		t.Errorf("the Stage's page does not fit a phone: %s", wide)
	}
}

// firstPauseAppears watches the project's StagePauses and sends when the
// first one appears in the API.
func firstPauseAppears(t *testing.T, ns string) <-chan time.Time {
	t.Helper()
	wctx, cancel := context.WithCancel(ctx)
	w, err := env.dyn.Resource(v1alpha1.StagePausesResource).Namespace(ns).Watch(wctx, metav1.ListOptions{})
	must(t, err)
	appeared := make(chan time.Time, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.ResultChan() {
			if e.Type == watch.Added {
				appeared <- time.Now()
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return appeared
}

// sayEvent records a Normal Event on a Stage, as a controller would.
func sayEvent(t *testing.T, ns, stage, reason, message string) {
	t.Helper()
	now := metav1.Now()
	_, err := env.kube.CoreV1().Events(ns).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: stage + "-"},
		InvolvedObject: corev1.ObjectReference{APIVersion: kargo.GroupVersion.String(), Kind: "Stage", Namespace: ns, Name: stage},
		Type:           corev1.EventTypeNormal, Reason: reason, Message: message, Count: 1,
		FirstTimestamp: now, LastTimestamp: now, Source: corev1.EventSource{Component: "e2e"},
	}, metav1.CreateOptions{})
	must(t, err)
}
