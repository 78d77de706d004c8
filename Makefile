# Tools are built from the pinned modules under hack/tools into bin/, one
# file or directory per version, so a second run never rebuilds them.
tool_version = $(shell awk '$$1=="$(2)" {print $$2; exit}' hack/tools/$(1)/go.mod)
KUBE_VERSION           := $(call tool_version,kube,k8s.io/kubernetes)
ETCD_VERSION           := $(call tool_version,etcd,go.etcd.io/etcd/server/v3)
CONTROLLER_GEN_VERSION := $(call tool_version,controller-gen,sigs.k8s.io/controller-tools)
GOLANGCI_LINT_VERSION  := $(call tool_version,golangci-lint,github.com/golangci/golangci-lint/v2)
TEMPORAL_VERSION       := $(call tool_version,temporal,go.temporal.io/server)
WORKFLOWCHECK_VERSION  := $(call tool_version,workflowcheck,go.temporal.io/sdk/contrib/tools/workflowcheck)
HELM_VERSION           := $(call tool_version,helm,helm.sh/helm/v4)
KUBECONFORM_VERSION    := $(call tool_version,kubeconform,github.com/yannh/kubeconform)
CRANE_VERSION          := $(call tool_version,crane,github.com/google/go-containerregistry)
VERSITYGW_VERSION      := $(call tool_version,versitygw,github.com/versity/versitygw)
MONITORING_VERSION     := $(call tool_version,monitoring,github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring)

BIN            := $(CURDIR)/bin
CONTROLLER_GEN := $(BIN)/controller-gen-$(CONTROLLER_GEN_VERSION)
GOLANGCI_LINT  := $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
KUBE_DIR       := $(BIN)/kube-$(KUBE_VERSION)
ETCD_DIR       := $(BIN)/etcd-$(ETCD_VERSION)
ENVTEST_ASSETS := $(BIN)/envtest-k8s-$(KUBE_VERSION)-etcd-$(ETCD_VERSION)
TEMPORAL       := $(BIN)/temporal-server-$(TEMPORAL_VERSION)/temporal-server
WORKFLOWCHECK  := $(BIN)/workflowcheck-$(WORKFLOWCHECK_VERSION)
HELM           := $(BIN)/helm-$(HELM_VERSION)
KUBECONFORM    := $(BIN)/kubeconform-$(KUBECONFORM_VERSION)
CRANE          := $(BIN)/crane-$(CRANE_VERSION)
VERSITYGW      := $(BIN)/versitygw-$(VERSITYGW_VERSION)
# The Prometheus Operator's PodMonitor and ServiceMonitor CRDs, generated
# from its pinned API, for the checks of the chart's monitors.
MONITORING_CRDS := $(BIN)/monitoring-crds-$(MONITORING_VERSION)
# The reference MCP servers, from npm, cached by the digest of their lock.
MCP_SERVERS    := $(BIN)/mcp-servers-$(shell sha256sum hack/tools/mcp-servers/package-lock.json | cut -c1-12)
# playwright-core, from npm, which drives the system's Chromium in the web
# page's tests; cached by the digest of its lock.
BROWSER_DRIVER := $(BIN)/browser-driver-$(shell sha256sum hack/tools/browser/package-lock.json | cut -c1-12)
CHROMIUM       ?= $(shell command -v chromium || echo /usr/bin/chromium)
# Where tests keep what a person reads after a run: the web page's
# screenshots (git ignores .local/).
TEST_ARTIFACTS := $(CURDIR)/.local/test-artifacts

# The operator's Helm chart, and where `make chart-check` writes the API
# server's schemas for kubeconform (git ignores .local/).
CHART       := charts/stepwise
KUBESCHEMAS := $(CURDIR)/.local/kubeschemas
KUBECONFORM_SCHEMA := $(KUBESCHEMAS)/{{ .ResourceKind }}{{ .KindSuffix }}.json

# Files that `make manifests generate` writes.
GENERATED := config/crd/bases config/rbac/role.yaml config/rbac/gateway/role.yaml api/v1alpha1/zz_generated.deepcopy.go \
	$(CHART)/crds $(CHART)/files/role.yaml $(CHART)/files/gateway-role.yaml

GO_TEST_FLAGS ?= -count=1 -timeout 30m

# The release: the operator's version, the tag of every image and the Helm
# chart's version. Images are named $(REGISTRY)/<name>:$(VERSION).
VERSION    ?= 0.4.0
REGISTRY   ?= ghcr.io/stepwise-run
IMAGES_DIR ?= $(BIN)/images

# The end-to-end suite upgrades an installation of the previous release, the
# last commit of the previous engine version, to this build, and workers
# across that engine version change. It builds that release's operator,
# gateway and worker images, tagged engine-<version>, and keeps its chart,
# from the repository's history.
PREVIOUS_ENGINE_VERSION := 0.7.0
PREVIOUS_ENGINE_COMMIT  := 49414675d911080c8e171a22229b3c76b1170ef2
PREVIOUS_ENGINE_DIR     := $(BIN)/previous-release-$(PREVIOUS_ENGINE_VERSION)-$(shell echo $(PREVIOUS_ENGINE_COMMIT) | cut -c1-12)
PREVIOUS_ENGINE_TAG     := engine-$(PREVIOUS_ENGINE_VERSION)

.DEFAULT_GOAL := help
SHELL := /usr/bin/env bash -o pipefail

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRDs and the RBAC roles of the operator and the gateway, and copy them into the chart.
	$(CONTROLLER_GEN) crd:allowDangerousTypes=true paths="./api/..." output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=manager-role paths="./internal/controller/..." output:rbac:artifacts:config=config/rbac
	$(CONTROLLER_GEN) rbac:roleName=gateway-role paths="./internal/gateway/..." output:rbac:artifacts:config=config/rbac/gateway
	rm -f $(CHART)/crds/*.yaml
	cp config/crd/bases/*.yaml $(CHART)/crds/
	cp config/rbac/role.yaml $(CHART)/files/role.yaml
	cp config/rbac/gateway/role.yaml $(CHART)/files/gateway-role.yaml

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate the API's deepcopy code.
	$(CONTROLLER_GEN) object paths="./api/..."

.PHONY: verify-gen
verify-gen: ## Fail when committed generated files are stale (regenerating them).
	@before=$$(find $(GENERATED) -type f | sort | xargs sha256sum); \
	$(MAKE) --no-print-directory manifests generate >/dev/null; \
	after=$$(find $(GENERATED) -type f | sort | xargs sha256sum); \
	if [ "$$before" != "$$after" ]; then \
		echo "generated files were stale and are regenerated now; commit them:"; \
		diff <(echo "$$before") <(echo "$$after") || true; exit 1; \
	fi

.PHONY: verify-tree
verify-tree: ## Fail when a committed file is a build output: an executable or anything over 1 MiB.
	@bad=$$( { git ls-files -s | awk '$$1 == "100755" {print $$4}' | grep -v -E '^(\.ci/run|hack/.*\.sh)$$'; \
		git ls-files -z | xargs -0 -r stat -c '%s %n' | awk '$$1 > 1048576 {print $$2}'; } | sort -u); \
	if [ -n "$$bad" ]; then echo "committed build outputs (they belong in bin/, which git ignores):"; echo "$$bad"; exit 1; fi

.PHONY: fmt
fmt: ## Format the Go code.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) $(WORKFLOWCHECK) ## Run golangci-lint, and workflowcheck over the workflow code.
	$(GOLANGCI_LINT) run ./...
	$(WORKFLOWCHECK) -config hack/workflowcheck.yaml ./...

.PHONY: chart-check
chart-check: $(HELM) $(KUBECONFORM) envtest monitoring-crds ## Lint the Helm chart; check its renders (default and all values), the samples and the autoscaler example against the API server's schemas.
	@grep -qx 'version: $(VERSION)' $(CHART)/Chart.yaml && grep -qx 'appVersion: "$(VERSION)"' $(CHART)/Chart.yaml || \
		{ echo "$(CHART)/Chart.yaml: version and appVersion must be the release, $(VERSION)"; exit 1; }
	$(HELM) lint --strict $(CHART)
	$(HELM) lint --strict $(CHART) --values $(CHART)/ci/all-values.yaml
	go run ./hack/kubeschemas --assets $(ENVTEST_ASSETS) --crds config/crd/bases,$(MONITORING_CRDS) --out $(KUBESCHEMAS)
	$(HELM) template stepwise $(CHART) --namespace stepwise-system --include-crds \
		| $(KUBECONFORM) -strict -summary -schema-location '$(KUBECONFORM_SCHEMA)'
	$(HELM) template stepwise $(CHART) --namespace stepwise-system --include-crds --values $(CHART)/ci/all-values.yaml \
		| $(KUBECONFORM) -strict -summary -schema-location '$(KUBECONFORM_SCHEMA)'
	$(KUBECONFORM) -strict -summary -schema-location '$(KUBECONFORM_SCHEMA)' config/samples examples/autoscaling/hpa.yaml

# The test environment: the variables internal/testtools reads, naming the
# tools the targets below build, written once for every test target. With
# STEPWISE_TEST_TOOLS_REQUIRED a test whose tool is missing fails instead
# of skipping.
TEST_ENV := KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) STEPWISE_TEMPORAL_SERVER=$(TEMPORAL) \
	STEPWISE_MCP_SERVERS=$(MCP_SERVERS)/node_modules/.bin STEPWISE_VERSITYGW=$(VERSITYGW) \
	STEPWISE_HELM=$(HELM) STEPWISE_KUBECONFORM=$(KUBECONFORM) STEPWISE_KUBESCHEMAS=$(KUBESCHEMAS) \
	STEPWISE_MONITORING_CRDS=$(MONITORING_CRDS) STEPWISE_BROWSER_DRIVER=$(BROWSER_DRIVER)/node_modules STEPWISE_CHROMIUM=$(CHROMIUM) \
	STEPWISE_TEST_ARTIFACTS=$(TEST_ARTIFACTS) STEPWISE_TEST_TOOLS_REQUIRED=1
# What the end-to-end suite reads besides: its cluster's binaries, the
# images, the previous release, and the release's registry and tag.
E2E_ENV := STEPWISE_E2E_KUBE_BIN=$(KUBE_DIR) STEPWISE_E2E_ETCD=$(ETCD_DIR)/etcd STEPWISE_E2E_IMAGES=$(BIN)/images \
	STEPWISE_E2E_PREVIOUS_RELEASE=$(PREVIOUS_ENGINE_DIR)/release STEPWISE_E2E_PREVIOUS_TAG=$(PREVIOUS_ENGINE_TAG) \
	STEPWISE_E2E_PREVIOUS_ENGINE_VERSION=$(PREVIOUS_ENGINE_VERSION) STEPWISE_E2E_REGISTRY=$(REGISTRY) STEPWISE_E2E_VERSION=$(VERSION)
# The names alone, which the unit lane unsets.
TEST_ENV_NAMES := $(foreach v,$(TEST_ENV) $(E2E_ENV),$(firstword $(subst =, ,$(v))))
# Every package but the end-to-end suite's, which has its own lane.
TEST_PACKAGES = $$(go list ./... | grep -v '/test/e2e')

.PHONY: test
test: verify-tree verify-gen vet lint envtest temporal mcp-servers versitygw browser-driver chart-check ## Run everything CI runs: generated-file check, vet, lint, the chart check, every test on a real API server, Temporal dev server, MCP servers and S3 server, a short fuzz run, then the end-to-end suite on a real single-node cluster.
	$(TEST_ENV) go test $(GO_TEST_FLAGS) $(TEST_PACKAGES)
	$(MAKE) --no-print-directory fuzz
	$(MAKE) --no-print-directory e2e

.PHONY: test-unit
test-unit: ## Run the tests that need no external tool, in a few minutes; the others skip, naming the target that builds their tool.
	env $(addprefix -u ,$(TEST_ENV_NAMES)) go test $(GO_TEST_FLAGS) $(TEST_PACKAGES)

# Fuzz targets, as package:target; each runs for FUZZTIME on top of its
# committed corpus under testdata/fuzz.
FUZZ_TARGETS := ./internal/media:FuzzSniff ./internal/media:FuzzValidateReference
FUZZTIME     ?= 10s

.PHONY: fuzz
fuzz: ## Fuzz the image sniffers and the reference validator for FUZZTIME each.
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} in $${t%%:*} for $(FUZZTIME)"; \
		go test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) "$${t%%:*}"; \
	done

.PHONY: record-histories
record-histories: temporal ## Record this engine version's session histories, which later versions must replay.
	$(TEST_ENV) STEPWISE_RECORD_HISTORIES=$(CURDIR)/internal/engine/testdata/histories/$$(sed -n 's/^const EngineVersion = "\(.*\)"/\1/p' internal/version/version.go) \
		go test -count=1 -run 'TestRecordHistories|TestRecordSpendCounterHistory' ./internal/enginetest/

.PHONY: bench
bench: temporal ## Measure the engine's per-Step overhead and turns per second on a local Temporal server.
	$(TEST_ENV) go test -run '^$$' -bench . -benchtime 200x -count 1 ./internal/enginetest/

# Flags for the scale benchmark, such as SCALEBENCH_FLAGS="--agents 200 --sync-period 0".
SCALEBENCH_FLAGS ?=

.PHONY: bench-scale
bench-scale: envtest ## Apply 1,000 Agents at once to the operator on a real API server: time until all are Ready, writes on a resync where nothing changed, heap.
	go run ./hack/scalebench --assets $(ENVTEST_ASSETS) $(SCALEBENCH_FLAGS)

##@ Build and run

.PHONY: build
build: ## Build the operator, the stock worker, the example worker, the CLI, the gateway and the kubectl plugin into bin/.
	go build -o $(BIN)/manager ./cmd/manager
	go build -o $(BIN)/agent-worker ./cmd/agent-worker
	go build -o $(BIN)/support-worker ./examples/support-worker
	go build -o $(BIN)/stepwise ./cmd/stepwise
	go build -o $(BIN)/stepwise-gateway ./cmd/gateway
	go build -o $(BIN)/kubectl-stepwise ./cmd/kubectl-stepwise

.PHONY: images
images: ## Build the OCI image archives of the operator, the workers and the pause image into bin/images, with no container engine.
	go run ./hack/images --version $(VERSION) --registry $(REGISTRY) --out $(IMAGES_DIR)

.PHONY: push-images
push-images: $(CRANE) ## Push the archives in bin/images (not the tests' e2e-worker) to $(REGISTRY) as <name>:$(VERSION), digests unchanged.
	@archives=$$(ls $(IMAGES_DIR)/*.tar 2>/dev/null | grep -v '/e2e-'); \
	if [ -z "$$archives" ]; then echo "no image archives in $(IMAGES_DIR); run make images first"; exit 1; fi; \
	layout=$$(mktemp -d); trap 'rm -rf "$$layout"' EXIT; \
	for archive in $$archives; do \
		name=$$(basename $$archive .tar); \
		rm -rf "$$layout"/* && tar -xf $$archive -C "$$layout" && \
		$(CRANE) push "$$layout" $(REGISTRY)/$$name:$(VERSION) || exit 1; \
	done

.PHONY: run
run: build envtest temporal ## Run the local default: API server, Temporal, operator, example worker and a demo session; print it; stop it all.
	go run ./hack/local --assets $(ENVTEST_ASSETS) --temporal $(TEMPORAL) --manager $(BIN)/manager \
		--worker $(BIN)/support-worker --samples config/samples

##@ The test cluster

.PHONY: run-cluster
run-cluster: cluster-tools images $(HELM) temporal ## The local default's demo on real pods: a single-node cluster, the chart, the samples, the demo session; then stop it all.
	go run ./hack/cluster demo $(CLUSTER_ARGS) --helm $(HELM) --temporal $(TEMPORAL) \
		--registry $(REGISTRY) --version $(VERSION) $(BIN)/images/*.tar

CLUSTER_DIR ?= /tmp/stepwise-cluster
CLUSTER_ARGS = --kube-bin $(KUBE_DIR) --etcd $(ETCD_DIR)/etcd --sandbox-image $(REGISTRY)/pause:$(VERSION)

.PHONY: cluster
cluster: cluster-tools images ## Start a single-node Kubernetes cluster on this host (root; Debian's containerd, runc, CNI plugins) with the images imported; it keeps running.
	go run ./hack/cluster up --dir $(CLUSTER_DIR) $(CLUSTER_ARGS) $(BIN)/images/*.tar

.PHONY: cluster-down
cluster-down: ## Stop the cluster make cluster started and restore what it changed on the host.
	go run ./hack/cluster down --dir $(CLUSTER_DIR)

.PHONY: e2e
e2e: cluster-tools images previous-release $(HELM) temporal versitygw browser-driver ## Run the end-to-end suite on its own test cluster: the chart, the samples, real worker pods, the web page in Chromium.
	$(TEST_ENV) $(E2E_ENV) go test -count=1 -v -timeout 40m ./test/e2e/

.PHONY: previous-release
previous-release: $(PREVIOUS_ENGINE_DIR)/built ## Build the operator, gateway and end-to-end worker images and keep the chart of the previous engine version's last commit, into bin/.

$(PREVIOUS_ENGINE_DIR)/built:
	@git cat-file -e $(PREVIOUS_ENGINE_COMMIT)^{commit} 2>/dev/null || \
		{ echo "commit $(PREVIOUS_ENGINE_COMMIT), engine $(PREVIOUS_ENGINE_VERSION), is not in this clone: fetch the full history"; exit 1; }
	rm -rf $(PREVIOUS_ENGINE_DIR) && mkdir -p $(PREVIOUS_ENGINE_DIR)/src $(PREVIOUS_ENGINE_DIR)/release
	git archive $(PREVIOUS_ENGINE_COMMIT) | tar -x -C $(PREVIOUS_ENGINE_DIR)/src
	cd $(PREVIOUS_ENGINE_DIR)/src && SOURCE_DATE_EPOCH=$$(git -C $(CURDIR) show -s --format=%ct $(PREVIOUS_ENGINE_COMMIT)) GOFLAGS=-buildvcs=false \
		go run ./hack/images --version $(PREVIOUS_ENGINE_TAG) --registry $(REGISTRY) --revision $(PREVIOUS_ENGINE_COMMIT) --out $(PREVIOUS_ENGINE_DIR)/images
	mv $(PREVIOUS_ENGINE_DIR)/images/operator.tar $(PREVIOUS_ENGINE_DIR)/images/gateway.tar $(PREVIOUS_ENGINE_DIR)/images/e2e-worker.tar $(PREVIOUS_ENGINE_DIR)/release/
	mv $(PREVIOUS_ENGINE_DIR)/src/charts/stepwise $(PREVIOUS_ENGINE_DIR)/release/chart
	rm -rf $(PREVIOUS_ENGINE_DIR)/src $(PREVIOUS_ENGINE_DIR)/images
	touch $@

##@ Tools

.PHONY: envtest
envtest: $(ENVTEST_ASSETS)/.ready ## Build kube-apiserver, kubectl and etcd for envtest into bin/.

$(ENVTEST_ASSETS)/.ready: $(KUBE_DIR)/.built $(ETCD_DIR)/.built
	mkdir -p $(ENVTEST_ASSETS)
	ln -sfn $(KUBE_DIR)/kube-apiserver $(ENVTEST_ASSETS)/kube-apiserver
	ln -sfn $(KUBE_DIR)/kubectl $(ENVTEST_ASSETS)/kubectl
	ln -sfn $(ETCD_DIR)/etcd $(ENVTEST_ASSETS)/etcd
	touch $@

# Kubernetes comes from source: release downloads are not reachable from
# every build machine. Linked with its version, which a build from the module
# would otherwise report as v0.0.0-master.
KUBE_LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=$(word 2,$(subst ., ,$(KUBE_VERSION:v%=v.%))) \
	-X k8s.io/component-base/version.gitMinor=$(word 3,$(subst ., ,$(KUBE_VERSION:v%=v.%))) \
	-X k8s.io/client-go/pkg/version.gitVersion=$(KUBE_VERSION)

# kube-apiserver and kubectl take several minutes to build, once.
$(KUBE_DIR)/.built:
	mkdir -p $(KUBE_DIR)
	cd hack/tools/kube && CGO_ENABLED=0 go build -ldflags "$(KUBE_LDFLAGS)" -o $(KUBE_DIR)/ \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl
	touch $@

.PHONY: cluster-tools
cluster-tools: $(KUBE_DIR)/.cluster-built $(KUBE_DIR)/.built $(ETCD_DIR)/.built ## Build the kubelet, kube-controller-manager and kube-scheduler the test cluster runs into bin/.

# The kubelet alone takes about five minutes and 2 GB, once.
$(KUBE_DIR)/.cluster-built:
	mkdir -p $(KUBE_DIR)
	cd hack/tools/kube && CGO_ENABLED=0 go build -ldflags "$(KUBE_LDFLAGS)" -o $(KUBE_DIR)/ \
		k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler
	touch $@

$(ETCD_DIR)/.built:
	mkdir -p $(ETCD_DIR)
	cd hack/tools/etcd && go build -o $(ETCD_DIR)/etcd go.etcd.io/etcd/server/v3
	touch $@

.PHONY: temporal
temporal: $(TEMPORAL) ## Build the Temporal server the tests and the local default run, into bin/.

# The Temporal server comes from source for the same reason as kube-apiserver.
$(TEMPORAL):
	mkdir -p $(dir $@)
	cd hack/tools/temporal && go build -o $@ go.temporal.io/server/cmd/server

.PHONY: versitygw
versitygw: $(VERSITYGW) ## Build the S3 server the media store tests run (versitygw, posix backend), into bin/.

$(VERSITYGW):
	cd hack/tools/versitygw && go build -o $@ github.com/versity/versitygw/cmd/versitygw

.PHONY: monitoring-crds
monitoring-crds: $(MONITORING_CRDS)/.ready ## Generate the Prometheus Operator's PodMonitor and ServiceMonitor CRDs from its pinned API into bin/, for the chart checks.

$(MONITORING_CRDS)/.ready: $(CONTROLLER_GEN)
	rm -rf $(MONITORING_CRDS) $(MONITORING_CRDS).all
	cd hack/tools/monitoring && $(CONTROLLER_GEN) crd paths=github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1 output:crd:dir=$(MONITORING_CRDS).all
	mkdir -p $(MONITORING_CRDS)
	mv $(MONITORING_CRDS).all/monitoring.coreos.com_podmonitors.yaml $(MONITORING_CRDS).all/monitoring.coreos.com_servicemonitors.yaml $(MONITORING_CRDS)/
	rm -rf $(MONITORING_CRDS).all
	touch $@

.PHONY: mcp-servers
mcp-servers: $(MCP_SERVERS)/.ready ## Install the reference MCP servers the tests run (server-everything, server-filesystem) from npm into bin/.

$(MCP_SERVERS)/.ready: hack/tools/mcp-servers/package.json hack/tools/mcp-servers/package-lock.json
	mkdir -p $(MCP_SERVERS)
	cp hack/tools/mcp-servers/package.json hack/tools/mcp-servers/package-lock.json $(MCP_SERVERS)/
	cd $(MCP_SERVERS) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

.PHONY: browser-driver
browser-driver: $(BROWSER_DRIVER)/.ready ## Install playwright-core, which drives the system's headless Chromium in the web page's tests, from npm into bin/.

$(BROWSER_DRIVER)/.ready: hack/tools/browser/package.json hack/tools/browser/package-lock.json
	mkdir -p $(BROWSER_DRIVER)
	cp hack/tools/browser/package.json hack/tools/browser/package-lock.json $(BROWSER_DRIVER)/
	cd $(BROWSER_DRIVER) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(CONTROLLER_GEN):
	cd hack/tools/controller-gen && go build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

$(GOLANGCI_LINT):
	cd hack/tools/golangci-lint && go build -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

.PHONY: crane
crane: $(CRANE) ## Build crane, which pushes the image archives and serves a registry for the push test, into bin/.

$(CRANE):
	cd hack/tools/crane && go build -o $@ github.com/google/go-containerregistry/cmd/crane

$(WORKFLOWCHECK):
	cd hack/tools/workflowcheck && go build -o $@ go.temporal.io/sdk/contrib/tools/workflowcheck

.PHONY: helm kubeconform
helm: $(HELM) ## Build the pinned Helm into bin/.
kubeconform: $(KUBECONFORM) ## Build the pinned kubeconform into bin/.

$(HELM):
	cd hack/tools/helm && go build -o $@ helm.sh/helm/v4/cmd/helm

$(KUBECONFORM):
	cd hack/tools/kubeconform && go build -o $@ github.com/yannh/kubeconform/cmd/kubeconform
