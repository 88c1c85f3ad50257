package kargo

import (
	"context"
	"errors"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/framer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	sjson "sigs.k8s.io/json"
)

// StageList is a list of Stages in the mirror's form.
type StageList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []Stage
}

// DeepCopyObject implements runtime.Object.
func (l *StageList) DeepCopyObject() runtime.Object {
	c := &StageList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&c.ListMeta)
	c.Items = make([]Stage, len(l.Items))
	for i := range l.Items {
		c.Items[i] = *l.Items[i].DeepCopy()
	}
	return c
}

// NewStageClient makes a REST client for Stages whose lists and watch
// events decode straight into the mirror (see stagejson.go), for
// StageListWatch. cfg's rate limiter, transport wrappers and identity carry
// over.
func NewStageClient(cfg *rest.Config) (rest.Interface, error) {
	c := rest.CopyConfig(cfg)
	gv := GroupVersion
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	c.NegotiatedSerializer = stageSerializer{}
	return rest.RESTClientFor(c)
}

// StageListWatch lists and watches the Stages of namespace ns (all when
// empty) with a client from NewStageClient. Watch-list (the initial events
// streamed on the watch) works as with any client.
func StageListWatch(client rest.Interface, ns string) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list := &StageList{}
			err := client.Get().Namespace(ns).Resource(StagesResource.Resource).
				VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(list)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch = true
			return client.Get().Namespace(ns).Resource(StagesResource.Resource).
				VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
		},
	}
}

// stageSerializer is the one media type of a Stage client: JSON, decoded by
// stageCodec, streamed as watch events.
type stageSerializer struct{}

func (stageSerializer) SupportedMediaTypes() []runtime.SerializerInfo {
	return []runtime.SerializerInfo{{
		MediaType:        runtime.ContentTypeJSON,
		MediaTypeType:    "application",
		MediaTypeSubType: "json",
		EncodesAsText:    true,
		Serializer:       stageCodec{},
		StreamSerializer: &runtime.StreamSerializerInfo{
			EncodesAsText: true,
			Serializer:    watchEventCodec{},
			Framer:        jsonFramer{},
		},
	}}
}

func (stageSerializer) EncoderForVersion(e runtime.Encoder, _ runtime.GroupVersioner) runtime.Encoder {
	return e
}

func (stageSerializer) DecoderToVersion(d runtime.Decoder, _ runtime.GroupVersioner) runtime.Decoder {
	return d
}

// stageCodec decodes Stages, StageLists and the Status of an error; it
// encodes nothing (the Stage client only reads).
type stageCodec struct{}

func (stageCodec) Decode(data []byte, _ *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	doc, err := decodeStageDoc(data)
	if err != nil {
		return nil, nil, err
	}
	switch doc.Kind {
	case "Status":
		status := &metav1.Status{}
		if err := sjson.UnmarshalCaseSensitivePreserveInts(data, status); err != nil {
			return nil, nil, err
		}
		return status, &schema.GroupVersionKind{Version: "v1", Kind: "Status"}, nil
	case "StageList":
		list, ok := into.(*StageList)
		if !ok {
			list = &StageList{}
		}
		list.TypeMeta = metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: "StageList"}
		list.ResourceVersion, list.Continue = doc.Metadata.ResourceVersion, doc.Metadata.Continue
		list.RemainingItemCount = doc.Metadata.RemainingItems
		list.Items = make([]Stage, len(doc.Items))
		for i := range doc.Items {
			list.Items[i] = *doc.Items[i].stage()
		}
		return list, ptr(GroupVersion.WithKind("StageList")), nil
	}
	if _, list := into.(*StageList); list {
		// Read as a Stage, an empty list would empty the cache: every
		// Stage "deleted".
		return nil, nil, fmt.Errorf("decoding a list of Stages: the response is of kind %q", doc.Kind)
	}
	if doc.Kind != "" && doc.Kind != "Stage" {
		return nil, nil, fmt.Errorf("decoding a Stage: the response is of kind %q", doc.Kind)
	}
	return doc.stage(), ptr(GroupVersion.WithKind("Stage")), nil
}

func (stageCodec) Encode(runtime.Object, io.Writer) error {
	return errors.New("the Stage client only reads")
}

func (stageCodec) Identifier() runtime.Identifier { return "kargo-latch-stage-json" }

// watchEventCodec decodes the frames of a watch into metav1.WatchEvent; the
// REST client then decodes each event's object with stageCodec.
type watchEventCodec struct{}

func (watchEventCodec) Decode(data []byte, _ *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	event, ok := into.(*metav1.WatchEvent)
	if !ok {
		return nil, nil, fmt.Errorf("a watch frame decodes only into a WatchEvent, not %T", into)
	}
	if err := sjson.UnmarshalCaseSensitivePreserveInts(data, event); err != nil {
		return nil, nil, err
	}
	return event, &schema.GroupVersionKind{Version: "v1", Kind: "WatchEvent"}, nil
}

func (watchEventCodec) Encode(runtime.Object, io.Writer) error {
	return errors.New("the Stage client only reads")
}

func (watchEventCodec) Identifier() runtime.Identifier { return "kargo-latch-watch-event-json" }

// jsonFramer splits a watch stream into its JSON documents.
type jsonFramer struct{}

func (jsonFramer) NewFrameReader(r io.ReadCloser) io.ReadCloser { return framer.NewJSONFramedReader(r) }

func (jsonFramer) NewFrameWriter(w io.Writer) io.Writer { return w }

func ptr[T any](v T) *T { return &v }
