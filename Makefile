# loraplane: Kubernetes controllers for LLM serving.
#
# Every tool is built from the Go module proxy into bin/ (see hack/tools/build.sh) and used
# from there, never from PATH. `make help` lists the targets.

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

ROOT := $(abspath .)
BIN := $(ROOT)/bin
export GOTOOLCHAIN := local

## Pinned versions (changing one rebuilds that tool on the next `make tools`).
KUBE_VERSION ?= v1.37.2
ETCD_VERSION ?= v3.7.0
KWOK_VERSION ?= v0.8.0
CONTROLLER_GEN_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0
HELM_VERSION ?= v4.3.2
# Prometheus v3.5.0 (LTS) is the module's v0.305.0, the version Prometheus Operator v0.85.0
# uses: the local stack's server, make test's promtool and make e2e's Prometheus image.
PROMETHEUS_VERSION ?= v3.5.0
PROMETHEUS_MODULE_VERSION ?= v0.305.0
# gojq, the scripts' jq.
GOJQ_VERSION ?= v0.12.19
# make test-compat: the oldest Kubernetes and Gateway API the chart and docs/compatibility.md
# claim (the newest are KUBE_VERSION and the gateway-api module's own CRDs, which make test
# runs). KUBE_COMPAT_VERSION is also pinned in hack/tools/kube-compat/go.mod.
KUBE_COMPAT_VERSION ?= v1.31.14
GATEWAY_API_OLDEST ?= v1.2.1
# make release's SBOMs, and the OCI registry make release-test publishes to.
CYCLONEDX_GOMOD_VERSION ?= v1.10.0
DISTRIBUTION_VERSION ?= v3.1.2

KUBE_APISERVER := $(BIN)/kube-apiserver-$(KUBE_VERSION)
ETCD := $(BIN)/etcd-$(ETCD_VERSION)
KWOK := $(BIN)/kwok-$(KWOK_VERSION)
CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_GEN_VERSION)
GOLANGCI_LINT := $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
HELM := $(BIN)/helm-$(HELM_VERSION)
PROMETHEUS := $(BIN)/prometheus-$(PROMETHEUS_MODULE_VERSION)
PROMTOOL := $(BIN)/promtool-$(PROMETHEUS_MODULE_VERSION)
JQ := $(BIN)/jq-$(GOJQ_VERSION)
KUBE_COMPAT_APISERVER := $(BIN)/k8s-$(KUBE_COMPAT_VERSION)/kube-apiserver
CYCLONEDX_GOMOD := $(BIN)/cyclonedx-gomod-$(CYCLONEDX_GOMOD_VERSION)
REGISTRY_SERVER := $(BIN)/registry-$(DISTRIBUTION_VERSION)
KUBECTL := $(BIN)/kubectl

BINARIES := adapter-controller router-controller
MODULES := shared adapter-controller router-controller test test/e2e hack/bench
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X github.com/loraplane/loraplane/shared/version.Version=$(VERSION) \
  -X github.com/loraplane/loraplane/shared/version.Revision=$(REVISION)

# Images: $(IMAGE_REGISTRY)/<binary>:$(IMAGE_TAG). The same two variables name the images in
# docker-build/docker-push, make deploy (a kustomize overlay's images:) and make helm-deploy
# (the chart's image.registry and image.tag). IMG overrides the whole name of one image.
IMAGE_REGISTRY ?= ghcr.io/loraplane
IMAGE_TAG ?= $(VERSION)
BINARY ?= adapter-controller
IMG ?= $(IMAGE_REGISTRY)/$(BINARY):$(IMAGE_TAG)
# docker-buildx: the platforms of a multi-arch image (needs docker buildx and a registry).
PLATFORMS ?= linux/amd64,linux/arm64
# The Dockerfile's base images (its build arguments; the offline image kit builds stand-ins
# under these names, labelled io.loraplane.kit=stand-in).
BUILDER_IMAGE ?= golang:1.26
BASE_IMAGE ?= gcr.io/distroless/static:nonroot
IMAGE_BUILD_ARGS = --build-arg BINARY=$(BINARY) --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) \
  --build-arg BUILDER_IMAGE=$(BUILDER_IMAGE) --build-arg BASE_IMAGE=$(BASE_IMAGE)
export BUILDER_IMAGE BASE_IMAGE

# envtest finds kube-apiserver, etcd and kubectl here.
export KUBEBUILDER_ASSETS := $(BIN)

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} \
	  /^[a-zA-Z0-9_-]+:.*?##/ { printf "  \033[36m%-22s\033[0m %s\n", $$1, $$2 } \
	  /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code from the API types.
	cd shared && $(CONTROLLER_GEN) object paths=./api/...

CHART := deploy/chart/loraplane

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRD and each binary's RBAC from markers (deploy/ and the Helm chart's copies).
	cd shared && $(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=$(ROOT)/deploy/crds
	@# The adapter-controller's role leaves out internal/cleanup: its markers are the uninstall
	@# hook's role (delete), which the controller itself must not have.
	@for b in $(BINARIES); do \
	  paths=$$(cd $$b && go list -f '{{.Dir}}' ./... | grep -v /internal/cleanup | paste -sd';'); \
	  (cd $$b && $(CONTROLLER_GEN) rbac:roleName=loraplane-$$b paths="$$paths" output:rbac:artifacts:config=$(ROOT)/deploy/$$b/rbac); \
	  cp deploy/$$b/rbac/role.yaml $(CHART)/files/$$b-role.yaml; \
	done
	cd adapter-controller && $(CONTROLLER_GEN) rbac:roleName=loraplane-adapter-cleanup paths=./internal/cleanup/... output:stdout > $(ROOT)/$(CHART)/files/adapter-cleanup-role.yaml
	cp deploy/crds/model.aibrix.ai_modeladapters.yaml $(CHART)/files/crds/

.PHONY: verify-generated
verify-generated: generate manifests ## Fail if generated code or manifests differ from what is committed.
	@if [ -n "$$(git status --porcelain -- shared/api deploy)" ]; then \
	  git status --porcelain -- shared/api deploy; git --no-pager diff -- shared/api deploy | head -50; \
	  echo "Generated files are stale: run 'make generate manifests' and commit the result" >&2; exit 1; \
	fi

.PHONY: fmt
fmt: ## Run gofmt on all Go code.
	gofmt -l -w $(MODULES) hack

.PHONY: vet
vet: ## Run go vet on every module (and the e2e suite).
	go vet $(addprefix ./,$(addsuffix /...,$(MODULES)))
	cd test/e2e && go vet -tags e2e ./...
	$(PROMCHECK) go vet ./...
	$(RELEASE_MODULE) go vet ./...

.PHONY: lint
lint: vet $(GOLANGCI_LINT) ## Run go vet and golangci-lint (config: .golangci.yml).
	@for m in $(MODULES); do (cd $$m && $(GOLANGCI_LINT) run --config $(ROOT)/.golangci.yml ./...); done
	cd test/e2e && $(GOLANGCI_LINT) run --config $(ROOT)/.golangci.yml --build-tags e2e ./...
	$(PROMCHECK) $(GOLANGCI_LINT) run --config $(ROOT)/.golangci.yml ./...
	$(RELEASE_MODULE) $(GOLANGCI_LINT) run --config $(ROOT)/.golangci.yml ./...

.PHONY: test
test: tools verify-generated docs-check chart-check test-rules test-promql ## Run unit and integration tests (envtest on the pinned kube-apiserver and etcd), the flag reference drift check, helm lint/template and the chart drift test, the alert rule tests and the PromQL checks.
	go test -count=1 -timeout 20m $(addprefix ./,$(addsuffix /...,$(MODULES)))
	$(RELEASE_MODULE) go test -count=1 ./...

# hack/promcheck is a module outside the workspace (GOWORK=off): the Prometheus module it
# parses PromQL with never reaches the controllers' dependency graph.
PROMCHECK := cd hack/promcheck && GOWORK=off
# hack/release (make release's image builder) likewise: go-containerregistry stays out of it.
RELEASE_MODULE := cd hack/release && GOWORK=off

# docs/flags.md is generated from the binaries' --help (hack/flagsdoc, a module outside the
# workspace with no dependencies); the binaries are built into a temporary directory.
FLAGSDOC = tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
  for b in $(BINARIES); do (cd $$b && go build -o $$tmp/$$b .); done; \
  (cd hack/flagsdoc && GOWORK=off go run . $(addprefix $$tmp/,$(BINARIES)))

.PHONY: docs
docs: ## Regenerate docs/flags.md, the flag reference, from the binaries' --help.
	@$(FLAGSDOC) > docs/flags.md.tmp && mv docs/flags.md.tmp docs/flags.md
	@echo "docs/flags.md regenerated"

.PHONY: docs-check
docs-check: ## Fail when docs/flags.md differs from the binaries' --help (run make docs).
	@$(FLAGSDOC) > _flags.md.check; \
	  if ! diff -u docs/flags.md _flags.md.check; then rm -f _flags.md.check; echo "docs/flags.md is stale: run make docs and commit it" >&2; exit 1; fi; \
	  rm -f _flags.md.check; echo "docs/flags.md matches the binaries"
	cd hack/flagsdoc && GOWORK=off go test -count=1 ./...

.PHONY: test-rules
test-rules: $(PROMTOOL) ## Turn deploy/prometheus/prometheusrule.yaml into a rule file (hack/promcheck), then promtool check rules and promtool test rules (hack/promcheck/testdata/alerts_test.yaml).
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	  ($(PROMCHECK) go run . rules ../../deploy/prometheus/prometheusrule.yaml) >"$$tmp/loraplane-rules.yaml"; \
	  cp hack/promcheck/testdata/alerts_test.yaml "$$tmp/"; \
	  $(PROMTOOL) check rules "$$tmp/loraplane-rules.yaml"; \
	  $(PROMTOOL) test rules "$$tmp/alerts_test.yaml"

.PHONY: test-promql
test-promql: ## Parse every PromQL expression of the alerts and of deploy/grafana/loraplane.json and check each metric against the binaries' real scrape (hack/promcheck).
	$(PROMCHECK) go test -count=1 ./...

.PHONY: metrics-scrape
metrics-scrape: ## Regenerate hack/promcheck/testdata/exported-metrics.txt from a real scrape of both binaries (run against envtest).
	go test -count=1 ./test/scrape -run TestExportedMetrics -update -v

.PHONY: chart-check
chart-check: $(HELM) $(KUBE_APISERVER) ## helm lint (values.schema.json included) and helm template the chart with its defaults and with each ci/*.yaml (into _artifacts/chart); test/chart compares it with deploy/default.
	@mkdir -p _artifacts/chart
	$(HELM) lint --strict $(CHART) --namespace loraplane-system
	$(HELM) template loraplane $(CHART) --namespace loraplane-system > _artifacts/chart/defaults.yaml
	@for f in $(CHART)/ci/*.yaml; do \
	  echo "$(HELM) lint --strict $(CHART) --namespace loraplane-system -f $$f"; \
	  $(HELM) lint --strict $(CHART) --namespace loraplane-system -f $$f; \
	  $(HELM) template loraplane $(CHART) --namespace loraplane-system -f $$f > _artifacts/chart/$$(basename $$f); \
	done
	@echo "chart-check: $$(grep -c '^kind:' _artifacts/chart/defaults.yaml) objects with the defaults;" \
	  $$(for f in $(CHART)/ci/*.yaml; do echo "$$(grep -c '^kind:' _artifacts/chart/$$(basename $$f)) with ci/$$(basename $$f)"; done)

.PHONY: test-compat
test-compat: $(KUBE_COMPAT_APISERVER) $(KUBE_APISERVER) $(ETCD) $(HELM) ## Run the envtest suites against the oldest Kubernetes ($(KUBE_COMPAT_VERSION), built from the module proxy) and the oldest Gateway API CRDs ($(GATEWAY_API_OLDEST)) claimed in docs/compatibility.md; logs and times in _artifacts/compat/.
	KUBE_OLDEST=$(KUBE_COMPAT_VERSION) GATEWAY_API_OLDEST=$(GATEWAY_API_OLDEST) hack/test-compat.sh

.PHONY: test-unit
test-unit: ## Run only the tests that need no API server.
	go test -count=1 -short $(addprefix ./,$(addsuffix /...,$(MODULES)))

##@ Build

.PHONY: build
build: ## Build both controller binaries into bin/.
	@for b in $(BINARIES); do \
	  echo "Building bin/$$b ($(VERSION))"; \
	  (cd $$b && CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/$$b .); \
	done

.PHONY: docker-build
docker-build: ## Build the image of one binary as $(IMG): make docker-build BINARY=router-controller IMAGE_TAG=v0.1.0.
	@for i in $(BUILDER_IMAGE) $(BASE_IMAGE); do \
	  if [ "$$(docker image inspect -f '{{index .Config.Labels "io.loraplane.kit"}}' $$i 2>/dev/null)" = stand-in ]; then \
	    echo "docker-build: WARNING: $$i here is the offline image kit's stand-in (hack/images/kit.sh), not the upstream image: $(IMG) is for tests on this machine, not for release" >&2; \
	  fi; \
	done
	docker build $(IMAGE_BUILD_ARGS) -t $(IMG) .

.PHONY: docker-build-all
docker-build-all: ## Build the images of both binaries ($(IMAGE_REGISTRY)/<binary>:$(IMAGE_TAG)).
	@for b in $(BINARIES); do $(MAKE) docker-build BINARY=$$b IMG=$(IMAGE_REGISTRY)/$$b:$(IMAGE_TAG); done

.PHONY: docker-push
docker-push: ## Push the image of one binary ($(IMG)) to its registry: make docker-push BINARY=... IMAGE_REGISTRY=registry.example.com/team.
	docker push $(IMG)

.PHONY: docker-push-all
docker-push-all: ## Push the images of both binaries.
	@for b in $(BINARIES); do $(MAKE) docker-push BINARY=$$b IMG=$(IMAGE_REGISTRY)/$$b:$(IMAGE_TAG); done

.PHONY: docker-buildx
docker-buildx: ## Build and push a multi-arch image of one binary ($(IMG), PLATFORMS=$(PLATFORMS)) with docker buildx.
	@docker buildx version >/dev/null 2>&1 || { echo "docker buildx is not available: use make docker-build (one platform)" >&2; exit 1; }
	docker buildx build --platform $(PLATFORMS) $(IMAGE_BUILD_ARGS) -t $(IMG) --push .

.PHONY: docker-buildx-all
docker-buildx-all: ## Build and push multi-arch images of both binaries.
	@for b in $(BINARIES); do $(MAKE) docker-buildx BINARY=$$b IMG=$(IMAGE_REGISTRY)/$$b:$(IMAGE_TAG); done

.PHONY: docker-build-check
docker-build-check: ## Run the Dockerfile's build steps here on a copy holding only what it COPYs (no Docker engine needed).
	@for b in $(BINARIES); do \
	  tmp=$$(mktemp -d); cp -r shared $$b $$tmp/; mkdir $$tmp/test; cp test/go.mod test/go.sum $$tmp/test/; \
	  (cd $$tmp/$$b && GOWORK=off CGO_ENABLED=0 go mod download && \
	    GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o $$tmp/manager . ) && \
	  echo "$$b: built as the Dockerfile builds it (GOWORK=off, only shared/, $$b/ and test/go.mod present)"; rm -rf $$tmp; \
	done

##@ Tools

.PHONY: tools
tools: cluster-tools $(CONTROLLER_GEN) $(GOLANGCI_LINT) $(HELM) ## Build every pinned tool into bin/ (no-op when up to date).

.PHONY: cluster-tools
cluster-tools: $(KUBE_APISERVER) $(ETCD) $(KWOK) ## Build only what a local cluster needs: the Kubernetes set, etcd, kwok.

$(KUBE_APISERVER):
	hack/tools/build.sh kube $(KUBE_VERSION)
$(KUBE_COMPAT_APISERVER): $(ETCD)
	hack/tools/build.sh kube-compat $(KUBE_COMPAT_VERSION)
$(ETCD):
	hack/tools/build.sh etcd $(ETCD_VERSION)
$(KWOK):
	hack/tools/build.sh kwok $(KWOK_VERSION)
$(CONTROLLER_GEN):
	hack/tools/build.sh controller-gen $(CONTROLLER_GEN_VERSION)
$(GOLANGCI_LINT):
	hack/tools/build.sh golangci-lint $(GOLANGCI_LINT_VERSION)
$(HELM):
	hack/tools/build.sh helm $(HELM_VERSION)
$(PROMETHEUS) $(PROMTOOL):
	PROMETHEUS_RELEASE=$(PROMETHEUS_VERSION) hack/tools/build.sh prometheus $(PROMETHEUS_MODULE_VERSION)
$(JQ):
	hack/tools/build.sh jq $(GOJQ_VERSION)
$(CYCLONEDX_GOMOD):
	hack/tools/build.sh cyclonedx-gomod $(CYCLONEDX_GOMOD_VERSION)
$(REGISTRY_SERVER):
	hack/tools/build.sh registry $(DISTRIBUTION_VERSION)

.PHONY: clean
clean: ## Remove build outputs (keeps the pinned tools).
	rm -f $(addprefix $(BIN)/,$(BINARIES))
	rm -rf _artifacts

##@ Local cluster

.PHONY: cluster-up
cluster-up: $(KUBE_APISERVER) $(ETCD) $(KWOK) ## Create (or start) the local kwok cluster with loopback pod CIDRs; prints its kubeconfig.
	hack/cluster.sh up

.PHONY: cluster-down
cluster-down: ## Delete the local kwok cluster.
	hack/cluster.sh down

##@ Deployment

KUSTOMIZE_DIR ?= deploy/default
# The overlay make deploy applies: $(KUSTOMIZE_DIR) with the images $(IMAGE_REGISTRY)/<binary>:$(IMAGE_TAG).
DEPLOY_OVERLAY := _artifacts/deploy
UNDEPLOY_TIMEOUT ?= 5m
# The router's gateway namespace as deploy/ has it (its HTTPRoute Role and binding live there).
GATEWAY_NAMESPACE ?= aibrix-system
HELM_RELEASE ?= loraplane
HELM_NAMESPACE ?= loraplane-system
HELM_ARGS ?=

.PHONY: deploy-overlay
deploy-overlay:
	@mkdir -p $(DEPLOY_OVERLAY)
	@printf '%s\n' '# Generated by make deploy: $(KUSTOMIZE_DIR) with the images of IMAGE_REGISTRY and IMAGE_TAG.' \
	  'apiVersion: kustomize.config.k8s.io/v1beta1' 'kind: Kustomization' 'resources:' \
	  "- $$(realpath --relative-to=$(DEPLOY_OVERLAY) $(KUSTOMIZE_DIR))" 'images:' \
	  $(foreach b,$(BINARIES),'- name: ghcr.io/loraplane/$(b)' '  newName: $(IMAGE_REGISTRY)/$(b)' '  newTag: "$(IMAGE_TAG)"') \
	  > $(DEPLOY_OVERLAY)/kustomization.yaml

.PHONY: deploy
deploy: manifests deploy-overlay $(KUBE_APISERVER) ## Install the CRD and both controllers ($(IMAGE_REGISTRY)/<binary>:$(IMAGE_TAG)) into the cluster of $KUBECONFIG with kustomize.
	@# The router's HTTPRoute Role lives in the gateway namespace: it must exist first.
	$(KUBECTL) get namespace $(GATEWAY_NAMESPACE) >/dev/null 2>&1 || $(KUBECTL) create namespace $(GATEWAY_NAMESPACE)
	$(KUBECTL) apply --server-side -k $(DEPLOY_OVERLAY)

# make undeploy keeps the CRD, the namespace and every ModelAdapter (still loaded on the
# engines, Running again once the controllers are back); PURGE=true deletes them (below).
PURGE ?= false

.PHONY: undeploy
undeploy: deploy-overlay $(KUBE_APISERVER) ## Remove the controllers `make deploy` installed, keeping the CRD, the namespace and every ModelAdapter (loaded on the engines). PURGE=true first deletes every ModelAdapter (the adapter-controller unloads them), then the controllers, the namespace and the CRD.
	@case "$(PURGE)" in true|false) ;; *) echo "PURGE must be true or false, got '$(PURGE)': nothing was removed" >&2; exit 2 ;; esac
	@if [ "$(PURGE)" != true ]; then \
	  $(KUBECTL) delete --ignore-not-found -k deploy/controllers; \
	  n=$$($(KUBECTL) get modeladapters.model.aibrix.ai -A --no-headers 2>/dev/null | wc -l); \
	  echo "undeploy: kept the CRD modeladapters.model.aibrix.ai, namespace loraplane-system and $$n ModelAdapter(s), still loaded on their engines; make undeploy PURGE=true deletes them"; \
	  exit 0; \
	fi; \
	if $(KUBECTL) get crd modeladapters.model.aibrix.ai >/dev/null 2>&1; then \
	  echo "PURGE=true: deleting every ModelAdapter; the adapter-controller unloads each from its engines (waiting up to $(UNDEPLOY_TIMEOUT)):"; \
	  $(KUBECTL) get modeladapters.model.aibrix.ai -A -o custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,PHASE:.status.phase,INSTANCES:.status.instances; \
	  $(KUBECTL) delete modeladapters.model.aibrix.ai --all --all-namespaces --wait --timeout=$(UNDEPLOY_TIMEOUT) || { \
	    echo "ModelAdapters are still there: is the adapter-controller running? Nothing else was removed." >&2; \
	    $(KUBECTL) get modeladapters.model.aibrix.ai -A -o custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,FINALIZERS:.metadata.finalizers >&2; exit 1; }; \
	fi; \
	$(KUBECTL) delete --ignore-not-found -k $(DEPLOY_OVERLAY)

.PHONY: helm-deploy
helm-deploy: $(HELM) $(KUBE_APISERVER) ## Apply the chart's CRD, then install or upgrade the Helm chart (release $(HELM_RELEASE) in $(HELM_NAMESPACE)) with the images $(IMAGE_REGISTRY)/<binary>:$(IMAGE_TAG); HELM_ARGS adds flags.
	@# Over AIBrix's ModelAdapter CRD, or an older loraplane's, the chart's CRD is applied first
	@# (server-side, taking the fields over), so that the release adopts one that equals it.
	$(HELM) template $(HELM_RELEASE) $(CHART) --show-only templates/crds.yaml | $(KUBECTL) apply --server-side --force-conflicts -f -
	$(HELM) upgrade --install $(HELM_RELEASE) $(CHART) --namespace $(HELM_NAMESPACE) --create-namespace --take-ownership \
	  --set image.registry=$(IMAGE_REGISTRY) --set-string image.tag=$(IMAGE_TAG) --wait --timeout 5m $(HELM_ARGS)

.PHONY: helm-undeploy
helm-undeploy: $(HELM) ## Uninstall the Helm release, keeping the CRD and every ModelAdapter (loaded on the engines). PURGE=true first turns the release's cleanup hook on (and crds.keep off): it deletes the ModelAdapters while the adapter-controller still runs, then the CRD goes.
	@case "$(PURGE)" in true|false) ;; *) echo "PURGE must be true or false, got '$(PURGE)': nothing was removed" >&2; exit 2 ;; esac
	@if [ "$(PURGE)" = true ]; then \
	  $(HELM) upgrade $(HELM_RELEASE) $(CHART) --namespace $(HELM_NAMESPACE) --reuse-values \
	    --set adapterController.cleanupOnUninstall.enabled=true --set crds.keep=false --wait --timeout 5m; \
	fi
	$(HELM) uninstall $(HELM_RELEASE) --namespace $(HELM_NAMESPACE) --wait --timeout 5m

PREFLIGHT_ARGS ?=

.PHONY: preflight
preflight: ## Read the cluster of $KUBECONFIG and print what switching it from AIBrix would do, writing nothing (router-controller preflight; PREFLIGHT_ARGS: the router's flags, e.g. --route-timeout=2m). Exit 2: something blocks.
	@cd router-controller && CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/router-controller .
	$(BIN)/router-controller preflight $(PREFLIGHT_ARGS)

.PHONY: deploy-check
deploy-check: $(KUBE_APISERVER) ## Render every kustomization, create the namespace (Pod Security "restricted" enforced) and apply deploy/default with --dry-run=server to $KUBECONFIG.
	@mkdir -p _artifacts; for d in crds namespace adapter-controller router-controller controllers components/networkpolicy prometheus overlays/prometheus-example overlays/aibrix-coexistence default samples; do \
	  $(KUBECTL) kustomize deploy/$$d > /dev/null && echo "deploy/$$d renders"; done
	$(KUBECTL) apply --server-side -k deploy/namespace
	$(KUBECTL) get namespace $(GATEWAY_NAMESPACE) >/dev/null 2>&1 || $(KUBECTL) create namespace $(GATEWAY_NAMESPACE)
	$(KUBECTL) apply --server-side --dry-run=server -k $(KUSTOMIZE_DIR) 2>&1 | tee _artifacts/deploy-check.log
	@if grep -q "violate PodSecurity" _artifacts/deploy-check.log; then echo "Pod Security restricted violated" >&2; exit 1; fi

##@ Release

# make release: dist/ for VERSION (hack/release.sh; CONTRIBUTING.md, "Releasing"). The images
# are $(IMAGE_REGISTRY)/<binary>:$(VERSION)@<digest>, for RELEASE_PLATFORMS.
RELEASE_PLATFORMS ?= linux/amd64,linux/arm64
# make release-publish: where the images and the chart go (host[:port]/namespace).
REGISTRY ?=
# make release-test: the version it builds, the newest with a CHANGELOG.md section.
RELEASE_TEST_VERSION ?= $(shell hack/release.sh latest)
RELEASE_ENV = VERSION=$(VERSION) LDFLAGS="$(LDFLAGS)" IMAGE_REGISTRY=$(IMAGE_REGISTRY) \
  PLATFORMS=$(RELEASE_PLATFORMS) BINARIES="$(BINARIES)" CYCLONEDX_GOMOD=$(CYCLONEDX_GOMOD) REGISTRY=$(REGISTRY)

.PHONY: release-tools
release-tools: $(CYCLONEDX_GOMOD) $(REGISTRY_SERVER) ## Build what the release targets use into bin/: cyclonedx-gomod and the distribution registry.

.PHONY: release
release: $(CYCLONEDX_GOMOD) $(HELM) $(KUBE_APISERVER) ## Build the release into dist/: make release VERSION=vX.Y.Z (multi-arch OCI image layouts, install.yaml, crds.yaml, the chart .tgz, SBOMs, release notes from CHANGELOG.md, SHA256SUMS); reproducible, kept when built from the same inputs.
	$(RELEASE_ENV) hack/release.sh build

.PHONY: release-publish
release-publish: $(HELM) ## Push dist/'s images and chart to an OCI registry: make release-publish REGISTRY=host:port/namespace (plain HTTP on loopback).
	$(RELEASE_ENV) hack/release.sh publish

.PHONY: release-test
release-test: cluster-tools $(HELM) $(REGISTRY_SERVER) $(CYCLONEDX_GOMOD) $(JQ) ## make release of RELEASE_TEST_VERSION, published to a registry on loopback, pulled back, installed into a kwok cluster with only helm and kubectl on PATH.
	$(MAKE) --no-print-directory release VERSION=$(RELEASE_TEST_VERSION)
	$(MAKE) --no-print-directory release-test-run VERSION=$(RELEASE_TEST_VERSION)

# make release-test's second half, in a make whose VERSION (and so LDFLAGS) is the tested one.
.PHONY: release-test-run
release-test-run:
	$(RELEASE_ENV) hack/release-test.sh

##@ End to end

.PHONY: fake-engine
fake-engine: ## Build the fake vLLM/SGLang engine host process into bin/.
	cd test && CGO_ENABLED=0 go build -o $(BIN)/fake-engine ./fakeengine/cmd/fake-engine

.PHONY: test-deps
test-deps: $(PROMETHEUS) $(JQ) ## Build Prometheus (and promtool) and jq from the module proxy into bin/: the local stack scrapes with that Prometheus, the scripts filter JSON with that jq.

.PHONY: e2e-local
e2e-local: cluster-tools $(HELM) build fake-engine test-deps ## Run the e2e suite on the local kwok cluster with both controllers, the fake engine and Prometheus; then make release-test.
	hack/e2e-local.sh
	$(MAKE) --no-print-directory release-test

SOAK_DURATION ?= 10m
SOAK_SEED ?=
export SOAK_DURATION SOAK_SEED

.PHONY: soak
soak: cluster-tools build fake-engine test-deps ## Chaos soak on the local kwok cluster for SOAK_DURATION (default 10m; SOAK_SEED replays a run); report in _artifacts/soak/.
	hack/soak.sh

FUZZTIME ?= 60s

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME each (default 60s); make test runs their seed corpora.
	FUZZTIME=$(FUZZTIME) hack/fuzz.sh

KIND_VERSION ?= v0.33.0
COREDNS_VERSION ?= v1.14.6
CRICTL_VERSION ?= v1.37.0
# The gateway and the monitoring stack make e2e runs (hack/images/kit.sh builds their images).
TRAEFIK_VERSION ?= v3.6.12
PROMETHEUS_OPERATOR_VERSION ?= v0.85.0
KIND := $(BIN)/kind-$(KIND_VERSION)
KIND_CLUSTER ?= loraplane-e2e
KIND_NODE_IMAGE ?= kindest/node:$(KUBE_VERSION)
E2E_DRY_RUN ?=
export KUBE_VERSION ETCD_VERSION KIND_VERSION COREDNS_VERSION CRICTL_VERSION KIND_CLUSTER KIND_NODE_IMAGE IMAGE_REGISTRY
export DISTRIBUTION_VERSION REGISTRY_SERVER
export TRAEFIK_VERSION PROMETHEUS_OPERATOR_VERSION PROMETHEUS_VERSION PROMETHEUS_MODULE_VERSION GOJQ_VERSION

$(KIND):
	hack/tools/build.sh kind $(KIND_VERSION)

.PHONY: e2e-deps
e2e-deps: $(KIND) $(KUBE_APISERVER) $(JQ) ## What make e2e needs: a Docker engine (installed and started on Debian as root when none answers) and, where it started that engine, the offline image kit (hack/images).
	hack/images/docker-up.sh
	@if [ -n "$$E2E_IMAGE_KIT" ] || hack/images/docker-up.sh --managed; then hack/images/kit.sh; \
	  else echo "e2e-deps: Docker was already running; images come from their registries (E2E_IMAGE_KIT=1 builds the offline stand-ins)"; fi

.PHONY: kit-present
kit-present: ## Exit 0 exactly when the offline image kit's images are all in the Docker engine (.ci/run asks before it plans the kind stages).
	@hack/images/kit.sh --present

.PHONY: e2e
e2e: $(KIND) $(KUBE_APISERVER) $(JQ) $(HELM) ## Run the e2e suite on kind (cluster $(KIND_CLUSTER)) with images built from the Dockerfile; E2E_DRY_RUN=1 prints the steps.
	@if [ -z "$(E2E_DRY_RUN)" ]; then \
	  docker info >/dev/null 2>&1 || { echo "make e2e needs a running Docker engine (docker info failed): run make e2e-deps, or make e2e-local for the kwok cluster" >&2; exit 1; }; \
	fi
	KIND=$(KIND) hack/e2e-kind.sh

.PHONY: e2e-down
e2e-down: $(KIND) ## Delete the kind cluster of make e2e ($(KIND_CLUSTER)) and its Docker network.
	hack/e2e-kind.sh down

.PHONY: demo
demo: cluster-tools build fake-engine test-deps ## Start the local cluster, both controllers, fake engines and Prometheus, apply deploy/samples, print a summary; runs until Ctrl-C.
	hack/demo.sh

.PHONY: demo-down
demo-down: ## Stop the demo and delete its cluster.
	hack/demo.sh down

##@ Benchmarks

BENCH_SIZE ?= default
BENCH_CLUSTER ?= bench
BENCH_ARGS ?=

.PHONY: bench
bench: cluster-tools build ## Benchmark both controllers on a kwok cluster of their own (BENCH_CLUSTER=bench); BENCH_SIZE=tiny|small|default|large, BENCH_ARGS=flags; table and JSON in _artifacts/bench/.
	cd hack/bench && GOWORK=off go build -o $(ROOT)/_artifacts/bench/bench .
	$(ROOT)/_artifacts/bench/bench -root $(ROOT) -size $(BENCH_SIZE) -cluster-name $(BENCH_CLUSTER) $(BENCH_ARGS)
