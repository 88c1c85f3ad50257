package kargo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// Promotion is the part of a Kargo Promotion that kargo-latch reads.
type Promotion struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	// Stage is spec.stage; empty when missing.
	Stage string
	// Phase is status.phase; empty means Pending to Kargo.
	Phase string
}

// DeepCopyObject implements runtime.Object.
func (p *Promotion) DeepCopyObject() runtime.Object {
	c := &Promotion{TypeMeta: p.TypeMeta, Stage: p.Stage, Phase: p.Phase}
	p.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return c
}

// AutoPromotion reports whether Kargo's controller created p by itself: it
// carries no create-actor, or one starting with "controller:".
func (p *Promotion) AutoPromotion() bool {
	actor, ok := p.Annotations[CreateActorAnnotation]
	return !ok || strings.HasPrefix(actor, "controller:")
}

// Terminal reports whether p has ended: Succeeded, Failed, Errored or
// Aborted, or any phase Kargo does not define yet; Kargo never moves a
// Promotion out of these.
func (p *Promotion) Terminal() bool {
	// The unfinished phases are named, not the finished ones: a finished
	// phase that a later Kargo adds must not be cached for ever.
	switch p.Phase {
	case "", "Pending", "Running":
		return false
	}
	return true
}

// PromotionList is a list of Promotions in the mirror's form.
type PromotionList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []Promotion
}

// DeepCopyObject implements runtime.Object.
func (l *PromotionList) DeepCopyObject() runtime.Object {
	c := &PromotionList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&c.ListMeta)
	c.Items = make([]Promotion, len(l.Items))
	for i := range l.Items {
		c.Items[i] = *l.Items[i].DeepCopyObject().(*Promotion)
	}
	return c
}

func promotionFromMap(obj map[string]any) *Promotion {
	return &Promotion{
		TypeMeta:   metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: "Promotion"},
		ObjectMeta: metaFromMap(obj, promotionKeys, nil),
		Stage:      str(obj, "spec", "stage"),
		Phase:      str(obj, "status", "phase"),
	}
}

func promotionKeys(key string) bool {
	return key == CreateActorAnnotation || key == AbortAnnotation || strings.HasPrefix(key, OwnPrefix)
}

// A page of Promotions as a server-side table. Kargo's Promotion CRD prints
// the columns Stage (spec.stage) and Phase (status.phase), and a table row
// can carry the object's metadata alone: everything kargo-latch reads of a
// Promotion, at the size of its metadata rather than of the whole object
// (5-10 KB of steps and step state for a finished one). It is how kubectl
// get pages through objects.
const promotionTableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io"

// ErrNoPromotionTable says that a page of Promotions did not come as a
// table with Kargo's Stage and Phase columns: a Kargo whose CRD prints
// other columns, or a server that cannot make tables. The caller reads the
// Promotions whole instead.
var ErrNoPromotionTable = errors.New("the API server did not list Promotions as a table with Stage and Phase columns")

// PromotionPage is one page of a namespace's Promotions.
type PromotionPage struct {
	Items []*Promotion
	// ResourceVersion and Continue are the list's: the snapshot the pages
	// belong to, and the token of the next page (empty on the last).
	ResourceVersion, Continue string
}

// ListPromotionTable reads one page of the Promotions of namespace ns (all
// when empty) through client, a REST client of Kargo's API group (such as
// NewStageClient's), as a table of their metadata, stage and phase. opts'
// limit, continue, resourceVersion and selectors apply as to any list.
func ListPromotionTable(ctx context.Context, client rest.Interface, ns string, opts metav1.ListOptions) (*PromotionPage, error) {
	body, err := client.Get().Namespace(ns).Resource(PromotionsResource.Resource).
		SetHeader("Accept", promotionTableAccept).
		VersionedParams(&opts, metav1.ParameterCodec).
		Param("includeObject", string(metav1.IncludeMetadata)).
		Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	return DecodePromotionTable(body)
}

// promotionTable is the part of a meta.k8s.io/v1 Table of Promotions that
// kargo-latch reads: each row's cells and the metadata it carries.
type promotionTable struct {
	Kind     string `json:"kind"`
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
		Continue        string `json:"continue"`
	} `json:"metadata"`
	ColumnDefinitions []struct {
		Name string `json:"name"`
	} `json:"columnDefinitions"`
	Rows []struct {
		// Cells stay raw: only two of the six are read.
		Cells  []json.RawMessage `json:"cells"`
		Object struct {
			Metadata promotionMeta `json:"metadata"`
		} `json:"object"`
	} `json:"rows"`
}

// promotionMeta is the metadata a table row carries, less what kargo-latch
// does not read (managedFields, ownerReferences, finalizers): those are
// skipped by the decoder, never allocated.
type promotionMeta struct {
	Name              string            `json:"name"`
	Namespace         string            `json:"namespace"`
	UID               types.UID         `json:"uid"`
	ResourceVersion   string            `json:"resourceVersion"`
	CreationTimestamp metav1.Time       `json:"creationTimestamp"`
	DeletionTimestamp *metav1.Time      `json:"deletionTimestamp"`
	Labels            map[string]string `json:"labels"`
	Annotations       map[string]string `json:"annotations"`
}

// DecodePromotionTable reads a page of Promotions listed as a table with
// their metadata (ListPromotionTable). It fails with ErrNoPromotionTable
// when the body is no table, or one without the Stage and Phase columns.
func DecodePromotionTable(body []byte) (*PromotionPage, error) {
	var t promotionTable
	if err := json.Unmarshal(body, &t); err != nil {
		return nil, fmt.Errorf("decoding a table of Promotions: %w", err)
	}
	stageCol, phaseCol := -1, -1
	for i, c := range t.ColumnDefinitions {
		switch {
		case strings.EqualFold(c.Name, "Stage"):
			stageCol = i
		case strings.EqualFold(c.Name, "Phase"):
			phaseCol = i
		}
	}
	if t.Kind != "Table" || stageCol < 0 || phaseCol < 0 {
		return nil, ErrNoPromotionTable
	}
	page := &PromotionPage{
		Items:           make([]*Promotion, 0, len(t.Rows)),
		ResourceVersion: t.Metadata.ResourceVersion,
		Continue:        t.Metadata.Continue,
	}
	for _, row := range t.Rows {
		md := row.Object.Metadata
		if md.Name == "" {
			return nil, fmt.Errorf("decoding a table of Promotions: a row without the object's metadata: %w", ErrNoPromotionTable)
		}
		page.Items = append(page.Items, &Promotion{
			TypeMeta: metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: "Promotion"},
			ObjectMeta: metav1.ObjectMeta{
				Name: md.Name, Namespace: md.Namespace, UID: md.UID, ResourceVersion: md.ResourceVersion,
				CreationTimestamp: md.CreationTimestamp, DeletionTimestamp: md.DeletionTimestamp,
				Labels:      kept(md.Labels, promotionKeys),
				Annotations: kept(md.Annotations, promotionKeys),
			},
			Stage: cell(row.Cells, stageCol),
			Phase: cell(row.Cells, phaseCol),
		})
	}
	return page, nil
}

// cell is a table cell as a string; empty when the row is short, or the
// object lacks the column's field (the server sends null), or the cell is
// no string.
func cell(cells []json.RawMessage, i int) string {
	var s string
	if i < len(cells) {
		_ = json.Unmarshal(cells[i], &s)
	}
	return s
}

// kept is m with only the keys keep accepts; nil when none is.
func kept(m map[string]string, keep func(string) bool) map[string]string {
	var out map[string]string
	for k, v := range m {
		if !keep(k) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}
