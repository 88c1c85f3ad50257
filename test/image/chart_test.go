package imagetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/hack/image/ociimage"
	"github.com/kargo-latch/kargo-latch/test/cluster"
)

// TestChartDefaultsInstallTheImage: the chart as it stands, with its
// default values, installs the image `make image` builds, by the name its
// tarball and layout give it, and whose version label is the tag.
func TestChartDefaultsInstallTheImage(t *testing.T) {
	t.Parallel()
	image := deploymentImage(t, filepath.Join(built.root, ociimage.ChartPath))
	if image != built.source.Ref() {
		t.Errorf("the chart installs %s by default; make image builds %s", image, built.source.Ref())
	}
	if named := built.entry.Annotations["io.containerd.image.name"]; named != "docker.io/library/"+image {
		t.Errorf("the chart installs %s by default; the layout names the image %s", image, named)
	}
	m, err := built.index.IndexManifest()
	must(t, err)
	if _, tag, _ := strings.Cut(image, ":"); m.Annotations["org.opencontainers.image.version"] != tag {
		t.Errorf("the chart installs the tag %s; the image is version %s", tag, m.Annotations["org.opencontainers.image.version"])
	}
}

// deploymentImage is the image of the operator's Deployment that the
// chart (a directory or a packaged .tgz) renders with its defaults.
func deploymentImage(t *testing.T, chart string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "rendered.yaml")
	must(t, os.WriteFile(f, runHelm(t, "template", "kargo-latch", chart, "--namespace", "kargo-latch"), 0o600))
	objs, err := cluster.ReadObjects(f)
	must(t, err)
	var images []string
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			images = append(images, c.(map[string]any)["image"].(string))
		}
	}
	if len(images) != 1 {
		t.Fatalf("the chart's defaults render the images %v, want one Deployment's one container", images)
	}
	return images[0]
}

func helmBinary(t *testing.T) string {
	t.Helper()
	path := filepath.Join(built.root, "bin", "helm")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%v: run `make chart`, which builds helm from Go modules into bin/", err)
	}
	return path
}

// runHelm runs bin/helm with its files in a temporary home, and returns
// its standard output.
func runHelm(t *testing.T, args ...string) []byte {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helmBinary(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
	}
	return out
}
