package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// defaultKargoController is the username of Kargo's controller as Kargo's
// chart installs it, the default of the pause gate's setting too.
const defaultKargoController = "system:serviceaccount:kargo:kargo-controller"

// kargoControllers is the setting that names Kargo's controllers, as the
// pause gate's kargo-latch-kargo-controllers (the chart's
// pauseGate.kargoController* values): exact usernames, and one regular
// expression matched whole. The operator needs it for one judgement: a
// Promotion that one of them created with a kubernetes: create-actor (Kargo's
// webhook took it for a person) is a bypass of the gate (GateBypassed).
type kargoControllers struct {
	usernames []string
	regex     *regexp.Regexp
}

// parseKargoControllers reads the flags' values: usernames comma-separated,
// a regex anchored as the gate anchors it (^(?:regex)$).
func parseKargoControllers(usernames, regex string) (*kargoControllers, error) {
	k := &kargoControllers{}
	for _, u := range strings.Split(usernames, ",") {
		if u = strings.TrimSpace(u); u != "" {
			k.usernames = append(k.usernames, u)
		}
	}
	if regex != "" {
		re, err := regexp.Compile("^(?:" + regex + ")$")
		if err != nil {
			return nil, fmt.Errorf("--kargo-controller-regex: %w", err)
		}
		k.regex = re
	}
	return k, nil
}

// is reports whether username is one of Kargo's controllers.
func (k *kargoControllers) is(username string) bool {
	return slices.Contains(k.usernames, username) || (k.regex != nil && k.regex.MatchString(username))
}
