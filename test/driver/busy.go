package driver

import (
	"context"
	"crypto/sha1" //nolint:gosec // Kargo derives Freight collection IDs with SHA-1
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// WriteBusyStatus writes the status of a Stage that has been in service for
// a while, as Kargo keeps it: a Succeeded lastPromotion, 10 freightHistory
// entries with 10 verification records each, and Argo CD health output,
// about 64 KB of JSON in all. health is the Stage's current health.
func (s *Stage) WriteBusyStatus(ctx context.Context, health string) error {
	now := s.k.clock().UTC()
	var history []any
	var newest string
	for i := range 10 {
		freight := newFreightName()
		if i == 0 {
			newest = freight
		}
		sum := sha1.Sum([]byte(freight)) //nolint:gosec // Kargo's own ID scheme
		var verifications []any
		for j := range 10 {
			at := now.Add(-time.Duration(i*10+j) * time.Hour).Format(time.RFC3339)
			verifications = append(verifications, map[string]any{
				"id": newUUID(), "actor": "controller:kargo", "phase": "Successful",
				"startTime": at, "finishTime": at, "message": "",
				"analysisRun": map[string]any{"namespace": s.Namespace, "name": fmt.Sprintf("%s.%s.%d", s.Name, freight[:7], j), "phase": "Successful"},
			})
		}
		history = append(history, map[string]any{
			"id":                  hex.EncodeToString(sum[:]),
			"items":               map[string]any{"Warehouse/" + s.Warehouse: s.freightRef(freight)},
			"verificationHistory": verifications,
		})
	}
	var apps []any
	for i := range 40 {
		apps = append(apps, map[string]any{
			"Name": fmt.Sprintf("%s-app-%02d", s.Name, i), "Namespace": "argocd",
			"health": map[string]any{"status": health, "message": strings.Repeat("resource tree healthy; ", 8)},
			"sync":   map[string]any{"status": "Synced", "revision": newFreightName(), "revisions": []any{newFreightName(), newFreightName()}},
		})
	}
	name := promotionName(s.Name, newest)
	finished := now.Add(-time.Minute).Format(time.RFC3339)
	return s.patchStatus(ctx, map[string]any{
		"lastPromotion": map[string]any{
			"name": name, "freight": s.freightRef(newest), "finishedAt": finished,
			"status": map[string]any{"phase": "Succeeded", "finishedAt": finished, "freight": s.freightRef(newest)},
		},
		"freightHistory": history,
		"health": map[string]any{
			"status": health,
			"output": []any{map[string]any{"applicationStatuses": apps}},
			"config": map[string]any{"apps": apps[:10]},
		},
	})
}
