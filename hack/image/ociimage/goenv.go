package ociimage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The Go settings of a build. Everything that changes the binary is set
// here, whatever the environment says; the go env file (`go env -w`) is
// not read at all (GOENV=off), since an empty variable does not override
// it: a GOFLAGS=-tags=… or GOFIPS140=… written there once would otherwise
// change every image. No go.work either (GOWORK=off): the module's go.mod
// and go.sum alone choose the dependencies.
var buildSettings = []string{
	"GOENV=off", "GOWORK=off", "CGO_ENABLED=0", "GOFLAGS=", "GOEXPERIMENT=", "GOFIPS140=off",
	"GOAMD64=v1", "GOARM64=v8.0",
}

// carriedSettings are the settings of the user's go env (file or
// environment) that say where modules, toolchains and the build cache come
// from, not what is built: with GOENV=off they would be lost, and a build
// behind a proxy, or with its cache elsewhere, would fail or start cold.
// GOTOOLCHAIN is one: whichever toolchain it picks, Source.GoVersion names
// it, and a release refuses one that is not go.mod's.
var carriedSettings = []string{
	"GOPROXY", "GONOPROXY", "GOSUMDB", "GONOSUMDB", "GOPRIVATE", "GOINSECURE", "GOVCS", "GOAUTH",
	"GOMODCACHE", "GOPATH", "GOCACHE", "GOCACHEPROG", "GOTMPDIR", "GOTOOLCHAIN",
}

// buildEnv is the environment of the go commands that build (and of the
// one that tells the toolchain they use): the process's environment minus
// every Go setting, plus the carried settings as the user's go env
// resolves them, plus buildSettings and the platform.
func buildEnv(ctx context.Context, root string, p v1.Platform) ([]string, error) {
	carried, err := userGoEnv(ctx, root)
	if err != nil {
		return nil, err
	}
	env := append(cleanGoEnv(os.Environ()), carried...)
	env = append(env, buildSettings...)
	return append(env, "GOOS="+p.OS, "GOARCH="+p.Architecture), nil
}

// userGoEnv is the carried settings as `go env` resolves them here, with
// the user's go env file.
func userGoEnv(ctx context.Context, root string) ([]string, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"env", "-json"}, carriedSettings...)...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w%s", err, stderrOf(err))
	}
	var values map[string]string
	if err := json.Unmarshal(out, &values); err != nil {
		return nil, fmt.Errorf("go env -json: %w", err)
	}
	var env []string
	for _, name := range carriedSettings {
		if v := values[name]; v != "" {
			env = append(env, name+"="+v)
		}
	}
	return env, nil
}

// cleanGoEnv drops the variables buildEnv sets, so that the environment's
// own values cannot win.
func cleanGoEnv(env []string) []string {
	set := map[string]bool{"GOOS": true, "GOARCH": true}
	for _, kv := range append(buildSettings, carriedSettings...) {
		name, _, _ := strings.Cut(kv, "=")
		set[name] = true
	}
	var kept []string
	for _, kv := range env {
		if name, _, _ := strings.Cut(kv, "="); !set[name] {
			kept = append(kept, kv)
		}
	}
	return kept
}

// goVersion is the version of the toolchain a build in root uses (the
// one GOTOOLCHAIN and go.mod select), as the binaries record it.
func goVersion(ctx context.Context, root string) (string, error) {
	env, err := buildEnv(ctx, root, HostPlatform())
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "env", "GOVERSION")
	cmd.Dir, cmd.Env = root, env
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go env GOVERSION: %w%s", err, stderrOf(err))
	}
	return strings.TrimSpace(string(out)), nil
}

// modToolchain is the toolchain line of root's go.mod ("go1.26.8"), or ""
// when it has none.
func modToolchain(ctx context.Context, root string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "edit", "-json")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod edit -json: %w%s", err, stderrOf(err))
	}
	var mod struct{ Toolchain string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", fmt.Errorf("go mod edit -json: %w", err)
	}
	return mod.Toolchain, nil
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return ": " + strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}
