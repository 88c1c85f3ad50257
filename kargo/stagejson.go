package kargo

import (
	"bytes"
	"encoding/json"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	sjson "sigs.k8s.io/json"

	"github.com/kargo-latch/kargo-latch/latch"
)

// A busy Stage's status is about 64 KB of JSON, of which kargo-latch reads
// a few hundred bytes. Decoding it into maps (as the dynamic client does)
// allocates every key and value of it, about 230 KB a Stage (seven times
// what these documents allocate; BenchmarkStageDecode): at 10,000
// Stages that is most of a cold start's CPU, on a machine whose API server
// needs the same cores to serve the list. The documents below name only
// what the mirror keeps, so that encoding/json skips the rest without
// allocating it, and read what they keep into the mirror directly.
//
// They decode as the API machinery does (sigs.k8s.io/json: keys match case
// sensitively) and read as tolerantly as stageFromMap: a mistyped field
// reads as absent (the decoder reports it and decodes the rest), and the
// opaque health output of any other shape means "no per-App data". One
// difference cannot arise from an API server: Kargo's CRD schema makes
// status and status.lastPromotion objects, so they are not checked to be.

// stageDoc is the JSON of a Stage, a StageList (Items) or a Status (the
// error a watch sends), told apart by Kind.
type stageDoc struct {
	Kind     string       `json:"kind"`
	Metadata metaDoc      `json:"metadata"`
	Spec     stageSpecDoc `json:"spec"`
	Status   *statusDoc   `json:"status"`
	Items    []stageDoc   `json:"items"`
}

type metaDoc struct {
	Name              string     `json:"name"`
	Namespace         string     `json:"namespace"`
	UID               string     `json:"uid"`
	ResourceVersion   string     `json:"resourceVersion"`
	Continue          string     `json:"continue"`
	CreationTimestamp string     `json:"creationTimestamp"`
	DeletionTimestamp string     `json:"deletionTimestamp"`
	Labels            ownStrings `json:"labels"`
	Annotations       ownStrings `json:"annotations"`
	RemainingItems    *int64     `json:"remainingItemCount"`
}

type stageSpecDoc struct {
	Verification present `json:"verification"`
}

type statusDoc struct {
	CurrentPromotion struct {
		Name string `json:"name"`
	} `json:"currentPromotion"`
	Health struct {
		Status string       `json:"status"`
		Output unreadOutput `json:"output"`
	} `json:"health"`
	LastPromotion  *lastPromotionDoc `json:"lastPromotion"`
	FreightHistory newestCollection  `json:"freightHistory"`
	Holds          holdsDoc          `json:"effectiveAutoPromotionHolds"`
}

type lastPromotionDoc struct {
	Name       string `json:"name"`
	FinishedAt string `json:"finishedAt"`
	Status     struct {
		Phase string `json:"phase"`
		// Only counted: each entry decodes to nothing.
		HealthChecks []struct{} `json:"healthChecks"`
	} `json:"status"`
	Freight struct {
		Name string `json:"name"`
	} `json:"freight"`
}

// unreadOutput is status.health.output left unread: the mirror reads it
// only while the record still reads per-App health (latch.ReadsApps), which
// the annotations, decoded in the same pass, tell. It refers to the data
// being decoded and must be read before the decode returns.
type unreadOutput []byte

func (u *unreadOutput) UnmarshalJSON(b []byte) error {
	*u = b
	return nil
}

// apps reads the output's Apps (nil for any other shape), and how many
// entries it has.
func (u unreadOutput) apps() ([]latch.App, int) {
	var checks []healthCheck
	if len(u) == 0 || u[0] != '[' || unmarshal(u, &checks) != nil {
		return nil, 0
	}
	return appsFromChecks(checks), len(checks)
}

// healthCheck is one entry of status.health.output as the argocd-update
// check writes it; ApplicationStatuses is nil when the entry has none.
type healthCheck struct {
	ApplicationStatuses appList `json:"applicationStatuses"`
}

// appList is an applicationStatuses array; listed is false when the check
// has none, or something else in its place (a string, an object).
type appList struct {
	apps   []appDoc
	listed bool
}

func (l *appList) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '[' {
		return nil
	}
	l.listed = true
	return unmarshal(b, &l.apps)
}

// appDoc is one App of a health check. Kargo writes Name and Namespace
// capitalised (its Go struct has no JSON tags there); the lower-case spelling
// is read too, as stageFromMap does.
type appDoc struct {
	Name      string `json:"Name"`
	LowerName string `json:"name"`
	Namespace string `json:"Namespace"`
	LowerNS   string `json:"namespace"`
	Health    struct {
		Status string `json:"status"`
	} `json:"health"`
	Sync struct {
		Status string `json:"status"`
	} `json:"sync"`
}

// collectionDoc is one entry of freightHistory.
type collectionDoc struct {
	ID                  string                   `json:"id"`
	Items               map[string]freightRefDoc `json:"items"`
	VerificationHistory newestVerificationDoc    `json:"verificationHistory"`
}

type freightRefDoc struct {
	Name string `json:"name"`
}

// present records whether a field is set to anything but null.
type present bool

func (p *present) UnmarshalJSON(b []byte) error {
	*p = present(!bytes.Equal(b, []byte("null")))
	return nil
}

// ownStrings keeps the string entries of a labels or annotations object
// that the mirror keeps: kargo-latch's own, and the bookmark that ends a
// watch's initial events (the reflector reads it).
type ownStrings map[string]string

func (o *ownStrings) UnmarshalJSON(b []byte) error {
	var all map[string]json.RawMessage
	if err := unmarshal(b, &all); err != nil || all == nil {
		return nil //nolint:nilerr // mistyped: absent, as stageFromMap reads it
	}
	for k, raw := range all {
		if !ownKeys(k) && k != metav1.InitialEventsAnnotationKey {
			continue
		}
		var s string
		if len(raw) == 0 || raw[0] != '"' || unmarshal(raw, &s) != nil {
			continue
		}
		if *o == nil {
			*o = ownStrings{}
		}
		(*o)[k] = stageValue(k, s)
	}
	return nil
}

// newestCollection decodes only the first entry of freightHistory (the
// newest); the up to nine older ones are skipped unread.
type newestCollection struct{ first *collectionDoc }

func (n *newestCollection) UnmarshalJSON(b []byte) error {
	n.first = decodeFirst[collectionDoc](b)
	return nil
}

// newestVerificationDoc decodes only the first entry of a
// verificationHistory (the newest).
type newestVerificationDoc struct {
	first *verificationDoc
}

// verificationDoc is what the mirror keeps of a VerificationInfo.
type verificationDoc struct {
	ID          string `json:"id"`
	Phase       string `json:"phase"`
	Message     string `json:"message"`
	Actor       string `json:"actor"`
	AnalysisRun struct {
		Name string `json:"name"`
	} `json:"analysisRun"`
}

func (n *newestVerificationDoc) UnmarshalJSON(b []byte) error {
	n.first = decodeFirst[verificationDoc](b)
	return nil
}

// decodeFirst decodes the first element of a JSON array, reading no
// further; nil when b is not an array, is empty, or its first element is
// not an object.
func decodeFirst[T any](b []byte) *T {
	dec := sjson.NewDecoderCaseSensitivePreserveInts(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') || !dec.More() {
		return nil
	}
	var raw json.RawMessage
	if dec.Decode(&raw) != nil || len(raw) == 0 || raw[0] != '{' {
		return nil
	}
	var first T
	if unmarshal(raw, &first) != nil {
		return nil
	}
	return &first
}

// decodeStageDoc decodes data, keeping what a mistyped field leaves: that
// field reads as absent.
func decodeStageDoc(data []byte) (*stageDoc, error) {
	var doc stageDoc
	if err := unmarshal(data, &doc); err != nil {
		return nil, err
	}
	return &doc, nil
}

// unmarshal decodes as the API machinery does, and fails only on a syntax
// error: a value of the wrong type leaves its field as it was and the rest
// is decoded.
func unmarshal(data []byte, v any) error {
	err := sjson.UnmarshalCaseSensitivePreserveInts(data, v)
	if syntax, _ := sjson.SyntaxErrorOffset(err); syntax {
		return err
	}
	return nil
}

// stage turns a decoded Stage into the mirror, as stageFromMap does.
func (d *stageDoc) stage() *Stage {
	s := &Stage{
		TypeMeta:        metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: "Stage"},
		ObjectMeta:      d.Metadata.objectMeta(),
		HasVerification: bool(d.Spec.Verification),
	}
	state := s.takeState()
	if d.Status != nil {
		s.Status = d.Status.mirror(latch.ReadsApps(state))
	}
	return s
}

func (m *metaDoc) objectMeta() metav1.ObjectMeta {
	om := metav1.ObjectMeta{
		Name:            m.Name,
		Namespace:       m.Namespace,
		UID:             types.UID(m.UID),
		ResourceVersion: m.ResourceVersion,
		Labels:          m.Labels,
		Annotations:     m.Annotations,
	}
	if t := parseTime(m.CreationTimestamp); t != nil {
		om.CreationTimestamp = metav1.NewTime(*t)
	}
	if t := parseTime(m.DeletionTimestamp); t != nil {
		dt := metav1.NewTime(*t)
		om.DeletionTimestamp = &dt
	}
	return om
}

func (d *statusDoc) mirror(withApps bool) *StageStatus {
	st := &StageStatus{
		CurrentPromotion: d.CurrentPromotion.Name,
		Health:           d.Health.Status,
	}
	if withApps {
		st.Apps, st.HealthOutputs = d.Health.Output.apps()
	}
	if lp := d.LastPromotion; lp != nil {
		st.LastPromotion = &PromotionReference{
			Name:         lp.Name,
			Phase:        lp.Status.Phase,
			FinishedAt:   parseTime(lp.FinishedAt),
			Freight:      lp.Freight.Name,
			HealthChecks: len(lp.Status.HealthChecks),
		}
	}
	if c := d.FreightHistory.first; c != nil {
		st.FreightID = c.ID
		keys := make([]string, 0, len(c.Items))
		for k := range c.Items {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if name := c.Items[k].Name; name != "" {
				st.FreightNames = append(st.FreightNames, name)
			}
		}
		if v := c.VerificationHistory.first; v != nil {
			st.Verification = &VerificationInfo{ID: v.ID, Phase: v.Phase, Message: v.Message, Run: v.AnalysisRun.Name, Actor: v.Actor}
		}
	}
	st.Holds = d.Holds
	return st
}

// appsFromChecks is appsFromOutput for the decoded output: nil unless every
// check lists its Apps and every App has a name.
func appsFromChecks(checks []healthCheck) []latch.App {
	var apps []latch.App
	for _, check := range checks {
		if !check.ApplicationStatuses.listed {
			return nil
		}
		for _, app := range check.ApplicationStatuses.apps {
			var named bool
			apps, named = appendApp(apps, firstNonEmpty(app.Name, app.LowerName), firstNonEmpty(app.Namespace, app.LowerNS), app.Health.Status, app.Sync.Status)
			if !named {
				return nil
			}
		}
	}
	return apps
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
