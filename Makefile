# kargo-latch — the two commands a newcomer needs are `make demo` and
# `make test`. Everything else here is what they are made of.

SHELL         := /bin/bash
GO            ?= go
# The toolchain go.mod names: a release's digest depends on it, and the
# release tests refuse another. Go fetches it once through the module proxy
# when the local go differs (set GOTOOLCHAIN yourself to override).
ifndef GOTOOLCHAIN
GOTOOLCHAIN   := $(shell awk '/^toolchain /{print $$2}' go.mod)
endif
export GOTOOLCHAIN
BIN           := $(CURDIR)/bin
GOLANGCI_LINT := $(BIN)/golangci-lint
GOLANGCI_VERSION := v2.15.0
# Packages that run with the race detector (the issue's list, plus the rest
# of the operator's own code).
RACE_PKGS      = ./latch/... ./queue/... ./controller/... ./kargo/... ./metrics/... ./api/... $(HACK_PKGS) ./cli/...
# hack/image has no tests of its own: test/image tests it, without -race.
HACK_PKGS      = $(shell $(GO) list ./hack/... | grep -v '/hack/image')
# Prometheus 3: promtool runs the rule tests, the server the alert
# end-to-end tests. Both are built from the Go module test/tools/prometheus
# pins.
PROMTOOL      := $(BIN)/promtool
PROMETHEUS    := $(BIN)/prometheus
# Argo Rollouts' controller and its analysis CRDs (`make rollouts`): the
# e2e tests run its analysis controller.
ROLLOUTS      := $(BIN)/rollouts-controller $(BIN)/rollouts-crds
# Fuzzing budgets as execution counts, about 20-40 s each on 2 busy cores.
# A duration (-fuzztime=30s) can fail with a bare "context deadline
# exceeded" when it expires under load (golang/go#75804, unfixed in Go
# 1.26): a count has no deadline to race. FUZZTIME=30s overrides all three.
FUZZ_STEP     ?= 150000x
FUZZ_DECODE   ?= 1000000x
FUZZ_CODEC    ?= 120000x
# The failure-injection tests of docs/reliability.md: SIGKILL loops, leader
# loss, an API server outage, and the bad-input corpus.
RELIABILITY   := TestReliabilityKillScenario|TestReliabilityLeaderLoss|TestMalformedKargoObjectsAreRefused|TestExactlyOncePauseAcrossKills|TestLeaderElection|TestAPIServerOutage|TestReliabilityAPIServerOutage|TestRestartKeepsLatch|TestBadInputIsReportedAndHarmless|TestPauseBadInput|TestPauseCreatedAndDeletedAtOnce|TestStageDeletedWhilePaused|TestNamespaceDeletedMidScenario|TestHugeAnnotations|TestMarkVerifiedExactlyOnceAcrossKills|TestShardUpgradeSettlesPauseStatus|TestGarbageRecordIsKept|TestGarbageRecordKeptWithinTheAnnotationLimit|TestMarkVerifiedCutShortAfterItsPatchGetsOneEvent|TestCLIWaitGivesUpWhenTheAPIServerGoesAway|TestVerifyOnLatchExactlyOnceAcrossKills

.PHONY: all build test unit fuzz rules chart e2e test-reliability kargo-crds lint cluster demo bench generate clean prometheus rollouts image image-push image-test image-for-tests release browser

all: build

build:
	$(GO) build -o $(BIN)/kargo-latch ./cmd/kargo-latch

## test: everything CI runs: lint, unit tests with -race, bounded fuzzing,
## the image's tests, the acceptance tests on a real kube-apiserver, and the
## chart's Pods on a real node (e2e-node, as root).
test: kargo-crds lint unit rules chart fuzz image-test e2e test-reliability e2e-node

unit:
	$(GO) test -race -count=1 $(RACE_PKGS) ./cmd/...

fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzStep$$' -fuzztime=$(or $(FUZZTIME),$(FUZZ_STEP)) -fuzzminimizetime=2s ./latch/
	$(GO) test -run='^$$' -fuzz='^FuzzDecode$$' -fuzztime=$(or $(FUZZTIME),$(FUZZ_DECODE)) -fuzzminimizetime=2s ./latch/
	$(GO) test -run='^$$' -fuzz='^FuzzStageCodec$$' -fuzztime=$(or $(FUZZTIME),$(FUZZ_CODEC)) -fuzzminimizetime=2s ./kargo/

# The Helm tests run the operator from the image's binary: the image
# image-for-tests just wrote, which KARGO_LATCH_IMAGE hands them. Among the
# packages, test/demo plays the demo on the stand-in CRDs (about 20 s, beside
# the other packages), as a clone without Kargo's CRDs does: it runs
# bin/kargo-latch, which build writes.
e2e: kargo-crds browser cluster $(PROMETHEUS) $(PROMTOOL) $(BIN)/helm $(ROLLOUTS) image-for-tests build
	$(IMAGE_ENV) $(GO) test -race -count=1 -timeout=15m -skip '^($(RELIABILITY))$$' $(E2E_PKGS)

## test-reliability: the failure-injection suite (docs/reliability.md); the
## fuzzing of `make fuzz` belongs to it too.
test-reliability: kargo-crds cluster $(PROMETHEUS) $(ROLLOUTS)
	$(GO) test -race -count=1 -timeout=20m -run '^($(RELIABILITY))$$' -v ./test/e2e | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|_test.go:[0-9]+: '; exit $${PIPESTATUS[0]}

## image: build the operator's image with Go alone (hack/image): an OCI
## image layout in dist/image, and dist/kargo-latch-image-<version>.tar for
## `docker load` or `kind load image-archive`. linux/amd64 and linux/arm64,
## FROM scratch, nonroot; the same commit gives the same digest. VERSION
## defaults to the chart's appVersion, the tag the chart installs. The first
## run cross-compiles everything twice (minutes); later runs take seconds.
image:
	$(GO) run ./hack/image build $(if $(VERSION),-version $(VERSION))

## image-push: build the image as version TAG and push it to
## IMAGE=registry/name:TAG, with the docker config's credentials; or, with
## LAYOUT=dir (a release's dist/release-<version>/image), push that layout
## unchanged. Refused from a work tree with changes (ALLOW_DIRTY=1 allows
## it) or with a Go toolchain other than go.mod's.
image-push:
	@test -n "$(IMAGE)" || { echo "usage: make image-push IMAGE=registry/name:tag [LAYOUT=dist/release-<tag>/image]"; exit 2; }
	$(GO) run ./hack/image push -image $(IMAGE) $(if $(LAYOUT),-layout $(LAYOUT)) $(ALLOW_DIRTY_FLAG)

## image-test: the image's tests (test/image) on the image `make image`
## builds, of the chart's appVersion whatever VERSION says, written to
## dist/test/: it validates, its configs and files, it is the work tree's,
## two builds give one digest, a push and pull, the release bundle, the
## refusals to publish, the chart's default image. Without -race, which
## makes reading the layers back take minutes.
image-test: image-for-tests $(BIN)/helm
	$(IMAGE_ENV) $(GO) test -count=1 -timeout=15m ./test/image

## release: write the release of VERSION=vX.Y.Z into dist/release-VERSION/
## (replacing a previous release there): the image (layout and tarball),
## the chart packaged by helm with appVersion VERSION, an SBOM per platform
## (SPDX, from the Go build information in each binary) and checksums.txt;
## a commit gives the same files every time. Refused from a work tree with
## changes (ALLOW_DIRTY=1 allows it) or with a Go toolchain other than
## go.mod's. No network.
release: $(BIN)/helm
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=vX.Y.Z"; exit 2; }
	$(GO) run ./hack/image release -version $(VERSION) -helm $(BIN)/helm $(ALLOW_DIRTY_FLAG)

ALLOW_DIRTY_FLAG = $(if $(ALLOW_DIRTY),-allow-dirty)

# The tests' image, in dist/test/: the chart's appVersion (the tag the
# chart installs), never VERSION, and not `make image`'s dist/image.
TEST_IMAGE_DIR := $(CURDIR)/dist/test
image-for-tests:
	$(GO) run ./hack/image build -out $(TEST_IMAGE_DIR)
# What hands the tests that image.
IMAGE_ENV := KARGO_LATCH_IMAGE=$(TEST_IMAGE_DIR)/image
# The packages `make e2e` runs: test/image is `make image-test`'s.
E2E_PKGS = $(shell $(GO) list ./test/... | grep -v '/test/image$$')

## kargo-crds: the suites on a real API server (e2e, test-reliability,
## e2e-node) check every write against Kargo's real CRDs, which this
## project's CI has in ../shared/kargo-crds. Without them (a plain clone),
## say so in one line before anything is built; `make demo` needs none (it
## falls back to the stand-ins in test/crds). KARGO_CRDS_DIR names another
## folder; KARGO_LATCH_STAND_IN_CRDS=1 runs the suites on the stand-ins,
## which CI does not do (only the demo's test does).
kargo-crds:
	@if [ -n "$$KARGO_CRDS_DIR" ] || [ -d "$(CURDIR)/../shared/kargo-crds" ]; then exit 0; fi; \
	case "$$(echo "$$KARGO_LATCH_STAND_IN_CRDS" | tr A-Z a-z)" in ""|0|false|no) ;; *) exit 0;; esac; \
	echo "make $(or $(MAKECMDGOALS),test) needs Kargo's real CRDs: copy github.com/akuity/kargo's charts/kargo/resources/crds into $$(cd $(CURDIR)/.. && pwd)/shared/kargo-crds, or set KARGO_CRDS_DIR to that folder (make demo needs none)"; exit 2

## cluster: build kube-apiserver and kube-controller-manager v1.37.2 and
## etcd v3.7.0 from Go modules into bin/, only when missing.
cluster: $(BIN)/kube-apiserver $(BIN)/kube-controller-manager $(BIN)/etcd

# The demo and the bench need no kube-controller-manager.
APISERVER := $(BIN)/kube-apiserver $(BIN)/etcd

$(BIN)/kube-apiserver:
	@echo ">> Building kube-apiserver v1.37.2 from Go modules into bin/ (first run only; about 4-8 minutes on 2 cores)..."
	cd test/tools && $(GO) build -v -o $(BIN)/kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver 2>&1 | \
		awk '{ n++; if (n % 100 == 0) printf("   ... %d packages compiled\n", n); fflush() } END { printf("   ... done (%d packages)\n", n) }'
	@test -x $@ || (echo "building kube-apiserver failed; run: cd test/tools && go build k8s.io/kubernetes/cmd/kube-apiserver" && exit 1)

# Built after kube-apiserver, whose compiled packages it mostly shares.
$(BIN)/kube-controller-manager: $(BIN)/kube-apiserver
	@echo ">> Building kube-controller-manager v1.37.2 from Go modules into bin/ (first run only; about 1-3 minutes after kube-apiserver)..."
	cd test/tools && $(GO) build -v -o $(BIN)/kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager 2>&1 | \
		awk '{ n++; if (n % 100 == 0) printf("   ... %d packages compiled\n", n); fflush() } END { printf("   ... done (%d packages)\n", n) }'
	@test -x $@ || (echo "building kube-controller-manager failed; run: cd test/tools && go build k8s.io/kubernetes/cmd/kube-controller-manager" && exit 1)

$(BIN)/etcd:
	@echo ">> Building etcd v3.7.0 from Go modules into bin/ (first run only; under a minute)..."
	cd test/tools && $(GO) build -o $(BIN)/etcd ./etcd

## browser: install Debian's chromium, which test/browser drives headless
## (chromedp) for the dashboard's e2e tests and the bench, only when missing.
# No recommends (a notification daemon, udev, printer set-up) but
# fonts-liberation, Arial's, Times' and Courier's metrics, which a page's
# sans-serif falls back to: screenshots show text as a person's browser does.
# KARGO_LATCH_CHROMIUM names another browser and skips the install. Debian's
# launcher complains on stderr when /dev/shm has two mounts: hidden.
browser:
	@missing=""; \
	[ -n "$$KARGO_LATCH_CHROMIUM" ] || command -v chromium >/dev/null || missing="$$missing chromium"; \
	test -d /usr/share/fonts/truetype/liberation || missing="$$missing fonts-liberation"; \
	if [ -n "$$missing" ]; then \
		echo ">> Installing$$missing from Debian (apt-get update, then apt-get install; about 110 MB, first run only, needs root)..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null || exit 1; \
		echo "   ... done: $$(chromium --version 2>/dev/null)"; \
	fi

## rollouts: build Argo Rollouts' controller (cmd/rollouts-controller) from
## its Go module into bin/, and copy its analysis CRDs into bin/rollouts-crds/,
## only when missing. The e2e tests run it with --controllers analysis: the
## real engine that runs the AnalysisRuns of a Stage's verification.
rollouts: $(ROLLOUTS)

ROLLOUTS_VERSION   := v1.10.2
# Its go.mod names go 1.26.10: Go fetches this toolchain once through the
# module proxy, for this build only.
ROLLOUTS_TOOLCHAIN := go1.27.3
ROLLOUTS_CRDS      := analysis-run-crd.yaml analysis-template-crd.yaml cluster-analysis-template-crd.yaml
# The module's directory in the module cache, downloaded when missing.
ROLLOUTS_MODULE_DIR = cd /tmp && GOTOOLCHAIN=$(ROLLOUTS_TOOLCHAIN) $(GO) mod download -json github.com/argoproj/argo-rollouts@$(ROLLOUTS_VERSION) | \
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'

# Built from a writable copy of the downloaded module: its go.mod's replace
# directives apply only when it is the main module.
$(BIN)/rollouts-controller:
	@echo ">> Building Argo Rollouts' rollouts-controller $(ROLLOUTS_VERSION) from Go modules into bin/ (first run only; about 6 minutes on 2 cores)..."
	@set -eo pipefail; dir=$$($(ROLLOUTS_MODULE_DIR)); \
	test -n "$$dir" || { echo "downloading github.com/argoproj/argo-rollouts@$(ROLLOUTS_VERSION) failed"; exit 1; }; \
	mkdir -p "$$(readlink -f $(BIN))"; src=$(BIN)/.rollouts-src; rm -rf $$src; mkdir -p $$src; \
	cp -r $$dir/. $$src/ && chmod -R u+w $$src; \
	cd $$src && GOTOOLCHAIN=$(ROLLOUTS_TOOLCHAIN) CGO_ENABLED=0 $(GO) build -v \
		-ldflags "-X github.com/argoproj/argo-rollouts/utils/version.version=$(ROLLOUTS_VERSION:v%=%)" \
		-o $@.tmp ./cmd/rollouts-controller 2>&1 | \
		awk '/[ :]/ { print; next } { n++; if (n % 100 == 0) printf("   ... %d packages compiled\n", n); fflush() } END { printf("   ... done (%d packages)\n", n) }'; \
	mv $@.tmp $@; rm -rf $$src
	@test -x $@ || (echo "building rollouts-controller failed; see the output above" && exit 1)

$(BIN)/rollouts-crds:
	@set -eo pipefail; dir=$$($(ROLLOUTS_MODULE_DIR)); \
	test -n "$$dir" || { echo "downloading github.com/argoproj/argo-rollouts@$(ROLLOUTS_VERSION) failed"; exit 1; }; \
	mkdir -p "$$(readlink -f $(BIN))"; rm -rf $@.tmp; mkdir -p $@.tmp; \
	for crd in $(ROLLOUTS_CRDS); do cp $$dir/manifests/crds/$$crd $@.tmp/; done; \
	chmod u+w $@.tmp/*; mv $@.tmp $@

## rules: check the alert rules and run their unit tests with promtool (and
## those of the shards example, with a KargoLatchDown per operator), and
## check the Grafana dashboard's queries against the metrics the operator
## exports (hack/dashboard).
rules: $(PROMTOOL)
	$(PROMTOOL) check rules manifests/prometheus/rules.yaml manifests/examples/shards-monitoring/rules.yaml
	cd manifests/prometheus && $(PROMTOOL) test rules rules_test.yaml
	cd manifests/examples/shards-monitoring && $(PROMTOOL) test rules rules_test.yaml
	cd hack/dashboard && $(GO) test -count=1 ./...

## prometheus: build promtool and prometheus (Prometheus 3) from Go modules
## into bin/, only when missing.
prometheus: $(PROMTOOL) $(PROMETHEUS)

# promtool and prometheus, built from Go modules only when missing, with the
# module's VERSION stamped in. The tag remove_all_sd leaves out every service
# discovery but static targets (all the tests use), which spares compiling the
# cloud SDKs; without the tag builtinassets the web UI is left out too: the
# tests use the HTTP API only.
$(PROMTOOL) $(PROMETHEUS):
	@echo ">> Building $(@F) (Prometheus 3) from Go modules into bin/ (first run only; about 2-5 minutes on 2 cores, the second of the two less)..."
	cd test/tools/prometheus && $(GO) mod download github.com/prometheus/prometheus && \
	version=$$(cat "$$($(GO) list -m -f '{{.Dir}}' github.com/prometheus/prometheus)/VERSION") && \
	$(GO) build -v -tags remove_all_sd -ldflags "-X github.com/prometheus/common/version.Version=$$version" \
		-o $@ github.com/prometheus/prometheus/cmd/$(@F) 2>&1 | \
		awk '{ n++; if (n % 100 == 0) printf("   ... %d packages compiled\n", n); fflush() } END { printf("   ... done (%d packages)\n", n) }'
	@test -x $@ || (echo "building $(@F) failed; run: cd test/tools/prometheus && go build github.com/prometheus/prometheus/cmd/$(@F)" && exit 1)

## chart: lint the Helm chart, with its defaults and with every opt-in on,
## and check that its generated files (README, CRD and rules copies) are
## current. The e2e suite renders it against the kustomize install,
## dry-runs every object on the apiserver and installs it.
chart: $(BIN)/helm
	$(BIN)/helm lint --strict charts/kargo-latch
	$(BIN)/helm lint --strict charts/kargo-latch --values charts/kargo-latch/ci/all-on-values.yaml
	$(GO) test -count=1 ./hack/chart ./hack/prometheusrule

# helm, built from the Go module test/tools/helm pins, with its version and
# the Kubernetes version of its client libraries stamped in as helm's own
# Makefile does (the default capabilities of `helm template` and `helm lint`).
$(BIN)/helm:
	@echo ">> Building helm from Go modules into bin/ (first run only; about 3-4 minutes on 2 cores)..."
	cd test/tools/helm && \
	helm=$$($(GO) list -m -f '{{.Version}}' helm.sh/helm/v3) && \
	kube_minor=$$($(GO) list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2) && \
	$(GO) build -ldflags "-X helm.sh/helm/v3/internal/version.version=$$helm \
		-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$$kube_minor \
		-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$$kube_minor" \
		-o $@ helm.sh/helm/v3/cmd/helm

## generate: regenerate the PrometheusRule and the chart's copy of the
## rules from the plain rules file, and the chart's README and CRD copies;
## and the Grafana dashboard (hack/dashboard, a module of its own).
generate:
	$(GO) run ./hack/prometheusrule
	$(GO) run ./hack/chart
	cd hack/dashboard && $(GO) run .

lint: $(GOLANGCI_LINT)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GOLANGCI_LINT) run ./...
	# The dashboard generator is a module of its own (Prometheus's parser
	# stays out of the operator's go.mod).
	cd hack/dashboard && $(GO) vet ./... && $(GOLANGCI_LINT) run ./...

$(GOLANGCI_LINT):
	@echo ">> Installing golangci-lint $(GOLANGCI_VERSION) into bin/ (first run only)..."
	GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)

## bench: measure reaction latency, a project-wide pause, memory, cold
## start and steady-state writes against baselines from the same run, and
## print a table (docs/performance.md). BENCH_STAGES=10000 for full scale;
## BENCH_PROMOTIONS finished Promotions per busy Stage (Kargo keeps 20);
## BENCH_SHARDS=2 runs one operator per shard; BENCH_SAMPLES failures and
## latches are timed (the baselines take twice as many): a p99 of 60 is
## their maximum, one outlier. BENCH_ONLY=reaction,verify runs only those
## phases after the set-up (project-wide, memory, shards are the others).
BENCH_STAGES ?= 1000
BENCH_PROMOTIONS ?= 20
BENCH_SHARDS ?= 0
BENCH_SAMPLES ?= 120
BENCH_ONLY ?=
bench: $(APISERVER) build browser
	$(GO) run ./test/bench -stages $(BENCH_STAGES) -promotions-per-stage $(BENCH_PROMOTIONS) -shards $(BENCH_SHARDS) -samples $(BENCH_SAMPLES) -only "$(BENCH_ONLY)"

## demo: start a local test cluster, run the operator, and play a scenario.
demo: $(APISERVER) $(ROLLOUTS) build
	$(GO) run ./test/demo

clean:
	rm -rf $(BIN) dist

# ---------------------------------------------------------------------------
# The node: the chart's Deployment of the image on a real kubelet
# (docs/development.md, "The node"). Everything it needs is here.
# ---------------------------------------------------------------------------

.PHONY: e2e-node node node-runtime

# Prometheus with the Kubernetes service discovery alone, for the node's
# Pods: bin/prometheus leaves every discovery out (remove_all_sd).
PROMETHEUS_KUBERNETES_SD := $(BIN)/prometheus-kubernetes-sd

## e2e-node: install the chart on a real node (kubelet, kube-scheduler,
## containerd, runc, CNI) next to the test cluster, with the image pulled
## from a registry on loopback, and check what only Pods show (test/e2enode).
## Needs root. The first run builds kubelet and kube-scheduler and installs
## Debian's containerd, runc and CNI plugins.
e2e-node: kargo-crds cluster node $(BIN)/helm $(PROMETHEUS_KUBERNETES_SD) image-for-tests
	@mkdir -p dist
	@echo ">> The suite's full output (a failure's details over several lines, a panic's stack): dist/e2e-node.log"
	$(IMAGE_ENV) KARGO_LATCH_E2E_NODE=1 $(GO) test -count=1 -timeout=20m -v ./test/e2enode 2>&1 | tee dist/e2e-node.log | grep -E '^ *(=== RUN|--- |ok|FAIL|PASS|panic)|_test.go:[0-9]+: |node: '; status=$${PIPESTATUS[0]}; \
	if [ $$status -ne 0 ]; then echo ">> make e2e-node failed: the full output is in dist/e2e-node.log"; fi; exit $$status

## node: build kubelet and kube-scheduler v1.37.2 into bin/ and install the
## container runtime, only what is missing.
node: $(BIN)/kubelet $(BIN)/kube-scheduler node-runtime

# Built after kube-apiserver, whose compiled packages they partly share.
$(BIN)/kubelet: $(BIN)/kube-apiserver
	@echo ">> Building kubelet v1.37.2 from Go modules into bin/ (first run only; about 1-3 minutes after kube-apiserver)..."
	cd test/tools && $(GO) build -v -o $(BIN)/kubelet k8s.io/kubernetes/cmd/kubelet 2>&1 | \
		awk '{ n++; if (n % 100 == 0) printf("   ... %d packages compiled\n", n); fflush() } END { printf("   ... done (%d packages)\n", n) }'
	@test -x $@ || (echo "building kubelet failed; run: cd test/tools && go build k8s.io/kubernetes/cmd/kubelet" && exit 1)

$(BIN)/kube-scheduler: $(BIN)/kube-apiserver
	@echo ">> Building kube-scheduler v1.37.2 from Go modules into bin/ (first run only; about 1-2 minutes after kube-apiserver)..."
	cd test/tools && $(GO) build -v -o $(BIN)/kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler 2>&1 | \
		awk '{ n++; if (n % 100 == 0) printf("   ... %d packages compiled\n", n); fflush() } END { printf("   ... done (%d packages)\n", n) }'
	@test -x $@ || (echo "building kube-scheduler failed; run: cd test/tools && go build k8s.io/kubernetes/cmd/kube-scheduler" && exit 1)

# Debian's containerd (with ctr), runc, CNI plugins (in /usr/lib/cni) and
# iproute2 (ip, for the Pods' bridge), installed only when missing, with one
# apt-get update. No iptables: the node has no masquerade, no port maps and
# no kube-proxy.
node-runtime:
	@missing=""; \
	{ command -v containerd && command -v ctr; } >/dev/null || missing="$$missing containerd"; \
	command -v runc >/dev/null || missing="$$missing runc"; \
	test -x /usr/lib/cni/bridge || missing="$$missing containernetworking-plugins"; \
	command -v ip >/dev/null || missing="$$missing iproute2"; \
	if [ -n "$$missing" ]; then \
		echo ">> Installing$$missing from Debian (apt-get update, then apt-get install; first run only, needs root)..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null || exit 1; \
		echo "   ... done: $$(containerd --version)"; \
	fi

# Built like bin/prometheus above.
$(PROMETHEUS_KUBERNETES_SD):
	@echo ">> Building prometheus with the Kubernetes service discovery into bin/ (first run only; about 1-3 minutes on 2 cores)..."
	cd test/tools/prometheus && $(GO) mod download github.com/prometheus/prometheus && \
	version=$$(cat "$$($(GO) list -m -f '{{.Dir}}' github.com/prometheus/prometheus)/VERSION") && \
	$(GO) build -v -tags remove_all_sd,enable_kubernetes_sd -ldflags "-X github.com/prometheus/common/version.Version=$$version" \
		-o $@ github.com/prometheus/prometheus/cmd/prometheus 2>&1 | \
		awk '{ n++; if (n % 100 == 0) printf("   ... %d packages compiled\n", n); fflush() } END { printf("   ... done (%d packages)\n", n) }'
	@test -x $@ || (echo "building $(@F) failed; run: cd test/tools/prometheus && go build -tags remove_all_sd,enable_kubernetes_sd github.com/prometheus/prometheus/cmd/prometheus" && exit 1)

# DEMO_NODE=1 make demo: the demo's stories with the chart's Pods on the
# node (test/demo/node.go), of the tests' image.
ifdef DEMO_NODE
demo: node $(BIN)/kube-controller-manager $(BIN)/helm image-for-tests
export KARGO_LATCH_IMAGE := $(TEST_IMAGE_DIR)/image
endif
