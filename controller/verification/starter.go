package verification

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// Starter makes, finds and terminates the AnalysisRuns of verify-on-latch
// on the API server. It reads everything a run is built from live (the
// Stage's spec, its templates, its Freight), once per run: nothing of it is
// cached.
type Starter struct {
	Dynamic dynamic.Interface
	// InstanceID is the Argo Rollouts controller instance the runs are
	// for, as Kargo's ROLLOUTS_CONTROLLER_INSTANCE_ID; empty for none.
	InstanceID string
}

// Lookup lists the AnalysisRuns of a Stage's Freight collection, anyone's,
// as Kargo does before it creates one: by its two labels.
func (s *Starter) Lookup(ctx context.Context, namespace, stage, collection string) ([]latch.Run, error) {
	list, err := s.Dynamic.Resource(AnalysisRunsResource).Namespace(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: StageLabel + "=" + ShortenLabelValue(stage) + "," + FreightCollectionLabel + "=" + collection,
	})
	if err != nil {
		return nil, fmt.Errorf("listing the AnalysisRuns of Stage %s/%s: %w", namespace, stage, err)
	}
	var runs []latch.Run
	for i := range list.Items {
		if StageOf(&list.Items[i]) == stage {
			runs = append(runs, RunFrom(&list.Items[i]))
		}
	}
	return runs, nil
}

// Start builds the run of a Stage's current Freight collection exactly as
// Kargo would and creates it, unless Kargo's own lookup finds runs of the
// collection already (Kargo's, or this cycle's own): those are returned
// instead, to be followed, whatever the reads of the templates, Freight and
// Warehouses found. A run already at the name is this cycle's own, made
// before a crash, only if it carries kargo-latch's marker and this Stage's
// and collection's labels; anything else there is refused (*Unsupported),
// never adopted. created says whether this call made the run.
//
// It reads the Stage first, then, side by side, Kargo's lookup and what the
// Stage names (its templates, its Freight, the Warehouses it requests
// from): two round trips before the create, not one per object. Between
// the lookup and the create lie the slowest of those reads and the build.
// Kargo could make a run of its own in that gap, as it could between its
// own lookup and create; Kargo then follows its own run, and so does
// kargo-latch, which yields to a verification in Kargo's status and
// terminates the run it made (latch.verify, terminateStrayRuns).
func (s *Starter) Start(ctx context.Context, namespace, stage, collection, name string) (runs []latch.Run, created bool, err error) {
	src, err := s.source(ctx, namespace, stage, collection)
	if err != nil {
		return nil, false, err
	}
	var (
		found               []latch.Run
		run                 *unstructured.Unstructured
		lookupErr, buildErr error
		reads               sync.WaitGroup
	)
	reads.Go(func() { found, lookupErr = s.Lookup(ctx, namespace, stage, collection) })
	reads.Go(func() { run, buildErr = s.build(ctx, namespace, src, name) })
	reads.Wait()
	if lookupErr != nil {
		return nil, false, lookupErr
	}
	if slices.ContainsFunc(found, func(r latch.Run) bool { return !r.Ours || r.Name == name }) {
		return found, false, nil
	}
	if buildErr != nil {
		return nil, false, buildErr
	}
	made, err := s.Dynamic.Resource(AnalysisRunsResource).Namespace(namespace).Create(ctx, run, metav1.CreateOptions{FieldManager: api.FieldManager})
	if apierrors.IsAlreadyExists(err) {
		own, err := s.existing(ctx, namespace, stage, collection, name)
		return []latch.Run{own}, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("creating AnalysisRun %s/%s: %w", namespace, name, err)
	}
	return []latch.Run{RunFrom(made)}, true, nil
}

// source reads the Stage live: what its run is built from.
func (s *Starter) source(ctx context.Context, namespace, stage, collection string) (*Source, error) {
	live, err := s.Dynamic.Resource(kargo.StagesResource).Namespace(namespace).Get(ctx, stage, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading Stage %s/%s: %w", namespace, stage, err)
	}
	src, err := ParseStage(live)
	if err != nil {
		return nil, err
	}
	if src.Collection.ID != collection {
		return nil, fmt.Errorf("stage %s/%s now shows Freight collection %q, not %q: judging again", namespace, stage, src.Collection.ID, collection)
	}
	return src, nil
}

// build reads, live and side by side, what the Stage names (its
// templates, its Freight, the Warehouses it requests from), and builds the
// run. Of several failed reads, what kargo-latch cannot build (*Unsupported)
// is reported first, so that the outcome does not depend on which read
// ended first.
func (s *Starter) build(ctx context.Context, namespace string, src *Source, name string) (*unstructured.Unstructured, error) {
	var warehouseNames []string
	for _, o := range src.RequestedFreight {
		if o.Kind == "Warehouse" {
			warehouseNames = append(warehouseNames, o.Name)
		}
	}
	templates := make([]*unstructured.Unstructured, len(src.Templates))
	freight := make([]*unstructured.Unstructured, len(src.Collection.Freight))
	warehouses := make([]*unstructured.Unstructured, len(warehouseNames))
	errs := make([]error, len(templates)+len(freight)+len(warehouses))
	var reads sync.WaitGroup
	for i, ref := range src.Templates {
		reads.Go(func() { templates[i], errs[i] = s.template(ctx, namespace, ref) })
	}
	for i, f := range src.Collection.Freight {
		reads.Go(func() { freight[i], errs[len(templates)+i] = s.freight(ctx, namespace, f.Name) })
	}
	for i, w := range warehouseNames {
		reads.Go(func() { warehouses[i], errs[len(templates)+len(freight)+i] = s.warehouse(ctx, namespace, w) })
	}
	reads.Wait()
	if err := mostTelling(errs); err != nil {
		return nil, err
	}
	in := Input{Source: src, Name: name, InstanceID: s.InstanceID, Freight: freight,
		Templates: map[TemplateRef]*unstructured.Unstructured{}, Warehouses: map[string]*unstructured.Unstructured{}}
	for i, ref := range src.Templates {
		in.Templates[ref] = templates[i]
	}
	for i, w := range warehouseNames {
		if warehouses[i] != nil {
			in.Warehouses[w] = warehouses[i]
		}
	}
	return Build(in)
}

// mostTelling is the first *Unsupported of errs, else the first error.
func mostTelling(errs []error) error {
	for _, err := range errs {
		if _, unsupported := IsUnsupported(err); unsupported {
			return err
		}
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Starter) freight(ctx context.Context, namespace, name string) (*unstructured.Unstructured, error) {
	u, err := s.Dynamic.Resource(kargo.FreightsResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading Freight %s/%s: %w", namespace, name, err)
	}
	return u, nil
}

// existing adopts the run at a cycle's name when it is the cycle's own.
func (s *Starter) existing(ctx context.Context, namespace, stage, collection, name string) (latch.Run, error) {
	u, err := s.Dynamic.Resource(AnalysisRunsResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return latch.Run{}, fmt.Errorf("reading AnalysisRun %s/%s: %w", namespace, name, err)
	}
	l := u.GetLabels()
	if l[MarkerLabel] != MarkerValue || StageOf(u) != stage || l[FreightCollectionLabel] != collection {
		return latch.Run{}, &Unsupported{Reason: "NameTaken", Message: fmt.Sprintf(
			"AnalysisRun %s/%s, the name kargo-latch derives for this cycle's run, is taken by a run that is not kargo-latch's run of Stage %s and Freight collection %s; kargo-latch starts none", namespace, name, stage, collection)}
	}
	return RunFrom(u), nil
}

func (s *Starter) template(ctx context.Context, namespace string, ref TemplateRef) (*unstructured.Unstructured, error) {
	res := s.Dynamic.Resource(AnalysisTemplatesResource).Namespace(namespace)
	where := "in namespace " + namespace
	if ref.Kind == KindClusterAnalysisTemplate {
		res, where = s.Dynamic.Resource(ClusterAnalysisTemplatesResource), "in the cluster"
	}
	t, err := res.Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, &Unsupported{Reason: "TemplateMissing", Message: fmt.Sprintf("%s %s, named in spec.verification, does not exist %s", ref.Kind, ref.Name, where)}
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", ref.Kind, ref.Name, err)
	}
	return t, nil
}

// warehouse reads a Warehouse the Stage requests Freight from: Kargo reads
// them to resolve imageFrom, commitFrom and chartFrom called without an
// origin. One that is gone is left out (nil): only such a call needs it,
// and the build then refuses it.
func (s *Starter) warehouse(ctx context.Context, namespace, name string) (*unstructured.Unstructured, error) {
	w, err := s.Dynamic.Resource(kargo.WarehousesResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Warehouse %s/%s: %w", namespace, name, err)
	}
	return w, nil
}

// Get reads a run from the API server; found is false when it is gone.
func (s *Starter) Get(ctx context.Context, namespace, name string) (run latch.Run, found bool, err error) {
	u, err := s.Dynamic.Resource(AnalysisRunsResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return latch.Run{}, false, nil
	}
	if err != nil {
		return latch.Run{}, false, fmt.Errorf("reading AnalysisRun %s/%s: %w", namespace, name, err)
	}
	return RunFrom(u), true, nil
}

// Terminate stops a run kargo-latch cut short, as Kargo's abort does: a
// merge patch of spec.terminate. It is read first, and the patch is
// conditional on what was read: a run still carrying either of Kargo's
// lookup labels is refused (ErrInLookup), never terminated, since Argo
// Rollouts would end it Successful and Kargo could adopt it as a pass. A
// run already gone needs nothing.
func (s *Starter) Terminate(ctx context.Context, namespace, name string) error {
	u, err := s.readRun(ctx, namespace, name)
	if u == nil || err != nil {
		return err
	}
	runs := s.Dynamic.Resource(AnalysisRunsResource).Namespace(namespace)
	if l := u.GetLabels(); l[StageLabel] != "" || l[FreightCollectionLabel] != "" {
		return fmt.Errorf("AnalysisRun %s/%s: %w", namespace, name, ErrInLookup)
	}
	patch := fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"spec":{"terminate":true}}`, u.GetResourceVersion())
	_, err = runs.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: api.FieldManager})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// ErrInLookup refuses to terminate a run still in Kargo's lookup.
var ErrInLookup = errors.New("still carries Kargo's lookup labels: not terminated (a terminated run ends Successful, which Kargo would adopt)")

// IsUnsupported reports whether err says that a run cannot be built or
// made exactly as Kargo would: never retried at once, and never a run.
func IsUnsupported(err error) (*Unsupported, bool) {
	var u *Unsupported
	return u, errors.As(err, &u)
}
