package verification

import (
	"errors"
	"fmt"

	"github.com/expr-lang/expr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The Freight functions' return values. Kargo returns its own API types
// (kargoapi.GitCommit, Image, Chart, FreightOrigin), so an expression reads
// their Go field names: imageFrom(r).Tag, commitFrom(r).ID, chartFrom(r).Version,
// warehouse(n).Name. These mirror those fields. Printing one (string()) or
// encoding one (toJSON(), a struct as a whole result) depends on Kargo's
// generated methods and version, so both are refused: String yields a marker
// that Build turns into *Unsupported, MarshalJSON fails.
type (
	// GitCommit mirrors kargoapi.GitCommit: commitFrom's result.
	GitCommit struct {
		RepoURL   string `json:"repoURL,omitempty"`
		ID        string `json:"id,omitempty"`
		Branch    string `json:"branch,omitempty"`
		Tag       string `json:"tag,omitempty"`
		Message   string `json:"message,omitempty"`
		Author    string `json:"author,omitempty"`
		Committer string `json:"committer,omitempty"`
	}
	// Image mirrors kargoapi.Image: imageFrom's result.
	Image struct {
		RepoURL     string            `json:"repoURL,omitempty"`
		Tag         string            `json:"tag,omitempty"`
		Digest      string            `json:"digest,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	// Chart mirrors kargoapi.Chart: chartFrom's result.
	Chart struct {
		RepoURL string `json:"repoURL,omitempty"`
		Name    string `json:"name,omitempty"`
		Version string `json:"version,omitempty"`
	}
	// FreightOriginKind is a named string type, as Kargo's is: comparing
	// warehouse(n).Kind with a plain string is false in expr, in Kargo too.
	FreightOriginKind string
	// FreightOrigin mirrors kargoapi.FreightOrigin: warehouse's result.
	FreightOrigin struct {
		Kind FreightOriginKind `json:"kind"`
		Name string            `json:"name"`
	}
)

// printedMarker is what printing a Freight value gives; its presence in a
// result means the result would depend on how Kargo prints its types.
const printedMarker = "\x00kargo-latch: a Freight value was printed\x00"

var errEncoded = errors.New("encoding a Freight function's result is not supported: it depends on Kargo's version")

// String marks the printed value (see printedMarker).
func (GitCommit) String() string { return printedMarker }

// String marks the printed value (see printedMarker).
func (Image) String() string { return printedMarker }

// String marks the printed value (see printedMarker).
func (Chart) String() string { return printedMarker }

// String marks the printed value (see printedMarker).
func (FreightOrigin) String() string { return printedMarker }

// MarshalJSON refuses: the encoding depends on Kargo's version.
func (GitCommit) MarshalJSON() ([]byte, error) { return nil, errEncoded }

// MarshalJSON refuses: the encoding depends on Kargo's version.
func (Image) MarshalJSON() ([]byte, error) { return nil, errEncoded }

// MarshalJSON refuses: the encoding depends on Kargo's version.
func (Chart) MarshalJSON() ([]byte, error) { return nil, errEncoded }

// MarshalJSON refuses: the encoding depends on Kargo's version.
func (FreightOrigin) MarshalJSON() ([]byte, error) { return nil, errEncoded }

const warehouseKind FreightOriginKind = "Warehouse"

// unsupportedFunctions are functions Kargo offers in verification arguments
// (pkg/expressions/function: DataOperations, UtilityOperations and the rest
// of FreightOperations; pkg/expressions: asYAML/asJSON on newer versions)
// that kargo-latch does not evaluate: they read the cluster (configMap,
// secret, …) or depend on a library Kargo pins. Calling one is *Unsupported.
var unsupportedFunctions = []string{
	"configMap", "sharedConfigMap", "secret", "sharedSecret",
	"freightMetadata", "freightStatus", "stageMetadata", "artifactFrom",
	"semverDiff", "semverParse", "asYAML", "asJSON",
}

// errUnsupportedFunction marks a call of one of unsupportedFunctions.
type errUnsupportedFunction struct{ name string }

func (e errUnsupportedFunction) Error() string {
	return fmt.Sprintf("%s() is not supported by kargo-latch", e.name)
}

// freightFunctions is Kargo's FreightOperations (pkg/expressions/function
// functions.go) over the collection's Freight references, with the Stage's
// requested origins and the Warehouses they name (pkg/controller/freight
// finder.go reads a Warehouse only when no origin is given).
type freightFunctions struct {
	project    string
	requested  []Origin
	freight    []FreightRef
	warehouses map[string]*unstructured.Unstructured
}

func (f *freightFunctions) options() []expr.Option {
	opts := []expr.Option{
		expr.Function("warehouse", warehouseFunc, new(func(string) FreightOrigin)),
		expr.Function("commitFrom", f.commitFrom,
			new(func(string, FreightOrigin) GitCommit), new(func(string) GitCommit)),
		expr.Function("imageFrom", f.imageFrom,
			new(func(string, FreightOrigin) Image), new(func(string) Image)),
		expr.Function("chartFrom", f.chartFrom,
			new(func(string, string, FreightOrigin) Chart), new(func(string, string) Chart),
			new(func(string, FreightOrigin) Chart), new(func(string) Chart)),
	}
	for _, name := range unsupportedFunctions {
		opts = append(opts, expr.Function(name, func(...any) (any, error) {
			return nil, errUnsupportedFunction{name: name}
		}))
	}
	return opts
}

// Kargo's warehouse(): one non-empty string → FreightOrigin{Warehouse, name}.
func warehouseFunc(a ...any) (any, error) {
	if len(a) != 1 {
		return nil, fmt.Errorf("expected 1 argument, got %d", len(a))
	}
	name, ok := a[0].(string)
	if !ok {
		return nil, fmt.Errorf("argument must be string, got %T", a[0])
	}
	if name == "" {
		return nil, fmt.Errorf("name must not be empty")
	}
	return FreightOrigin{Kind: warehouseKind, Name: name}, nil
}

// repoAndOrigin reads (repoURL[, origin]) as commitFrom and imageFrom do.
func repoAndOrigin(a []any) (string, *FreightOrigin, error) {
	if len(a) == 0 || len(a) > 2 {
		return "", nil, fmt.Errorf("expected 1-2 arguments, got %d", len(a))
	}
	repoURL, ok := a[0].(string)
	if !ok {
		return "", nil, fmt.Errorf("first argument must be string, got %T", a[0])
	}
	if len(a) == 1 {
		return repoURL, nil, nil
	}
	origin, ok := a[1].(FreightOrigin)
	if !ok {
		return "", nil, fmt.Errorf("second argument must be FreightOrigin, got %T", a[1])
	}
	return repoURL, &origin, nil
}

// Kargo's FindCommit: URLs compared after Git normalisation; no origin →
// the one requested Warehouse subscribing to the repository (two → error,
// none → nil); then the first commit of that origin's Freight from the
// repository, or nil.
func (f *freightFunctions) commitFrom(a ...any) (any, error) {
	repoURL, origin, err := repoAndOrigin(a)
	if err != nil {
		return nil, err
	}
	repoURL = normalizeGit(repoURL)
	if origin == nil {
		if origin, err = f.inferOrigin("commit from repo "+repoURL, func(s map[string]any) bool {
			g, ok := s["git"].(map[string]any)
			return ok && normalizeGit(str(g, "repoURL")) == repoURL
		}); err != nil || origin == nil {
			return (*GitCommit)(nil), err
		}
	}
	for _, ref := range f.freight {
		if !ref.Origin.is(origin) {
			continue
		}
		for i := range ref.Commits {
			if normalizeGit(ref.Commits[i].RepoURL) == repoURL {
				c := ref.Commits[i]
				return &c, nil
			}
		}
	}
	return (*GitCommit)(nil), nil
}

// Kargo's FindImage: as FindCommit, but URLs compared exactly.
func (f *freightFunctions) imageFrom(a ...any) (any, error) {
	repoURL, origin, err := repoAndOrigin(a)
	if err != nil {
		return nil, err
	}
	if origin == nil {
		if origin, err = f.inferOrigin("container image from repository "+repoURL, func(s map[string]any) bool {
			i, ok := s["image"].(map[string]any)
			return ok && str(i, "repoURL") == repoURL
		}); err != nil || origin == nil {
			return (*Image)(nil), err
		}
	}
	for _, ref := range f.freight {
		if !ref.Origin.is(origin) {
			continue
		}
		for i := range ref.Images {
			if ref.Images[i].RepoURL == repoURL {
				img := ref.Images[i]
				return &img, nil
			}
		}
	}
	return (*Image)(nil), nil
}

// Kargo's chartFrom(repoURL[, name][, origin]) and FindChart: repository and
// chart name compared exactly (an absent name matches only charts without
// one); unlike commits and images, an origin that cannot be inferred is an
// error ("not found in referenced Freight").
func (f *freightFunctions) chartFrom(a ...any) (any, error) {
	if len(a) == 0 || len(a) > 3 {
		return nil, fmt.Errorf("expected 1-3 arguments, got %d", len(a))
	}
	repoURL, ok := a[0].(string)
	if !ok {
		return nil, fmt.Errorf("first argument must be string, got %T", a[0])
	}
	var name string
	var origin *FreightOrigin
	if len(a) >= 2 {
		switch v := a[1].(type) {
		case string:
			name = v
		case FreightOrigin:
			origin = &v
		default:
			return nil, fmt.Errorf("second argument must be string or FreightOrigin, got %T", a[1])
		}
	}
	if len(a) == 3 {
		if name == "" {
			return nil, fmt.Errorf("when using three arguments, second argument must be string, got %T", a[1])
		}
		o, ok := a[2].(FreightOrigin)
		if !ok {
			return nil, fmt.Errorf("third argument must be FreightOrigin, got %T", a[2])
		}
		origin = &o
	}
	if origin == nil {
		var err error
		if origin, err = f.inferOrigin("chart from repository "+repoURL, func(s map[string]any) bool {
			c, ok := s["chart"].(map[string]any)
			return ok && str(c, "repoURL") == repoURL && str(c, "name") == name
		}); err != nil {
			return (*Chart)(nil), err
		}
		if origin == nil {
			return (*Chart)(nil), fmt.Errorf("chart %q from repo %s not found in referenced Freight", name, repoURL)
		}
	}
	for _, ref := range f.freight {
		if !ref.Origin.is(origin) {
			continue
		}
		for i := range ref.Charts {
			if ref.Charts[i].RepoURL == repoURL && ref.Charts[i].Name == name {
				c := ref.Charts[i]
				return &c, nil
			}
		}
	}
	return (*Chart)(nil), nil
}

// inferOrigin walks the requested origins' Warehouses, in spec order, for the
// one subscription that provides what is asked. A second match anywhere is
// ambiguity (an error); a Warehouse the caller did not give is an error, as
// a missing one is in Kargo.
func (f *freightFunctions) inferOrigin(what string, provides func(map[string]any) bool) (*FreightOrigin, error) {
	var found *FreightOrigin
	for _, req := range f.requested {
		wh := f.warehouses[req.Name]
		if wh == nil {
			return nil, fmt.Errorf("warehouse %q not found in namespace %q", req.Name, f.project)
		}
		subs, _, _ := unstructured.NestedSlice(wh.Object, "spec", "subscriptions")
		for _, s := range objects(subs) {
			if !provides(s) {
				continue
			}
			if found != nil {
				return nil, fmt.Errorf("multiple requested Freight could potentially provide a %s: please provide a Freight origin to disambiguate", what)
			}
			found = &FreightOrigin{Kind: FreightOriginKind(req.Kind), Name: req.Name}
		}
	}
	return found, nil
}

// is compares an origin as Kargo's FreightOrigin.Equals: kind and name.
func (o Origin) is(other *FreightOrigin) bool {
	return other != nil && o.Kind == string(other.Kind) && o.Name == other.Name
}
