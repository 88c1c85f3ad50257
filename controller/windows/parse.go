package windows

import (
	"encoding/json"
	"errors"
	"fmt"

	sigsjson "sigs.k8s.io/json"
)

// ParseWindow reads one item of spec.promotionWindows from an unstructured
// object (what a dynamic client or informer hands out: map[string]any,
// []any, string, bool, int64, float64). It never panics: anything that is
// not a window as Kargo's CRD has it is an error naming the field.
//
// Field names are matched case-sensitively, as the API server does; fields
// Kargo may add later are ignored, except `disabled: true` (see
// ErrDisabled).
func ParseWindow(item any) (Window, error) {
	raw, ok := item.(map[string]any)
	if !ok {
		return Window{}, &WindowError{Field: "(window)", Err: fmt.Errorf("not an object but %T", item)}
	}
	name, _ := raw["name"].(string)
	if disabled, _ := raw["disabled"].(bool); disabled {
		return Window{}, &WindowError{Window: name, Field: "disabled", Err: ErrDisabled}
	}
	data, err := json.Marshal(raw)
	if err != nil {
		return Window{}, &WindowError{Window: name, Field: "(window)", Err: err}
	}
	var w Window
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(data, &w); err != nil {
		field := "(window)"
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			field = typeErr.Field
		}
		return Window{}, &WindowError{Window: name, Field: field, Err: err}
	}
	return w, nil
}

// ParseWindows reads spec.promotionWindows of an unstructured ProjectConfig or
// ClusterConfig. A window that cannot be read is left out and reported (its
// name, or its position as "#3"), and the others are still returned. An
// object without the field has no windows.
func ParseWindows(obj map[string]any) ([]Window, []error) {
	spec, ok := obj["spec"].(map[string]any)
	if !ok {
		return nil, nil
	}
	list, present := spec["promotionWindows"]
	if !present || list == nil {
		return nil, nil
	}
	items, ok := list.([]any)
	if !ok {
		return nil, []error{&WindowError{Field: "spec.promotionWindows", Err: fmt.Errorf("not a list but %T", list)}}
	}
	var out []Window
	var errs []error
	for i, item := range items {
		w, err := ParseWindow(item)
		if err != nil {
			var we *WindowError
			if errors.As(err, &we) && we.Window == "" {
				we.Window = fmt.Sprintf("#%d", i)
			}
			errs = append(errs, err)
			continue
		}
		out = append(out, w)
	}
	return out, errs
}
