package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// The flapping of the first story: the pattern measured with Kargo's real
// controller (each App Healthy 3 s of every 7 s, never together), played
// 2.5 times faster so that it fits on a screen.
const (
	flapTick   = 400 * time.Millisecond
	flapPeriod = 7  // ticks
	flapTicks  = 12 // ticks played: the latch comes in tick 4, then more flapping
)

// outOfPhaseApps are the Argo CD Applications of Stage test.
var outOfPhaseApps = []string{"test-a", "test-b"}

// The Stages of the first story: uat requests Freight from test.
const (
	upstream   = "test"
	downstream = "uat"
)

// appHealthAt is the Argo CD health of App i in a tick: both roll out in
// tick 0, then test-a is Healthy in ticks 1-3 of every 7 and test-b in
// ticks 4-6. They are never Healthy together, so Kargo's Stage health,
// where the worst App wins, is Progressing throughout.
func appHealthAt(i, tick int) string {
	if p := tick % flapPeriod; p >= 1+3*i && p <= 3+3*i {
		return kargo.HealthHealthy
	}
	return kargo.HealthProgressing
}

// playOutOfPhaseApps is the first story, the problem kargo-latch exists for
// (akuity/kargo#2847): a Stage whose Apps autoscale out of phase is never
// Healthy as a whole, so Kargo never marks its Freight verified and no
// downstream Stage receives it. kargo-latch latches per App and marks the
// Freight verified, and the Freight flows on.
func (d *demo) playOutOfPhaseApps(ctx context.Context, k *driver.Kargo) error {
	test, err := k.CreateStage(ctx, project, upstream, map[string]string{api.MarkVerifiedAnnotation: "true"}, driver.WithApps(outOfPhaseApps...))
	if err != nil {
		return err
	}
	if err := d.createDownstream(ctx, k); err != nil {
		return err
	}
	say(`Created Stage test (kargo-latch.io/mark-verified: "true") and Stage uat, which requests Freight from test (sources.stages: [test])`)
	if err := d.waitFor(ctx, "the operator to see the Stages", func() bool { return d.phase(ctx, test) == latch.PhaseIdle }); err != nil {
		return err
	}
	say("  %s leads; the other replica stands by with warm caches", d.leader().name)

	say("")
	say("1. Kargo promotes new Freight to test; its two Argo CD Apps autoscale out of phase")
	say("   (akuity/kargo#2847: a Stage whose Apps are never Healthy together never lets its Freight flow on)")
	if _, err := test.StartPromotion(ctx); err != nil {
		return err
	}
	if _, err := test.FinishPromotion(ctx, "Succeeded"); err != nil {
		return err
	}
	freight, err := test.CurrentFreight(ctx)
	if err != nil {
		return err
	}
	if err := d.waitFor(ctx, "Promoted", func() bool { return d.phase(ctx, test) == latch.PhasePromoted }); err != nil {
		return err
	}
	_, why, err := d.availableToDownstream(ctx, freight)
	if err != nil {
		return err
	}
	say("   Freight %s is in test; uat may not have it yet: %s", short(freight), why)
	say("   Each App is Healthy 3 of every 7 ticks of 0.4 s, never together (the pattern measured with Kargo, 2.5x faster):")

	t, err := d.flap(ctx, k, test)
	if err != nil {
		return err
	}
	say("   Kargo's Stage health was Progressing in %d of %d samples. Kargo marks Freight verified only in a pass", flapTicks, flapTicks)
	say("   that sees the Stage Healthy, so on its own it would never let %s out of test.", short(freight))

	say("")
	say("   What kargo-latch recorded (annotation kargo-latch.io/state on Stage test):")
	rec, _ := d.record(ctx, test)
	say("     phase %s, latchedBy %s, latchedAt %s", rec.Phase, rec.LatchedBy, t.at(*rec.LatchedAt))
	for _, app := range slices.Sorted(maps.Keys(rec.AppsHealthy)) {
		say("     appsHealthy[%s]: %s", app, t.at(rec.AppsHealthy[app]))
	}
	say("     marked: %s", strings.Join(shortAll(rec.Marked), ", "))

	f, err := k.Freight(ctx, project, freight)
	if err != nil {
		return err
	}
	verifiedIn, _, _ := unstructured.NestedMap(f.Object, "status", "verifiedIn")
	verifiedAt, _, _ := unstructured.NestedString(verifiedIn, upstream, "verifiedAt")
	b, _ := json.Marshal(verifiedIn)
	say("   The Freight, read back from the API server (kubectl get freight -n %s %s -o jsonpath='{.status.verifiedIn}'):", project, freight)
	say("     %s", b)
	say("     verifiedAt %s is latchedAt to the second, as Kargo writes it", verifiedAt)
	if err := d.waitForEvents(ctx, upstream, api.ReasonHealthLatched, api.ReasonFreightVerified); err != nil {
		return err
	}
	d.showEvents(ctx, upstream)
	d.showMetrics("kargo_latch_freight_verified_total")

	available, why, err := d.availableToDownstream(ctx, freight)
	if err != nil {
		return err
	}
	if !available {
		return fmt.Errorf("freight %s is still not available to uat: %s", freight, why)
	}
	say("   uat requests Freight from test, and Kargo offers a Stage the Freight verified in its upstream Stage")
	say("   (plus any soak time): %s, so uat would now receive %s. With Kargo's real controller,", why, short(freight))
	say("   the downstream Stage auto-promoted 3.2 s after such a write.")
	say("   After the latch the Apps' health changed %d more times. kargo-latch keeps per-App health only while a cycle", t.flapsAfterLatch)
	say("   waits for its latch, so these flaps did not even wake it (%d Stage syncs), and it wrote nothing:", t.syncsAfterLatch)
	say("   record unchanged: %t, Freight unchanged: %t, FreightVerified Events: %d",
		d.recordUnchanged(ctx, test, t.latchedRecord), d.freightUnchanged(ctx, k, freight, t.markedFreightRV), d.countEvents(ctx, upstream, api.ReasonFreightVerified))
	d.showStatus()
	return nil
}

// timeline is what flap saw, for the lines that follow it.
type timeline struct {
	start           time.Time
	latchedRecord   string // the record annotation as stored at the latch
	markedFreightRV string // the Freight's resourceVersion just after the mark
	flapsAfterLatch int    // changes of the Apps' health after the latch
	syncsAfterLatch int
}

// at shows a moment of the timeline as a clock time and its offset.
func (t timeline) at(when time.Time) string {
	return fmt.Sprintf("%s (t+%.1fs)", when.Local().Format("15:04:05.000"), when.Sub(t.start).Seconds())
}

// flap plays the out-of-phase Apps tick by tick and prints a line per tick:
// each App's health, Kargo's Stage health, and what kargo-latch made of it.
func (d *demo) flap(ctx context.Context, k *driver.Kargo, test *driver.Stage) (timeline, error) {
	say("     %-6s  %-12s  %-12s  %-18s  %s", "", outOfPhaseApps[0], outOfPhaseApps[1], "Stage test (Kargo)", "kargo-latch")
	t := timeline{start: time.Now()}
	syncsAtLatch, previous := 0.0, ""
	for tick := range flapTicks {
		if err := sleepUntil(ctx, t.start.Add(time.Duration(tick)*flapTick)); err != nil {
			return t, err
		}
		written := time.Since(t.start)
		apps := make([]driver.App, len(outOfPhaseApps))
		for i, name := range outOfPhaseApps {
			apps[i] = driver.App{Name: name, Health: appHealthAt(i, tick)}
		}
		if err := test.SetAppsHealth(ctx, kargo.HealthProgressing, apps...); err != nil {
			return t, err
		}
		if state := fmt.Sprint(apps); state != previous {
			previous = state
			if t.latchedRecord != "" {
				t.flapsAfterLatch++
			}
		}
		// An App Healthy for the first time in the cycle changes the
		// record: wait until kargo-latch has stored it, so that the line
		// shows what it did with this very tick.
		for _, a := range apps {
			if a.Health != kargo.HealthHealthy {
				continue
			}
			if err := d.waitFor(ctx, a.Name+" seen Healthy", func() bool {
				rec, _ := d.record(ctx, test)
				_, seen := rec.AppsHealthy["argocd/"+a.Name]
				return seen
			}); err != nil {
				return t, err
			}
		}
		rec, raw := d.record(ctx, test)
		var did string
		switch {
		case rec.Phase == latch.PhaseLatched && t.latchedRecord == "":
			t.latchedRecord, syncsAtLatch = raw, d.syncs()
			f, err := k.Freight(ctx, project, rec.Freight)
			if err != nil {
				return t, err
			}
			t.markedFreightRV = f.GetResourceVersion()
			did = fmt.Sprintf("Latched by %s: every App has been Healthy", rec.LatchedBy)
			if len(rec.Marked) > 0 {
				did += fmt.Sprintf("; Freight %s marked verified in test", strings.Join(shortAll(rec.Marked), ", "))
			}
		case rec.Phase == latch.PhaseLatched && raw == t.latchedRecord:
			did = "Latched; nothing written"
		case rec.Phase == latch.PhaseLatched:
			did = "Latched; the record changed"
		case len(rec.AppsHealthy) == 0:
			did = fmt.Sprintf("%s; no App seen Healthy yet", rec.Phase)
		default:
			did = fmt.Sprintf("%s; Apps seen Healthy in this cycle: %d/%d %s", rec.Phase, len(rec.AppsHealthy), len(apps), appNames(rec.AppsHealthy))
		}
		say("     t+%.1fs  %-12s  %-12s  %-18s  %s", written.Seconds(), apps[0].Health, apps[1].Health, kargo.HealthProgressing, did)
	}
	if t.latchedRecord == "" {
		return t, fmt.Errorf("kargo-latch did not latch Stage test in %d ticks", flapTicks)
	}
	// The last tick lasts as long as the others. Nothing is awaited here:
	// after the latch there is, by design, nothing to see.
	if err := sleepUntil(ctx, t.start.Add(flapTicks*flapTick)); err != nil {
		return t, err
	}
	t.syncsAfterLatch = int(d.syncs() - syncsAtLatch)
	return t, nil
}

// sleepUntil waits for the clock to reach when: the flapping's own pace.
func sleepUntil(ctx context.Context, when time.Time) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(when)):
		return nil
	}
}

// createDownstream creates Stage uat, which requests the Warehouse's
// Freight from Stage test instead of directly, and gives it the status of a
// Stage Kargo has reconciled but never promoted to.
func (d *demo) createDownstream(ctx context.Context, k *driver.Kargo) error {
	name := downstream
	if _, err := k.CreateStage(ctx, project, name, nil); err != nil {
		return err
	}
	stages := d.admin.Resource(kargo.StagesResource).Namespace(project)
	spec, _ := json.Marshal(map[string]any{"spec": map[string]any{"requestedFreight": []any{map[string]any{
		"origin":  map[string]any{"kind": "Warehouse", "name": "warehouse"},
		"sources": map[string]any{"stages": []any{upstream}},
	}}}})
	if _, err := stages.Patch(ctx, name, types.MergePatchType, spec, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("making Stage %s request Freight from %s: %w", name, upstream, err)
	}
	status, _ := json.Marshal(map[string]any{"status": map[string]any{"observedGeneration": 2}})
	if _, err := stages.Patch(ctx, name, types.MergePatchType, status, metav1.PatchOptions{FieldManager: driver.FieldManager}, "status"); err != nil {
		return fmt.Errorf("writing the status of Stage %s: %w", name, err)
	}
	return nil
}

// availableToDownstream applies Kargo's availability rule
// (pkg/api/stage.go; the facts document §7.7) to one Freight and Stage uat:
// the Freight is offered to the Stage when it is approved for it, or comes
// from a Warehouse the Stage requests directly, or is verified in the
// upstream Stages it is requested from: in one of them, or in all with
// availabilityStrategy All. Soak time is left out: uat asks for none.
func (d *demo) availableToDownstream(ctx context.Context, freight string) (bool, string, error) {
	stage := downstream
	s, err := d.admin.Resource(kargo.StagesResource).Namespace(project).Get(ctx, stage, metav1.GetOptions{})
	if err != nil {
		return false, "", err
	}
	f, err := driver.New(d.admin).Freight(ctx, project, freight)
	if err != nil {
		return false, "", err
	}
	if _, approved, _ := unstructured.NestedMap(f.Object, "status", "approvedFor", stage); approved {
		return true, "approved for " + stage, nil
	}
	origin, _, _ := unstructured.NestedString(f.Object, "origin", "name")
	verifiedIn, _, _ := unstructured.NestedMap(f.Object, "status", "verifiedIn")
	requests, _, _ := unstructured.NestedSlice(s.Object, "spec", "requestedFreight")
	for _, r := range requests {
		request, _ := r.(map[string]any)
		if name, _, _ := unstructured.NestedString(request, "origin", "name"); name != origin {
			continue
		}
		if direct, _, _ := unstructured.NestedBool(request, "sources", "direct"); direct {
			return true, "requested directly from Warehouse " + origin, nil
		}
		upstream, _, _ := unstructured.NestedStringSlice(request, "sources", "stages")
		strategy, _, _ := unstructured.NestedString(request, "sources", "availabilityStrategy")
		var verified, missing []string
		for _, up := range upstream {
			if _, ok := verifiedIn[up]; ok {
				verified = append(verified, up)
			} else {
				missing = append(missing, up)
			}
		}
		switch {
		case strategy == "All" && len(missing) == 0 && len(verified) > 0,
			strategy != "All" && len(verified) > 0:
			return true, "verified in " + strings.Join(verified, ", "), nil
		case len(missing) > 0:
			return false, "not verified in " + strings.Join(missing, ", "), nil
		}
	}
	return false, "not requested by " + stage, nil
}

// record is the Stage's latch record and its raw annotation.
func (d *demo) record(ctx context.Context, s *driver.Stage) (latch.Record, string) {
	u, err := s.Get(ctx)
	if err != nil {
		return latch.Record{}, ""
	}
	raw := u.GetAnnotations()[api.StateAnnotation]
	r, _ := latch.Decode(raw)
	return r, raw
}

func (d *demo) recordUnchanged(ctx context.Context, s *driver.Stage, want string) bool {
	_, raw := d.record(ctx, s)
	return raw == want
}

func (d *demo) freightUnchanged(ctx context.Context, k *driver.Kargo, name, rv string) bool {
	f, err := k.Freight(ctx, project, name)
	return err == nil && f.GetResourceVersion() == rv
}

// appNames lists the Apps of a record's appsHealthy by name.
func appNames(apps map[string]time.Time) string {
	var names []string
	for _, k := range slices.Sorted(maps.Keys(apps)) {
		names = append(names, k[strings.LastIndex(k, "/")+1:])
	}
	return "(" + strings.Join(names, ", ") + ")"
}

// short is a Freight name as people see it: its first 7 hex digits.
func short(freight string) string { return freight[:min(7, len(freight))] }

func shortAll(freight []string) []string {
	out := make([]string, len(freight))
	for i, f := range freight {
		out[i] = short(f)
	}
	return out
}
