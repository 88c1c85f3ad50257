package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// KargoCRDDir is where Kargo's CRDs for the test cluster are: Kargo's
// real ones (see RealKargoCRDDir) when at hand; else, outside CI (see
// InCI), the project's stand-ins under test/crds (StandInCRDFiles), which
// have every Kargo kind the demo, the operator and the CLI use, with
// Kargo's field types but none of its finer rules. In CI, real ones out of
// reach are an error, so that CI never passes without Kargo's real
// schemas, unless KARGO_LATCH_STAND_IN_CRDS asks for the stand-ins: then
// they are used whatever else is at hand, so that CI can prove that the
// demo plays in a clone without Kargo's CRDs. getenv is os.Getenv.
func KargoCRDDir(root string, getenv func(string) string) (dir string, real bool, err error) {
	standIns := filepath.Join(root, "test", "crds")
	if StandInsAsked(getenv) {
		return standIns, false, nil
	}
	dir, err = RealKargoCRDDir(root, getenv)
	if err != nil {
		return "", false, err
	}
	if dir != "" {
		return dir, true, nil
	}
	if InCI(getenv) {
		shared := filepath.Join(root, "..", "shared", "kargo-crds")
		return "", false, fmt.Errorf("CI must test against Kargo's real CRDs, but %s is missing and KARGO_CRDS_DIR is not set "+
			"(copy Kargo's charts/kargo/resources/crds there; the stand-ins in test/crds are for clones outside CI, "+
			"or for one step that sets KARGO_LATCH_STAND_IN_CRDS=1)", shared)
	}
	return standIns, false, nil
}

// RealKargoCRDDir is where Kargo's real CRDs are: $KARGO_CRDS_DIR, else
// ../shared/kargo-crds beside the repository when it exists, else ""
// (this project's CI has that folder; a plain clone does not).
func RealKargoCRDDir(root string, getenv func(string) string) (string, error) {
	if d := getenv("KARGO_CRDS_DIR"); d != "" {
		if !fileExists(d) {
			return "", fmt.Errorf("KARGO_CRDS_DIR=%s does not exist", d)
		}
		return d, nil
	}
	if shared := filepath.Join(root, "..", "shared", "kargo-crds"); fileExists(shared) {
		return shared, nil
	}
	return "", nil
}

// StandInsAsked tells whether KARGO_LATCH_STAND_IN_CRDS asks for the
// stand-in CRDs even where Kargo's real ones are at hand, as the demo's
// step of `make e2e` does.
func StandInsAsked(getenv func(string) string) bool {
	switch strings.ToLower(strings.TrimSpace(getenv("KARGO_LATCH_STAND_IN_CRDS"))) {
	case "", "0", "false", "no":
		return false
	}
	return true
}

// InCI tells whether the tests run in CI: the CI environment variable, which
// .ci/run exports and CI services set, is set to anything but "", "0",
// "false" or "no".
func InCI(getenv func(string) string) bool {
	switch strings.ToLower(strings.TrimSpace(getenv("CI"))) {
	case "", "0", "false", "no":
		return false
	}
	return true
}

// standInWarning is printed whenever the stand-in CRDs are installed,
// unless they were asked for.
const standInWarning = `
**********************************************************************
WARNING: Kargo's real CRDs were not found (../shared/kargo-crds beside the
repository, or KARGO_CRDS_DIR). Using kargo-latch's stand-in CRDs from
%s: Kargo's kinds and field types, enough for the demo, but not its finer
rules (CEL, patterns); tests that need those are skipped. CI refuses this
(CI=%q here).
**********************************************************************
`

func (c *Cluster) installCRDs(ctx context.Context) error {
	dir, real, err := KargoCRDDir(c.Root, os.Getenv)
	if err != nil {
		return err
	}
	c.CRDSource, c.RealKargoCRDs = "Kargo's real CRDs from "+dir, real
	if !real {
		c.CRDSource = "kargo-latch's stand-in CRDs from " + dir
		if !StandInsAsked(os.Getenv) {
			fmt.Fprintf(os.Stderr, standInWarning, dir, os.Getenv("CI"))
		}
	}
	client, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	if err := InstallCRDs(ctx, client, dir); err != nil {
		return err
	}
	// kargo-latch's own CRDs, as shipped.
	return InstallCRDs(ctx, client, filepath.Join(c.Root, "manifests", "crds"))
}

// InstallCRDs creates every CRD in the YAML files of dir (or updates it)
// and waits until all are established.
func InstallCRDs(ctx context.Context, client dynamic.Interface, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no CRD files in %s", dir)
	}
	crds := client.Resource(crdResource)
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		for _, doc := range strings.Split(string(b), "\n---") {
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			if obj.GetKind() != "CustomResourceDefinition" {
				continue
			}
			_, err := crds.Create(ctx, obj, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				// Another installer (a test beside this one) may write it
				// meanwhile: update from a fresh read until one holds.
				err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
					cur, err := crds.Get(ctx, obj.GetName(), metav1.GetOptions{})
					if err != nil {
						return err
					}
					obj.SetResourceVersion(cur.GetResourceVersion())
					_, err = crds.Update(ctx, obj, metav1.UpdateOptions{})
					return err
				})
			}
			if err != nil {
				return fmt.Errorf("installing CRD %s: %w", obj.GetName(), err)
			}
			names = append(names, obj.GetName())
		}
	}
	for _, name := range names {
		if err := waitEstablished(ctx, crds, name); err != nil {
			return err
		}
	}
	return nil
}

func waitEstablished(ctx context.Context, crds dynamic.NamespaceableResourceInterface, name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		crd, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, cond := range conds {
			m, _ := cond.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("CRD %s not established after 30s", name)
}
