package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/cli/dashboard"
)

// An on-call person bound in one project only, as people are: the shipped
// kargo-latch-pauser and kargo-latch-viewer roles by RoleBindings in the
// project's namespace. They run the dashboard without -n, their
// kubeconfig's namespace the project: the page may list neither every Stage
// nor Kargo's projects, so it shows that namespace and says so. They see
// the Stages, pause one, may not resume it, and read its Events.
func TestDashboardAsAProjectPauser(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	env.createStage(t, ns, "prod", nil)
	env.createStage(t, ns, "qa", nil)
	oncall := env.cluster.UserConfig(oncallToken)
	bindInProject(t, ns, "oncall", "kargo-latch-pauser")
	bindInProject(t, ns, "oncall", "kargo-latch-viewer")
	waitMay(t, oncall, ns, "the pauser and viewer RoleBindings", access{"create", v1alpha1.GroupVersion.Group, "stagepauses"}, access{"list", kargoGroup, "stages"})

	// What the two roles grant, and only that, as the API server says.
	for _, c := range []struct {
		access
		want bool
	}{
		{access{"create", v1alpha1.GroupVersion.Group, "stagepauses"}, true},
		{access{"delete", v1alpha1.GroupVersion.Group, "stagepauses"}, false},
		{access{"update", kargoGroup, "stages"}, false},
		{access{"patch", kargoGroup, "stages"}, false},
		{access{"create", kargoGroup, "promotions"}, false},
		{access{"list", "", "events"}, true},
	} {
		if got := may(t, oncall, ns, c.access); got != c.want {
			t.Errorf("oncall may %s %s.%s in the project: %v, want %v", c.verb, c.resource, c.group, got, c.want)
		}
	}
	// Bound in the project only: the page must fall back to the
	// kubeconfig's namespace.
	if may(t, oncall, "", access{"list", kargoGroup, "stages"}) || may(t, oncall, "", access{"list", kargoGroup, "projects"}) {
		t.Fatal("oncall may list every Stage or Kargo's projects: bound beyond the project")
	}
	sayEvent(t, ns, "prod", "OnCallDrill", "An Event for the Stage's page to show")

	d := startDashboardIn(t, oncall, ns)
	page := sharedBrowser(t).newTab(t)
	page.open(d.url)
	page.waitJS("the notice that the page shows the kubeconfig's namespace",
		fmt.Sprintf(`(() => { const n = document.querySelector('#problems'); return n && !n.hidden && n.textContent.includes(%s) })()`, js(ns)))
	t.Logf("the notice: %s", page.text("#notice"))
	page.waitBadge(ns, "prod", "Not paused")
	page.waitBadge(ns, "qa", "Not paused")

	page.do(chromedp.Click(chromedp.CSS(card(ns, "prod") + ` button[data-action="pause"]`)))
	page.waitJS("the pause dialog to open", `document.getElementById("pause-dialog").open`)
	page.do(
		chromedp.SendKeys(chromedp.ID("pause-message"), "paged at 3am"),
		chromedp.Click(chromedp.CSS(`#pause-dialog button[data-action="confirm-pause"]`)),
	)
	page.waitJS("the dialog to close on the pause", `!document.getElementById("pause-dialog").open`)
	page.waitBadge(ns, "prod", "Paused — Manual")
	page.waitBadge(ns, "qa", "Not paused")
	p := onePause(t, ns)
	if spec(p, "stage") != "prod" || p.GetAnnotations()[v1alpha1.PausedByAnnotation] != "oncall" {
		t.Errorf("StagePause spec %v, annotations %v; want prod, by oncall", p.Object["spec"], p.GetAnnotations())
	}
	resume := card(ns, "prod") + ` button[data-action="resume"]`
	page.waitJS("the card's Resume", fmt.Sprintf(`document.querySelector(%s)`, js(resume)))
	if !evalJS[bool](page, fmt.Sprintf(`document.querySelector(%s).disabled`, js(resume))) {
		t.Errorf("Resume is enabled for a pauser")
	}
	if why := page.text(card(ns, "prod") + ` [data-why="resume"]`); !strings.HasPrefix(why, "Not allowed:") {
		t.Errorf("beside the disabled Resume: %q, want a reason starting Not allowed:", why)
	}
	page.screenshot("dashboard-project-pauser")

	page.open(d.url + "projects/" + ns + "/stages/prod")
	page.waitJS("the Stage's Events", `document.querySelectorAll("#events table tbody tr").length > 0`)
	if events := page.text("#events"); !strings.Contains(events, "OnCallDrill") {
		t.Errorf("the Stage's Events %q lack OnCallDrill", events)
	}
}

// Seven tabs of one dashboard in one browser, more than the six HTTP/1.1
// connections Chrome opens to one host: the tabs share one live feed, so
// the seventh still loads, goes live and pauses, and every tab shows it.
// (With a feed per tab, the seventh tab never loads.)
func TestDashboardManyTabs(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	env.createStage(t, ns, "prod", nil)
	d := startDashboard(t, env.cluster.UserConfig(devToken), ns)
	chrome := sharedBrowser(t)
	tabs := make([]*tab, 7)
	for i := range tabs {
		tabs[i] = chrome.newTab(t)
		tabs[i].open(d.url)
		tabs[i].waitBadge(ns, "prod", "Not paused")
	}
	last := tabs[len(tabs)-1]
	start := time.Now()
	last.do(chromedp.Click(chromedp.CSS(card(ns, "prod") + ` button[data-action="pause"]`)))
	last.waitJS("the pause dialog to open", `document.getElementById("pause-dialog").open`)
	last.do(
		chromedp.Clear(chromedp.ID("pause-reason")),
		chromedp.SendKeys(chromedp.ID("pause-reason"), "Incident"),
		chromedp.Click(chromedp.CSS(`#pause-dialog button[data-action="confirm-pause"]`)),
	)
	last.waitJS("the dialog to close on the pause", `!document.getElementById("pause-dialog").open`)
	for _, b := range tabs {
		b.waitBadge(ns, "prod", "Paused — Incident")
	}
	t.Logf("paused from the 7th tab and shown in all 7 within %v", time.Since(start).Round(time.Millisecond))
	if p := onePause(t, ns); spec(p, "stage") != "prod" || spec(p, "reason") != "Incident" {
		t.Errorf("StagePause spec %v, want prod, Incident", p.Object["spec"])
	}
	last.screenshot("dashboard-seventh-tab")
}

// The page says when it can no longer read what it shows: the viewer
// RoleBinding taken while the page is open, the page says within 20s (it
// asks every 15s) that Stages cannot be read rather than show what it read
// last as live, and stops saying it once the binding is back.
func TestDashboardSaysWhenItCannotRead(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	env.createStage(t, ns, "prod", nil)
	oncall := env.cluster.UserConfig(oncallToken)
	bindInProject(t, ns, "oncall", "kargo-latch-pauser")
	viewer := bindInProject(t, ns, "oncall", "kargo-latch-viewer")
	waitMay(t, oncall, ns, "the pauser and viewer RoleBindings", access{"create", v1alpha1.GroupVersion.Group, "stagepauses"}, access{"list", kargoGroup, "stages"})

	page := openDashboard(t, oncall, ns)
	page.waitBadge(ns, "prod", "Not paused")
	if got := evalJS[string](page, problemsShown); got != "" {
		t.Fatalf("a problem shown before any right was taken: %q", got)
	}

	must(t, env.kube.RbacV1().RoleBindings(ns).Delete(ctx, viewer, metav1.DeleteOptions{}))
	taken := time.Now()
	// The page asks the rights again every 15s (an open watch outlives the
	// binding: the API server checks a request's rights when it starts),
	// and a restarted watch is refused: either says so.
	refused := regexp.MustCompile(`(?i)(forbidden|refus|may not list)[^\n]*stages|stages[^\n]*(forbidden|refus)`)
	err := poller{limit: 20 * time.Second, every: 100 * time.Millisecond}.wait("the page to say the API server refuses its reads of Stages", func() (bool, error) {
		got, err := tryJS[string](page, problemsShown)
		return refused.MatchString(got), err
	})
	if err != nil {
		t.Fatalf("%v\nthe page shows: %s\n#conn: %s", err, evalJS[string](page, `document.body.innerText`), page.text("#conn"))
	}
	t.Logf("the page said it cannot read %v after the viewer RoleBinding went: %s", time.Since(taken).Round(time.Millisecond), evalJS[string](page, problemsShown))
	// Said where a person looks for the project, as an alert, and that
	// what the page shows may be old: #conn's "Live" is about the page's
	// feed from its own process only.
	head := fmt.Sprintf(`[data-project-head="%s"] .problem[role="alert"]`, ns)
	if said := page.text(head); !refused.MatchString(said) || !strings.Contains(said, "may be old") {
		t.Errorf("the project's head says %q, want an alert that Stages cannot be read and what is shown may be old", said)
	}
	t.Logf("#conn meanwhile: %q", page.text("#conn"))
	page.screenshot("dashboard-cannot-read")

	// The right given back, the page says no more of it.
	bindInProject(t, ns, "oncall", "kargo-latch-viewer")
	given := time.Now()
	err = poller{limit: 20 * time.Second, every: 100 * time.Millisecond}.wait("the page to stop saying it cannot read Stages", func() (bool, error) {
		got, err := tryJS[string](page, problemsShown)
		return got == "", err
	})
	if err != nil {
		t.Fatalf("%v\nthe page says: %s", err, evalJS[string](page, problemsShown))
	}
	t.Logf("the problem went %v after the RoleBinding came back", time.Since(given).Round(time.Millisecond))
	page.waitBadge(ns, "prod", "Not paused")
}

// The page answers only to its own Host, and changes nothing for a request
// from another origin or without its token.
func TestDashboardGuards(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	env.createStage(t, ns, "prod", nil)
	d := startDashboard(t, env.cluster.UserConfig(devToken), ns)
	token := d.token(t)
	// Another site on loopback, open in the same browser as the page.
	evil := httptest.NewServer(evilSite(d.url + "api/projects/" + ns + "/pause"))
	t.Cleanup(evil.Close)

	body := `{"stage":"prod","reason":"Incident","message":"from elsewhere"}`
	for _, c := range []struct {
		what    string
		host    string
		headers map[string]string
		want    int
	}{
		{"another Host (DNS rebinding)", "evil.example:" + d.port, map[string]string{dashboard.TokenHeader: token}, http.StatusMisdirectedRequest},
		{"another Origin, with the token", "", map[string]string{dashboard.TokenHeader: token, "Origin": "http://evil.example"}, http.StatusForbidden},
		{"no token", "", nil, http.StatusForbidden},
		{"cross-site, with the token", "", map[string]string{dashboard.TokenHeader: token, "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		// What the browser sends for the other site's fetch below.
		{"the other site's no-cors fetch", "", map[string]string{"Origin": evil.URL, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}, http.StatusForbidden},
	} {
		if got := postAction(t, d.url+"api/projects/"+ns+"/pause", c.host, c.headers, body); got != c.want {
			t.Errorf("%s: %d, want %d", c.what, got, c.want)
		}
	}
	if n := len(env.listPauses(t, ns)); n != 0 {
		t.Fatalf("%d StagePauses after the refused requests, want 0", n)
	}
	// Another origin may not make the process read the cluster either: not
	// the live feed, not a Stage's Events. The page itself, its token
	// inside, is a plain GET any client may make (d.token does).
	for _, path := range []string{"api/live", "api/projects/" + ns + "/stages/prod/events"} {
		for _, h := range []map[string]string{{"Origin": evil.URL}, {"Sec-Fetch-Site": "cross-site"}} {
			req, err := http.NewRequest(http.MethodGet, d.url+path, nil)
			must(t, err)
			for k, v := range h {
				req.Header.Set(k, v)
			}
			res, err := http.DefaultClient.Do(req)
			must(t, err)
			_ = res.Body.Close()
			if res.StatusCode != http.StatusForbidden {
				t.Errorf("GET /%s with %v: %s, want 403", path, h, res.Status)
			}
		}
	}

	// In the browser: the page is open, and another site posts to it, as a
	// page may without CORS (no-cors, no header of its own, text/plain).
	// The browser hides the answer from that site, so this check rests on
	// the requests above: they carried what the browser sends for this one
	// (the other site's Origin, Sec-Fetch-Site cross-site, no token; the
	// guard reads no body) and were answered 403, so the server refuses it
	// on the same grounds. The answer says Cross-Origin-Resource-Policy:
	// same-origin, so the browser does not even hand the other site an
	// opaque answer: its fetch fails, and the browser's own log says the
	// answer came and was blocked.
	req, err := http.NewRequest(http.MethodPost, d.url+"api/projects/"+ns+"/pause", strings.NewReader(body))
	must(t, err)
	req.Header.Set("Origin", evil.URL)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	res, err := http.DefaultClient.Do(req)
	must(t, err)
	_ = res.Body.Close()
	if corp := res.Header.Get("Cross-Origin-Resource-Policy"); res.StatusCode != http.StatusForbidden || corp != "same-origin" {
		t.Errorf("the other site's request: %s, Cross-Origin-Resource-Policy %q; want 403, same-origin", res.Status, corp)
	}
	chrome := sharedBrowser(t)
	page := chrome.newTab(t)
	page.open(d.url)
	page.waitBadge(ns, "prod", "Not paused")
	other := chrome.openTab(t)
	other.do(chromedp.Navigate(evil.URL))
	other.waitJS("the other site's fetch to end", `document.body.dataset.outcome`)
	if outcome := evalJS[string](other, `document.body.dataset.outcome`); !strings.HasPrefix(outcome, "error: TypeError") {
		t.Errorf("the other site's fetch: %s, want it failed (the answer blocked); its console: %q", outcome, other.console.Errors())
	}
	must(t, poll("the browser to log that it blocked the answer to the other site", func() (bool, error) {
		return slices.ContainsFunc(other.console.Errors(), func(e string) bool {
			return strings.Contains(e, "ERR_BLOCKED_BY_RESPONSE.NotSameOrigin") && strings.Contains(e, "/api/projects/"+ns+"/pause")
		}), nil
	}))
	if n := len(env.listPauses(t, ns)); n != 0 {
		t.Errorf("%d StagePauses after the other site's fetch, want 0", n)
	}

	// The same request as the page's own: it pauses, so the refusals above
	// were the guards'.
	if got := postAction(t, d.url+"api/projects/"+ns+"/pause", "", map[string]string{dashboard.TokenHeader: token, "Origin": strings.TrimSuffix(d.url, "/")}, body); got != http.StatusOK {
		t.Fatalf("the page's own request: %d, want 200", got)
	}
	page.waitBadge(ns, "prod", "Paused — Incident")
	page.screenshot("dashboard-guards")
}

// problemsShown is the text of every problem the page shows now: the
// notice when it is one, and the projects' problems.
const problemsShown = `[...document.querySelectorAll('#problems:not([hidden]), .problem')].map((e) => e.textContent.trim()).join("\n")`

// bindInProject binds user to the ClusterRole role in ns only, and returns
// the RoleBinding's name.
func bindInProject(t *testing.T, ns, user, role string) string {
	t.Helper()
	name := user + "-" + role
	_, err := env.kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
	}, metav1.CreateOptions{})
	must(t, err)
	return name
}

// access is a verb on a resource of an API group.
type access struct{ verb, group, resource string }

// may asks the API server, as cfg's user, whether they may do a in ns (""
// for every namespace).
func may(t *testing.T, cfg *rest.Config, ns string, a access) bool {
	t.Helper()
	r, err := kubernetes.NewForConfigOrDie(cfg).AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: a.verb, Group: a.group, Resource: a.resource,
		}},
	}, metav1.CreateOptions{})
	must(t, err)
	return r.Status.Allowed
}

// waitMay waits until the API server's RBAC grants cfg's user every one of
// want in ns: bindings take effect once its caches have them.
func waitMay(t *testing.T, cfg *rest.Config, ns, what string, want ...access) {
	t.Helper()
	must(t, poll(what+" to take effect", func() (bool, error) {
		for _, a := range want {
			if !may(t, cfg, ns, a) {
				return false, nil
			}
		}
		return true, nil
	}))
}

// postAction posts a pause or resume body to the dashboard with the
// headers given, to host (the URL's when ""), and returns the status.
func postAction(t *testing.T, url, host string, headers map[string]string, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	must(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	if host != "" {
		req.Host = host
	}
	res, err := http.DefaultClient.Do(req)
	must(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res.StatusCode
}

// evilSite is another site on loopback whose page, once loaded, posts a
// pause to the dashboard's action as a page may without CORS (no-cors, no
// custom header), and says how its fetch ended in body[data-outcome].
func evilSite(action string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><html><head><title>elsewhere</title><script src="/evil.js" defer></script></head><body>A page elsewhere.</body></html>`)
	})
	mux.HandleFunc("GET /evil.js", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprintf(w, `fetch(%s, {method: 'POST', mode: 'no-cors', body: '{"stage":"prod","reason":"Incident"}'})
  .then((r) => { document.body.dataset.outcome = r.type; }, (e) => { document.body.dataset.outcome = 'error: ' + e; });`, js(action))
	})
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	return mux
}
