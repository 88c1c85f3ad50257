package imagetest

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/kargo-latch/kargo-latch/hack/image/ociimage"
)

// TestPushAndPull: `make image-push LAYOUT=…`'s push of a layout as it
// is, to an in-process registry that requires basic auth, finds its
// credentials in the docker config ($DOCKER_CONFIG); pulled back, the
// index has the built digest and validates. A tag other than the image's
// version is refused before anything is sent, so that the chart's
// image.tag always names a binary of that version; so is an image built
// from a work tree with changes (its revision label ends in -dirty),
// unless the push allows it.
func TestPushAndPull(t *testing.T) {
	const user, password = "pusher", "s3cret"
	var requests atomic.Int64
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != password {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")

	config := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	must(t, os.WriteFile(filepath.Join(config, "config.json"),
		fmt.Appendf(nil, `{"auths": {%q: {"auth": %q}}}`, host, auth), 0o600))
	t.Setenv("DOCKER_CONFIG", config)

	ctx := context.Background()
	ref := host + "/kargo-latch/kargo-latch:" + built.source.Version
	push := []string{"push", "-layout", built.layout, "-image", ref}
	if built.source.Dirty() {
		// The image under test is the work tree's.
		push = append(push, "-allow-dirty")
	}
	said := succeed(t, hackImage(nil, push...))
	want, err := built.index.Digest()
	must(t, err)
	if !strings.Contains(said, "pushed "+ref+"@"+want.String()) {
		t.Errorf("the push says %q, want it to name %s@%s", said, ref, want)
	}

	tag, err := name.NewTag(ref)
	must(t, err)
	if _, err := remote.Index(tag); err == nil {
		t.Error("the registry served the index without credentials: the test cannot tell that the push used them")
	}
	pulled, err := remote.Index(tag, remote.WithAuth(&authn.Basic{Username: user, Password: password}))
	must(t, err)
	got, err := pulled.Digest()
	must(t, err)
	if got != want {
		t.Errorf("pulled index %s, built %s", got, want)
	}
	must(t, validate.Index(pulled))

	before := requests.Load()
	if _, err := ociimage.Push(ctx, built.layout, host+"/kargo-latch/kargo-latch:v9.9.9", true); err == nil ||
		!strings.Contains(err.Error(), "version") {
		t.Errorf("pushing version %s as v9.9.9: %v, want a refusal that names the version", built.source.Version, err)
	}
	dirty := dirtyLayout(t)
	if _, err := ociimage.Push(ctx, dirty, ref, false); err == nil || !strings.Contains(err.Error(), "-dirty") {
		t.Errorf("pushing an image built from a work tree with changes: %v, want a refusal that names its revision", err)
	}
	if requests.Load() != before {
		t.Error("a refused push reached the registry")
	}
	if _, err := ociimage.Push(ctx, dirty, ref, true); err != nil {
		t.Errorf("pushing an image built from a work tree with changes, allowed: %v", err)
	}
}

// dirtyLayout is a layout of the image under test, but labelled as built
// from a work tree with changes.
func dirtyLayout(t *testing.T) string {
	t.Helper()
	m, err := built.index.IndexManifest()
	must(t, err)
	labels := maps.Clone(m.Annotations)
	labels[ociimage.RevisionLabel] = strings.TrimSuffix(labels[ociimage.RevisionLabel], "-dirty") + "-dirty"
	idx, ok := mutate.Annotations(built.index, labels).(v1.ImageIndex)
	if !ok {
		t.Fatal("annotating the index")
	}
	dir := t.TempDir()
	lp, err := layout.Write(dir, empty.Index)
	must(t, err)
	must(t, lp.AppendIndex(idx))
	return dir
}
