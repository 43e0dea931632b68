# kubectl-offload developer targets. `make help` lists them.
SHELL := /usr/bin/env bash
GO ?= go
MODULE := github.com/kubectl-offload/kubectl-offload
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.0.0-dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
BUILD_DATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS := -s -w \
	-X $(MODULE)/internal/buildinfo.Version=$(VERSION) \
	-X $(MODULE)/internal/buildinfo.Commit=$(COMMIT) \
	-X $(MODULE)/internal/buildinfo.BuildDate=$(BUILD_DATE)
GOLANGCI_LINT_VERSION := v2.15.0
GOVULNCHECK_VERSION := v1.1.4
GORELEASER_VERSION := v2.16.0

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-15s %s\n", $$1, $$2}'

.PHONY: demo
demo: ## Run the demo on two local clusters (installs everything it needs).
	@hack/demo.sh

.PHONY: test
test: ## Run every test: unit and end-to-end (installs everything it needs).
	@hack/test.sh

.PHONY: setup
setup: ## Install Debian packages and build the pinned control-plane tools into .cache/bin.
	@hack/setup.sh

.PHONY: build
build: ## Build kubectl-offload, its completion helper and offload-agent into bin/.
	@mkdir -p bin
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/kubectl-offload ./cmd/kubectl-offload
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/offload-agent ./cmd/offload-agent
	install -m 0755 kubectl_complete-offload bin/kubectl_complete-offload

.PHONY: unit
unit: ## Run the unit tests (no clusters).
	$(GO) test -count=1 $$($(GO) list ./... | grep -v /test/e2e)

.PHONY: e2e
e2e: ## Run the end-to-end tests on local clusters, one package at a time.
	@hack/setup.sh
	$(GO) test -p 1 -count=1 -timeout 60m ./test/e2e/...

.PHONY: bench
bench: ## Run the cluster benchmarks under bench/ once each; they print figures.
	@hack/setup.sh
	$(GO) test -p 1 -run '^$$' -bench 'LocalClusters|APICalls' -benchtime 1x -timeout 30m ./bench/...

.PHONY: conformance
conformance: ## Run Kubernetes' pod conformance tests (sig-node, ConfigMap/Secret/Downward API/Projected volumes) through the virtual node; needs root.
	@hack/conformance.sh

.PHONY: compat
compat: ## Run TestCompatibility on every Kubernetes version pair of the matrix (hack/versions.env) and write its table into docs/compatibility.md; needs root.
	@hack/compat.sh

.PHONY: bench-offload
bench-offload: ## Run BenchmarkOffload (direct vs offloaded, N from OFFLOAD_BENCH_N, default 100,1000,5000; OFFLOAD_BENCH_CPUS isolated,shared) and write docs/benchmarks.md with its charts; needs root.
	@hack/setup.sh
	OFFLOAD_BENCH_REPORT=$${OFFLOAD_BENCH_REPORT-$(CURDIR)/docs/benchmarks.md} $(GO) test -p 1 -run '^$$' -bench 'Offload' -benchtime 1x -timeout 180m ./bench/...

.PHONY: bench-network
bench-network: ## Run BenchmarkNetwork (P6: bare wireguard-go, the fabric, the underlay; throughput, latency, gateway CPU and RSS); needs root.
	$(GO) test -p 1 -run '^$$' -bench 'Network' -benchtime 1x -timeout 10m ./bench/...

.PHONY: lint
lint: ## gofmt, go vet, golangci-lint and govulncheck (built from the module proxy into .cache/bin).
	@hack/lint.sh $(GOLANGCI_LINT_VERSION) $(GOVULNCHECK_VERSION)

.PHONY: release-check
release-check: ## Validate .goreleaser.yaml with goreleaser (built from the module proxy into .cache/bin).
	@hack/release-check.sh $(GORELEASER_VERSION)

.PHONY: generate
generate: ## Regenerate deepcopy code and the chart's CRDs with the pinned controller-gen.
	@hack/codegen.sh

.PHONY: docs
docs: ## Generate the CLI reference into docs/reference.
	$(GO) run ./hack/gendocs docs/reference

.PHONY: clusters-up
clusters-up: ## Start two local clusters, consumer and provider, and print their kubeconfigs.
	@hack/setup.sh
	@$(GO) run ./hack/local-clusters up consumer provider

.PHONY: clusters-down
clusters-down: ## Stop and remove the local clusters.
	@$(GO) run ./hack/local-clusters down

.PHONY: clean
clean: clusters-down ## Remove build output and local clusters (keeps the tool cache).
	rm -rf bin dist
