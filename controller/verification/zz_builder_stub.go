package verification

// TEMPORARY: the builder's API as agreed, until the builder lands (merge).

import (
	"errors"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const (
	MarkerLabel            = "kargo-latch.io/started-by"
	MarkerValue            = "kargo-latch"
	StageLabel             = "kargo.akuity.io/stage"
	FreightCollectionLabel = "kargo.akuity.io/freight-collection"
)

type TemplateRef struct{ Kind, Name string }

type Source struct {
	Project, Stage string
	Templates      []TemplateRef
}

type Input struct {
	Source     *Source
	Templates  map[TemplateRef]*unstructured.Unstructured
	Freight    []*unstructured.Unstructured
	Name       string
	InstanceID string
}

type Unsupported struct{ Reason, Message string }

func (u *Unsupported) Error() string { return u.Message }

func ParseStage(stage *unstructured.Unstructured) (*Source, error) { return nil, errors.New("stub") }
func Build(in Input) (*unstructured.Unstructured, error)           { return nil, errors.New("stub") }
func ShortenLabelValue(v string) string                             { return v }
