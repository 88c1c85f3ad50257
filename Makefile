# kargo-latch — the two commands a newcomer needs are `make demo` and
# `make test`. Everything else here is what they are made of.

SHELL         := /bin/bash
GO            ?= go
BIN           := $(CURDIR)/bin
GOLANGCI_LINT := $(BIN)/golangci-lint
GOLANGCI_VERSION := v2.15.0
# Packages that run with the race detector (the issue's list, plus the rest
# of the operator's own code).
RACE_PKGS     := ./latch/... ./queue/... ./controller/... ./kargo/... ./metrics/... ./api/... ./hack/... ./cli/...
PROMTOOL      ?= promtool
FUZZTIME      ?= 30s
# The failure-injection tests of docs/reliability.md: SIGKILL loops, leader
# loss, an API server outage, and the bad-input corpus.
RELIABILITY   := TestReliabilityKillScenario|TestReliabilityLeaderLoss|TestMalformedKargoObjectsAreRefused|TestExactlyOncePauseAcrossKills|TestLeaderElection|TestAPIServerOutage|TestReliabilityAPIServerOutage|TestRestartKeepsLatch|TestBadInputIsReportedAndHarmless|TestPauseBadInput|TestPauseCreatedAndDeletedAtOnce|TestStageDeletedWhilePaused|TestNamespaceDeletedMidScenario|TestHugeAnnotations|TestMarkVerifiedExactlyOnceAcrossKills

.PHONY: all build test unit fuzz rules e2e test-reliability lint cluster demo bench generate clean

all: build

build:
	$(GO) build -o $(BIN)/kargo-latch ./cmd/kargo-latch

## test: everything CI runs: lint, unit tests with -race, bounded fuzzing,
## and the acceptance tests on a real kube-apiserver.
test: lint unit rules fuzz e2e test-reliability

unit:
	$(GO) test -race -count=1 $(RACE_PKGS) ./cmd/...

fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzStep$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=2s ./latch/
	$(GO) test -run='^$$' -fuzz='^FuzzDecode$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=2s ./latch/

e2e: cluster
	$(GO) test -race -count=1 -timeout=15m -skip '^($(RELIABILITY))$$' ./test/...

## test-reliability: the failure-injection suite (docs/reliability.md); the
## fuzzing of `make fuzz` belongs to it too.
test-reliability: cluster
	$(GO) test -race -count=1 -timeout=20m -run '^($(RELIABILITY))$$' -v ./test/e2e | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|_test.go:[0-9]+: '; exit $${PIPESTATUS[0]}

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

## rules: check the alert rules and run their unit tests with promtool.
rules:
	@command -v $(PROMTOOL) >/dev/null || (echo "promtool is missing: apt-get install prometheus" && exit 1)
	$(PROMTOOL) check rules manifests/prometheus/rules.yaml
	cd manifests/prometheus && $(PROMTOOL) test rules rules_test.yaml

## generate: regenerate the PrometheusRule from the plain rules file.
generate:
	$(GO) run ./hack/prometheusrule

lint: $(GOLANGCI_LINT)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GOLANGCI_LINT) run ./...

$(GOLANGCI_LINT):
	@echo ">> Installing golangci-lint $(GOLANGCI_VERSION) into bin/ (first run only)..."
	GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)

## bench: measure reaction latency, a project-wide pause, memory, cold
## start and steady-state writes against baselines from the same run, and
## print a table (docs/performance.md). BENCH_STAGES=10000 for full scale.
BENCH_STAGES ?= 1000
bench: $(APISERVER) build
	$(GO) run ./test/bench -stages $(BENCH_STAGES)

## demo: start a local test cluster, run the operator, and play a scenario.
demo: $(APISERVER) build
	$(GO) run ./test/demo

clean:
	rm -rf $(BIN)
