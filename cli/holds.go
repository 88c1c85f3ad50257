package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// Kargo (v1.11.1+) holds auto-promotion from an origin after a person
// promoted other Freight than its candidate: a rollback during a pause
// does that, and the hold outlives the StagePause. kargo-latch never writes
// these holds; status, resume and wait --for=resumed show them, so that
// nobody wonders why nothing flows after a resume.

func kargoHolds(holds []kargo.AutoPromotionHold) []KargoHold {
	var out []KargoHold
	for _, h := range holds {
		out = append(out, KargoHold{Origin: h.Origin, Freight: h.Freight, Actor: h.Actor, Promotion: h.Promotion, Since: h.CreatedAt})
	}
	return out
}

// heldCell is the HELD column: the Warehouses Kargo holds.
func heldCell(r StageStatus) string {
	names := make([]string, len(r.KargoHolds))
	for i, h := range r.KargoHolds {
		names[i] = kargo.AutoPromotionHold{Origin: h.Origin}.Warehouse()
	}
	return dash(strings.Join(names, ","))
}

// holdsHeading heads the lines below the status table that show Kargo's
// holds.
const holdsHeading = "Kargo's own auto-promotion holds (to release one, promote the Warehouse's current candidate Freight to the Stage, or resume auto-promotion in Kargo's UI):"

// printHolds shows, below the status table, each of Kargo's holds on the
// rows' Stages, when there are any. No blank line comes before it: status
// -w off a terminal separates its successive tables with one.
func printHolds(out io.Writer, rows []StageStatus, withProject bool, now time.Time) error {
	anyHeld := false
	for _, r := range rows {
		anyHeld = anyHeld || len(r.KargoHolds) > 0
	}
	if !anyHeld {
		return nil
	}
	fmt.Fprintln(out, holdsHeading)
	w := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	tableRow(w, withProject, "PROJECT", "STAGE", "ORIGIN", "FREIGHT", "ACTOR", "PROMOTION", "SINCE")
	for _, r := range rows {
		for _, h := range r.KargoHolds {
			tableRow(w, withProject, r.Project, r.Stage, h.Origin, dash(h.Freight), dash(h.Actor), dash(h.Promotion), age(h.Since, now))
		}
	}
	return w.Flush()
}

// sayHolds tells, after a resume, when Kargo's own hold still stops
// auto-promotion of the Stage (all of the project's, for stage ""), and
// how to release it. It needs the right to read Stages, which resuming does
// not: without it, it says that it could not look.
func sayHolds(ctx context.Context, client dynamic.Interface, ns, stage string, out, errOut io.Writer) {
	stages := client.Resource(kargo.StagesResource).Namespace(ns)
	var items []unstructured.Unstructured
	if stage != "" {
		u, err := stages.Get(ctx, stage, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			fmt.Fprintf(errOut, "warning: cannot read Stage %s in project %s to check for Kargo's own auto-promotion holds: %s\n", stage, ns, apiMessage(err))
		}
		if err == nil {
			items = append(items, *u)
		}
	} else {
		l, err := stages.List(ctx, metav1.ListOptions{})
		if err != nil {
			fmt.Fprintf(errOut, "warning: cannot list the Stages of project %s to check for Kargo's own auto-promotion holds: %s\n", ns, apiMessage(err))
			return
		}
		items = l.Items
	}
	for i := range items {
		u := &items[i]
		if holds := kargoHoldsOf(u); len(holds) > 0 {
			fmt.Fprintf(out, "Stage %s: %s\n", u.GetName(), holdsSentence(u, holds))
		}
	}
}

// pendingIntent says which person's Promotion makes or releases a hold
// that the Stage does not show yet; "" when there is none. Kargo recomputes
// its effective holds only when it reconciles the Stage, overlaying, per
// origin, the newest non-aborted Promotion newer than lastPromotion that
// carries a hold or resume intent. So right after "kargo promote" of the
// candidate the Stage still shows the hold that Promotion releases, and
// right after a rollback's it does not show the hold yet: a wait for
// resumed must neither end held nor end resumed on that.
func pendingIntent(u *unstructured.Unstructured, holds []kargo.AutoPromotionHold, promotions []promotion) string {
	last := ""
	if st := kargo.StatusFromUnstructured(u); st != nil && st.LastPromotion != nil {
		last = st.LastPromotion.Name
	}
	newest := map[string]promotion{} // by origin
	for _, p := range promotions {
		if p.Phase == promotionAborted || p.Target != "" || p.Name <= last {
			continue
		}
		for _, origin := range []string{p.Hold, p.Resume} {
			if n, ok := newest[origin]; origin != "" && (!ok || p.Name > n.Name) {
				newest[origin] = p
			}
		}
	}
	for _, origin := range sortedOrigins(newest) {
		p := newest[origin]
		isHeld := slices.ContainsFunc(holds, func(h kargo.AutoPromotionHold) bool { return h.Origin == origin })
		switch {
		case p.Resume == origin && isHeld:
			return fmt.Sprintf("Kargo has yet to take in promotion %s, which releases its hold on auto-promotion from %s", p.Name, origin)
		case p.Hold == origin && !isHeld:
			return fmt.Sprintf("Kargo has yet to take in promotion %s, which makes it hold auto-promotion from %s", p.Name, origin)
		}
	}
	return ""
}

func sortedOrigins(m map[string]promotion) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
