package verification

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/kargo-latch/kargo-latch/latch"
)

// object reads a YAML fixture.
func object(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return &unstructured.Unstructured{Object: m}
}

const collectionID = "0c9f4b7a6d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a"

// stageYAML is a Stage the way Kargo keeps it: two Warehouses, vars, args
// overriding template args, metadata, and a current collection of two
// Freight not yet verified.
const stageYAML = `
apiVersion: kargo.akuity.io/v1alpha1
kind: Stage
metadata: {name: test, namespace: demo}
spec:
  requestedFreight:
  - origin: {kind: Warehouse, name: images}
    sources: {direct: true}
  - origin: {kind: Warehouse, name: config}
    sources: {direct: true}
  vars:
  - {name: repo, value: ghcr.io/example/app}
  - {name: tag, value: '${{ imageFrom(vars.repo).Tag }}'}
  - {name: url, value: 'http://checker.${{ ctx.project }}.svc/${{ ctx.stage }}/${{ vars.tag }}'}
  verification:
    analysisTemplates:
    - {name: web-check}
    - {kind: ClusterAnalysisTemplate, name: shared-check}
    - {kind: AnalysisTemplate, name: error-rate}
    analysisRunMetadata:
      labels: {team: payments, kargo.akuity.io/stage: overridden}
      annotations: {owner: sre}
    args:
    - {name: url, value: '${{ vars.url }}'}
    - {name: commit, value: '${{ commitFrom("https://github.com/example/config.git").ID }}'}
    - {name: unused, value: ignored}
status:
  lastPromotion: {name: test.01jabc.1234567}
  freightHistory:
  - id: ` + collectionID + `
    items:
      Warehouse/images:
        name: f-images
        origin: {kind: Warehouse, name: images}
        images:
        - {repoURL: ghcr.io/example/app, tag: v1.4.2, digest: 'sha256:aaa'}
      Warehouse/config:
        name: f-config
        origin: {kind: Warehouse, name: config}
        commits:
        - {repoURL: 'https://github.com/example/config', id: 9f8e7d6c, branch: main}
  - id: older
    items: {}
`

const webCheckYAML = `
apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata: {name: web-check, namespace: demo}
spec:
  args:
  - name: url
  - {name: commit, value: none}
  metrics:
  - name: web
    interval: 5s
    count: 3
    successCondition: result == "ok"
    provider:
      web: {url: '{{args.url}}', jsonPath: '{$.status}'}
  dryRun:
  - metricName: web
`

const sharedCheckYAML = `
apiVersion: argoproj.io/v1alpha1
kind: ClusterAnalysisTemplate
metadata: {name: shared-check}
spec:
  args:
  - name: token
    valueFrom: {secretKeyRef: {name: checker, key: token}}
  - name: url
  metrics:
  - name: shared
    provider:
      web: {url: '{{args.url}}/shared', headers: [{key: Authorization, value: '{{args.token}}'}]}
  measurementRetention:
  - {metricName: shared, limit: 5}
`

const errorRateYAML = `
apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata: {name: error-rate, namespace: demo}
spec:
  args:
  - {name: commit}
  metrics:
  - name: errors
    failureLimit: 1
    provider:
      prometheus: {address: 'http://prometheus:9090', query: 'sum(rate(errors[1m]))'}
`

const imagesWarehouseYAML = `
apiVersion: kargo.akuity.io/v1alpha1
kind: Warehouse
metadata: {name: images, namespace: demo}
spec:
  subscriptions:
  - image: {repoURL: ghcr.io/example/app}
  - chart: {repoURL: 'oci://ghcr.io/example/charts/app'}
`

const configWarehouseYAML = `
apiVersion: kargo.akuity.io/v1alpha1
kind: Warehouse
metadata: {name: config, namespace: demo}
spec:
  subscriptions:
  - git: {repoURL: 'https://github.com/Example/config.git'}
`

func freightObject(t *testing.T, name, uid string) *unstructured.Unstructured {
	t.Helper()
	return object(t, `
apiVersion: kargo.akuity.io/v1alpha1
kind: Freight
metadata: {name: `+name+`, namespace: demo, uid: `+uid+`}
origin: {kind: Warehouse, name: x}
`)
}

// fullInput is the input of the golden build.
func fullInput(t *testing.T) Input {
	t.Helper()
	src, err := ParseStage(object(t, stageYAML))
	if err != nil {
		t.Fatalf("ParseStage: %v", err)
	}
	return Input{
		Source: src,
		Templates: map[TemplateRef]*unstructured.Unstructured{
			{Kind: KindAnalysisTemplate, Name: "web-check"}:           object(t, webCheckYAML),
			{Kind: KindClusterAnalysisTemplate, Name: "shared-check"}: object(t, sharedCheckYAML),
			{Kind: KindAnalysisTemplate, Name: "error-rate"}:          object(t, errorRateYAML),
		},
		Freight: []*unstructured.Unstructured{
			freightObject(t, "f-images", "uid-images"),
			freightObject(t, "f-config", "uid-config"),
		},
		Warehouses: map[string]*unstructured.Unstructured{
			"images": object(t, imagesWarehouseYAML),
			"config": object(t, configWarehouseYAML),
		},
		Name:       latch.RunName("test", collectionID, "test.01jabc.1234567", 1),
		InstanceID: "",
	}
}

// reasonOf returns the Reason of an *Unsupported error, or "" (and fails the
// test) for any other non-nil error.
func reasonOf(t *testing.T, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	var u *Unsupported
	if !errors.As(err, &u) {
		t.Fatalf("error %v is not *Unsupported", err)
	}
	return u.Reason
}
