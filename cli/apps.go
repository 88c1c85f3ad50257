package cli

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/kargo-latch/kargo-latch/latch"
)

// AppStatus is one Argo CD Application of a Stage in `status -o json|yaml`:
// what Kargo reports of it now, and when kargo-latch first saw it Healthy in
// this cycle.
type AppStatus struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// Health and Sync are Argo CD's health.status and sync.status as Kargo's
	// health output reports them now.
	Health string `json:"health"`
	Sync   string `json:"sync"`
	// SeenHealthyAt is when the App was first seen Healthy and Synced in
	// this cycle; nil until then. It is not "healthy since": an App that
	// flaps afterwards keeps it, as the latch does.
	SeenHealthyAt *time.Time `json:"seenHealthyAt,omitempty"`
}

// appStatuses pairs the Apps the Stage lists now with the record's Apps
// seen Healthy in this cycle. An App the record names but the Stage no
// longer lists is left to record.appsHealthy: it no longer counts.
func appStatuses(listed []latch.App, seen map[string]time.Time) []AppStatus {
	if len(listed) == 0 {
		return nil
	}
	out := make([]AppStatus, len(listed))
	for i, a := range listed {
		out[i] = AppStatus{Name: a.Name, Namespace: a.Namespace, Health: a.Health, Sync: a.Sync}
		if at, ok := seen[a.Key()]; ok {
			out[i].SeenHealthyAt = &at
		}
	}
	return out
}

// appsCell is the APPS column: how far the per-Application latch has got.
func appsCell(r StageStatus) string {
	switch n := len(r.Apps); {
	case n > latch.MaxApps:
		// The Stage is latched on its aggregate health alone.
		return ">" + strconv.Itoa(latch.MaxApps)
	case n > 0:
		seen := 0
		for _, a := range r.Apps {
			if a.SeenHealthyAt != nil {
				seen++
			}
		}
		return fmt.Sprintf("%d/%d", seen, n)
	case r.Record != nil && len(r.Record.AppsHealthy) > 0:
		// The health output is gone (or changed shape) since: say how many
		// Apps were seen Healthy, without a total that is no longer known.
		return strconv.Itoa(len(r.Record.AppsHealthy))
	}
	return "-"
}

// markedVerified reports whether kargo-latch has marked every current
// Freight of the Stage verified in it, in this cycle (or found it so). The
// record alone says "marked": it lists the Freight of its own cycle, so
// comparing with the Stage's current Freight also rules out a record that
// lags behind a new promotion.
func markedVerified(freight []string, rec *latch.Record) bool {
	if len(freight) == 0 || rec == nil {
		return false
	}
	for _, f := range freight {
		if !slices.Contains(rec.Marked, f) {
			return false
		}
	}
	return true
}

// verifiedCell is the VERIFIED column.
func verifiedCell(r StageStatus) string {
	if r.MarkedVerified {
		return "marked"
	}
	return "-"
}
