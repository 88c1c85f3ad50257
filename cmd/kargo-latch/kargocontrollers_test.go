package main

import "testing"

func TestKargoControllersSetting(t *testing.T) {
	k, err := parseKargoControllers(" system:serviceaccount:kargo:kargo-controller , kargo-shard-eu,", "kargo-shard-(us|ap)")
	if err != nil {
		t.Fatal(err)
	}
	for user, want := range map[string]bool{
		"system:serviceaccount:kargo:kargo-controller": true,
		"kargo-shard-eu":   true,
		"kargo-shard-us":   true,
		"x-kargo-shard-us": false, // matched whole, as the gate matches it
		"kargo-shard-usa":  false,
		"dev":              false,
	} {
		if got := k.is(user); got != want {
			t.Errorf("is(%q) = %v, want %v", user, got, want)
		}
	}
	if _, err := parseKargoControllers("", "("); err == nil {
		t.Error("an invalid regex was taken")
	}
	o, err := parseFlags(nil)
	if err != nil || !o.kargoControllers.is(defaultKargoController) || o.kargoControllers.is("kargo-shard-eu") {
		t.Errorf("defaults: %v; want Kargo's default controller only", err)
	}
}
