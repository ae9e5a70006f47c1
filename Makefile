# gpureclaim. `make run` runs the system on simulated GPUs (or the node's real
# ones), `make test` runs every test. Tools the tests need are built from the
# Go module proxy at pinned versions into bin/ (ignored), once.

SHELL := /bin/bash
GO    ?= go
BIN   := $(CURDIR)/bin
# go-nvml's cgo header marks old calls deprecated; that is not our warning to read.
export CGO_CFLAGS := -O2 -g -Wno-deprecated-declarations

PROMETHEUS_VERSION   := v0.316.0
PROMETHEUS_RELEASE   := 3.16.0
ALERTMANAGER_VERSION := v0.35.0
KUBE_VERSION         := v1.37.2
KWOK_VERSION         := v0.8.0
HELM_VERSION         := v3.22.0
GOLANGCI_LINT_VERSION := v2.15.0
# controller-gen, which writes the GPUReclaim CRD from its Go types.
CONTROLLER_TOOLS_VERSION := v0.23.0
# A real SMTP server, with an API to read what it was sent (the e-mail notifier's tests).
MAILPIT_VERSION      := v1.33.1
# Distributed engines the rules are evaluated on beside Prometheus.
VICTORIAMETRICS_VERSION := v1.151.0
THANOS_VERSION          := v0.41.0
# prometheus-operator's CRDs, for validating the chart's ServiceMonitor,
# PrometheusRule and AlertmanagerConfig on a real apiserver.
PROMETHEUS_OPERATOR_VERSION := v0.94.0
# Upstream CRDs of the workload kinds the reclaimer stops, for its tests on
# a real apiserver (the rest are in reclaimer/kube/testdata/crds).
KUEUE_VERSION             := v0.17.0
KUBERAY_VERSION           := v1.5.0
TRAINING_OPERATOR_VERSION := v1.8.1
TRAINER_VERSION           := v2.0.0
WORKLOAD_CRDS_STAMP := $(BIN)/workload-crds/.operators-$(KUEUE_VERSION)-$(KUBERAY_VERSION)-$(TRAINING_OPERATOR_VERSION)-$(TRAINER_VERSION)

VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS  := -X github.com/prometheus/common/version.Version=$(VERSION) \
            -X github.com/prometheus/common/version.Revision=$(REVISION) \
            -X github.com/prometheus/common/version.Branch=main

# The tools are built without symbol tables and DWARF (-s -w): nothing
# debugs them, and their links take half as long (the Kubernetes binaries
# 18 s -> 9 s).
TOOL_LDFLAGS := -s -w
# How a tool that go install builds as it is goes into $(BIN).
TOOL_INSTALL = GOBIN=$(BIN) $(GO) install -ldflags '$(TOOL_LDFLAGS)'

KUBE_BINS := $(BIN)/kube-apiserver $(BIN)/kube-controller-manager $(BIN)/kube-scheduler $(BIN)/kubectl
# The workload controllers the reclaimer's stops are tested against.
OPERATORS := $(BIN)/ray-operator $(BIN)/training-operator.v1 $(BIN)/kueue
TOOLS := $(BIN)/promtool $(BIN)/prometheus $(BIN)/alertmanager $(BIN)/amtool $(BIN)/etcd $(KUBE_BINS) $(BIN)/kwok $(BIN)/kwok-stages.yaml $(BIN)/helm $(BIN)/crds/.$(PROMETHEUS_OPERATOR_VERSION) $(WORKLOAD_CRDS_STAMP) $(OPERATORS) $(BIN)/golangci-lint $(BIN)/mailpit $(BIN)/controller-gen $(BIN)/victoria-metrics $(BIN)/vmalert $(BIN)/thanos

.PHONY: all build run demo test e2e soak bench bench-rules lint tools chromium rules dashboards crds manifests images backtest clean device-check

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS) -extldflags=-Wl,-z,lazy' -o $(BIN)/gpureclaim-exporter ./exporter
	$(GO) build -ldflags '$(LDFLAGS) -extldflags=-Wl,-z,lazy' -o $(BIN)/gpureclaim-exporter-sim ./exporter/simulated
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/gpureclaim-reclaimer ./reclaimer
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/gpureclaim-backtest ./backtest
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/gpureclaim-advisor ./advisor

## run: on a GPU node, the exporter on its GPUs; elsewhere the whole system on a simulated node.
run: build
	@if [ -e /dev/nvidiactl ] && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then \
		echo "NVIDIA GPUs found: exporting them on :9847/metrics (make demo runs the simulated system)"; \
		exec $(BIN)/gpureclaim-exporter; \
	else \
		$(MAKE) --no-print-directory demo; \
	fi

## demo: the whole system on loopback on a simulated 8-GPU node, with a real
## Prometheus, Alertmanager and Kubernetes control plane (built the first time).
demo: build $(TOOLS)
	@$(GO) build -o $(BIN)/gpureclaim-demo ./hack/demo
	@exec $(BIN)/gpureclaim-demo

## test: vet, then every test with the pinned tools required, the end-to-end suite included.
# The tools and the lint are made side by side, one job a CPU (a link
# leaves all but one idle), unless make was given its own -j. The
# end-to-end suite runs after the rest, alone: its compressed clock (a
# second is a scenario minute) wants the CPUs to itself.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
test:
	@$(MAKE) --no-print-directory $(if $(findstring j,$(MAKEFLAGS)),,-j$(JOBS) --output-sync=target) tools lint
	GPURECLAIM_REQUIRE_TOOLS=1 $(GO) test -count=1 -timeout 30m $$($(GO) list ./... | grep -v /e2e$$)
	GPURECLAIM_REQUIRE_TOOLS=1 $(GO) test -count=1 -timeout 30m ./e2e/

## e2e: the whole system end to end; the timings and the status page screenshot land in out/e2e/_artifacts.
e2e: tools build
	@mkdir -p out/e2e
	GPURECLAIM_REQUIRE_TOOLS=1 $(GO) test -count=1 -v -run TestEndToEnd -artifacts -outputdir $(CURDIR)/out/e2e ./e2e/

## soak: two reclaimers on a real apiserver with 1,000 reclaims in flight while the leader is killed and paused again and again (make test runs 200).
soak: tools
	GPURECLAIM_REQUIRE_TOOLS=1 GPURECLAIM_SOAK_RECLAIMS=1000 $(GO) test -count=1 -v -timeout 30m -run TestSoak ./reclaimer/

CHART := deploy/helm/gpureclaim

## rules: regenerate the committed rules, for gpureclaim's exporter and for dcgm-exporter (and the chart's copies).
rules:
	$(GO) run ./rules/gen -o rules/gpureclaim.rules.yml
	$(GO) run ./rules/gen -config rules/dcgm.yaml -o rules/gpureclaim-dcgm.rules.yml
	$(GO) run ./rules/gen -config rules/classes.yaml -o rules/gpureclaim-classes.rules.yml
	cp rules/gpureclaim.rules.yml rules/gpureclaim-dcgm.rules.yml $(CHART)/files/

## dashboards: regenerate the committed Grafana dashboards (and the chart's copies).
dashboards:
	$(GO) run ./dashboards/gen -o dashboards
	rm -f $(CHART)/files/dashboards/*.json && cp dashboards/*.json $(CHART)/files/dashboards/

## crds: write, from the GPUReclaim's Go types (api/v1alpha1), their deepcopy functions and the CRD into the chart (keeping the file's opening comment).
CRD := $(CHART)/crds/gpureclaims.gpureclaim.io.yaml
crds: $(BIN)/controller-gen
	$(BIN)/controller-gen object paths=./api/...
	{ sed -n '/^#/!q;p' $(CRD); $(BIN)/controller-gen crd:crdVersions=v1 paths=./api/... output:stdout; } > $(CRD).tmp && mv $(CRD).tmp $(CRD)

## manifests: the CRD from its types, and the chart rendered with its defaults into deploy/manifests.
manifests: crds $(BIN)/helm
	$(GO) run ./deploy/gen -helm $(BIN)/helm -chart $(CHART) -o deploy/manifests

## images: the exporter's and the reclaimer's container images (needs a container engine).
images:
	docker build --target exporter --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) -t gpureclaim-exporter:$(VERSION) .
	docker build --target reclaimer --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) -t gpureclaim-reclaimer:$(VERSION) .

## backtest: the shared trace through the old and new defaults and two simple rules (docs/backtest).
backtest: build
	./hack/backtest.sh

## bench: benchmarks with allocations.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

## bench-rules: the rules' cost in a real Prometheus over a day of series for 1,000 and 10,000 simulated GPUs, and sharded over 10,000; then 10,000 in 4 clusters on Prometheus, on VictoriaMetrics with vmalert and on Thanos Ruler.
bench-rules: $(BIN)/prometheus $(BIN)/victoria-metrics $(BIN)/vmalert $(BIN)/thanos
	$(GO) run ./hack/rulesbench -gpus 1000 -prometheus $(BIN)/prometheus
	$(GO) run ./hack/rulesbench -gpus 10000 -prometheus $(BIN)/prometheus
	$(GO) run ./rules/gen -config hack/rulesbench/shards-256.yaml -o $(BIN)/rules-shards-256.yml
	$(GO) run ./hack/rulesbench -gpus 10000 -shards 256 -interval 1m -evaluations 4 -rules $(BIN)/rules-shards-256.yml -prometheus $(BIN)/prometheus
	$(GO) run ./hack/rulesbench -gpus 10000 -clusters 4 -evaluations 3 -prometheus $(BIN)/prometheus
	$(GO) run ./hack/rulesbench -gpus 10000 -clusters 4 -evaluations 3 -victoria-metrics $(BIN)/victoria-metrics -vmalert $(BIN)/vmalert
	$(GO) run ./hack/rulesbench -gpus 10000 -clusters 4 -evaluations 3 -prometheus $(BIN)/prometheus -thanos $(BIN)/thanos

## lint: go vet, gofmt, and golangci-lint with .golangci.yml (errcheck, staticcheck, unused, ...).
lint: $(BIN)/golangci-lint
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(BIN)/golangci-lint run ./...

tools: $(TOOLS) chromium

# From the machine's packages: headless Chromium for the browser tests,
# systemd-analyze for checking the systemd units, and a single-node Slurm
# (munge, slurmctld, slurmd, slurmrestd; Debian's 22.05) for the Slurm tests.
chromium:
	@missing=""; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v systemd-analyze >/dev/null || missing="$$missing systemd"; \
	PATH=$$PATH:/usr/sbin; \
	command -v munged >/dev/null || missing="$$missing munge"; \
	command -v slurmctld >/dev/null || missing="$$missing slurmctld"; \
	command -v slurmd >/dev/null || missing="$$missing slurmd"; \
	command -v slurmrestd >/dev/null || missing="$$missing slurmrestd"; \
	command -v scontrol >/dev/null || missing="$$missing slurm-client"; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian's$$missing for the tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# Built once per version: the stamp names the version, so a bump rebuilds.
$(BIN)/.prometheus-$(PROMETHEUS_VERSION):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install -ldflags '$(TOOL_LDFLAGS) -X github.com/prometheus/common/version.Version=$(PROMETHEUS_RELEASE)' \
		github.com/prometheus/prometheus/cmd/promtool@$(PROMETHEUS_VERSION) \
		github.com/prometheus/prometheus/cmd/prometheus@$(PROMETHEUS_VERSION)
	@touch $@

$(BIN)/promtool $(BIN)/prometheus: $(BIN)/.prometheus-$(PROMETHEUS_VERSION)
	@test -x $@ || { rm -f $< && $(MAKE) --no-print-directory $<; }

# Alertmanager's module ships without its web UI's build output, which
# go install needs: build from a copy with empty UI files (the API is all
# gpureclaim uses).
$(BIN)/alertmanager $(BIN)/amtool &:
	@mkdir -p $(BIN) .cache
	dir=$$($(GO) mod download -json github.com/prometheus/alertmanager@$(ALERTMANAGER_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p'); \
	rm -rf .cache/alertmanager && cp -r "$$dir" .cache/alertmanager && chmod -R u+w .cache/alertmanager && \
	mkdir -p .cache/alertmanager/ui/app/dist/elm .cache/alertmanager/ui/app/dist/mantine && \
	touch .cache/alertmanager/ui/app/dist/elm/index.html .cache/alertmanager/ui/app/dist/mantine/index.html && \
	cd .cache/alertmanager && $(GO) build -o $(BIN)/ -ldflags '$(TOOL_LDFLAGS) -X github.com/prometheus/common/version.Version=$(ALERTMANAGER_VERSION:v%=%)' ./cmd/alertmanager ./cmd/amtool

# etcd and Kubernetes refuse go install (replace directives): build them
# from the wrapper modules in hack/tools, which pin every staging module.
$(BIN)/etcd: hack/tools/etcd/go.mod hack/tools/etcd/go.sum
	@mkdir -p $(BIN)
	cd hack/tools/etcd && $(GO) build -ldflags '$(TOOL_LDFLAGS)' -o $(BIN)/etcd go.etcd.io/etcd/server/v3

$(KUBE_BINS) &: hack/tools/kube/go.mod hack/tools/kube/go.sum
	@mkdir -p $(BIN)
	cd hack/tools/kube && $(GO) build -o $(BIN)/ \
		-ldflags '$(TOOL_LDFLAGS) -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37' \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl

$(BIN)/.golangci-lint-$(GOLANGCI_LINT_VERSION):
	@mkdir -p $(BIN)
	$(TOOL_INSTALL) github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	@touch $@

$(BIN)/golangci-lint: $(BIN)/.golangci-lint-$(GOLANGCI_LINT_VERSION)
	@test -x $@ || { rm -f $< && $(MAKE) --no-print-directory $<; }

$(BIN)/.mailpit-$(MAILPIT_VERSION):
	@mkdir -p $(BIN)
	$(TOOL_INSTALL) github.com/axllent/mailpit@$(MAILPIT_VERSION)
	@touch $@

$(BIN)/.controller-gen-$(CONTROLLER_TOOLS_VERSION):
	@mkdir -p $(BIN)
	$(TOOL_INSTALL) sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
	@touch $@

$(BIN)/controller-gen: $(BIN)/.controller-gen-$(CONTROLLER_TOOLS_VERSION)
	@test -x $@ || { rm -f $< && $(MAKE) --no-print-directory $<; }

$(BIN)/mailpit: $(BIN)/.mailpit-$(MAILPIT_VERSION)
	@test -x $@ || { rm -f $< && $(MAKE) --no-print-directory $<; }

# VictoriaMetrics single-node and vmalert, which evaluates the rules over it.
$(BIN)/.victoriametrics-$(VICTORIAMETRICS_VERSION):
	@mkdir -p $(BIN)
	$(TOOL_INSTALL) \
		github.com/VictoriaMetrics/VictoriaMetrics/app/victoria-metrics@$(VICTORIAMETRICS_VERSION) \
		github.com/VictoriaMetrics/VictoriaMetrics/app/vmalert@$(VICTORIAMETRICS_VERSION)
	@touch $@

$(BIN)/victoria-metrics $(BIN)/vmalert: $(BIN)/.victoriametrics-$(VICTORIAMETRICS_VERSION)
	@test -x $@ || { rm -f $< && $(MAKE) --no-print-directory $<; }

# Thanos (receive, query, sidecar and rule): go install refuses its replace directives, so
# it is built from a copy of its module, with the slicelabels tag its own
# build uses (its gRPC codec reads labels as slices).
$(BIN)/.thanos-$(THANOS_VERSION):
	@mkdir -p $(BIN) .cache
	dir=$$($(GO) mod download -json github.com/thanos-io/thanos@$(THANOS_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p'); \
	rm -rf .cache/thanos && cp -r "$$dir" .cache/thanos && chmod -R u+w .cache/thanos && \
	cd .cache/thanos && $(GO) build -tags slicelabels -ldflags '$(TOOL_LDFLAGS)' -o $(BIN)/thanos ./cmd/thanos
	@touch $@

$(BIN)/thanos: $(BIN)/.thanos-$(THANOS_VERSION)
	@test -x $@ || { rm -f $< && $(MAKE) --no-print-directory $<; }

$(BIN)/kwok:
	@mkdir -p $(BIN)
	$(TOOL_INSTALL) sigs.k8s.io/kwok/cmd/kwok@$(KWOK_VERSION)

# kwok's stages for fake nodes that come up at once and pods that run (a
# Job's pods too: kwok's pod-complete stage would end them at once, and a
# training Job holds its GPU until it is done). Rebuilt when this file changes.
$(BIN)/kwok-stages.yaml: Makefile
	@mkdir -p $(BIN)
	dir=$$($(GO) mod download -json sigs.k8s.io/kwok@$(KWOK_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p'); \
	for f in node/fast/node-initialize node/heartbeat/node-heartbeat pod/fast/pod-ready pod/fast/pod-delete; do \
		cat "$$dir/kustomize/stage/$$f.yaml"; echo "---"; \
	done > $@.tmp && mv $@.tmp $@

$(BIN)/helm:
	@mkdir -p $(BIN)
	$(TOOL_INSTALL) helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

$(BIN)/crds/.$(PROMETHEUS_OPERATOR_VERSION):
	@mkdir -p $(BIN)/crds
	dir=$$($(GO) mod download -json github.com/prometheus-operator/prometheus-operator@$(PROMETHEUS_OPERATOR_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p'); \
	for k in servicemonitors prometheusrules alertmanagerconfigs; do \
		cp "$$dir/example/prometheus-operator-crd/monitoring.coreos.com_$$k.yaml" $(BIN)/crds/ && chmod u+w $(BIN)/crds/monitoring.coreos.com_$$k.yaml; \
	done
	@touch $@

# KubeRay, the Kubeflow training-operator and Kueue, built from the Go
# module proxy at the versions whose CRDs are installed: the reclaimer's
# tests watch what each controller does with a stop.
$(BIN)/.ray-operator-$(KUBERAY_VERSION):
	@mkdir -p $(BIN)
	$(TOOL_INSTALL) github.com/ray-project/kuberay/ray-operator@$(KUBERAY_VERSION)
	@touch $@

$(BIN)/.training-operator-$(TRAINING_OPERATOR_VERSION):
	@mkdir -p $(BIN)
	$(TOOL_INSTALL) github.com/kubeflow/training-operator/cmd/training-operator.v1@$(TRAINING_OPERATOR_VERSION)
	@touch $@

$(BIN)/.kueue-$(KUEUE_VERSION):
	@mkdir -p $(BIN)
	$(TOOL_INSTALL) sigs.k8s.io/kueue/cmd/kueue@$(KUEUE_VERSION)
	@touch $@

$(BIN)/ray-operator: $(BIN)/.ray-operator-$(KUBERAY_VERSION)
	@test -x $@ || { rm -f $< && $(MAKE) --no-print-directory $<; }
$(BIN)/training-operator.v1: $(BIN)/.training-operator-$(TRAINING_OPERATOR_VERSION)
	@test -x $@ || { rm -f $< && $(MAKE) --no-print-directory $<; }
$(BIN)/kueue: $(BIN)/.kueue-$(KUEUE_VERSION)
	@test -x $@ || { rm -f $< && $(MAKE) --no-print-directory $<; }

# The CRDs as each project ships them in its Go module, pinned: those the
# reclaimer's kinds need, and every CRD the three controllers watch (they
# will not start without them).
$(WORKLOAD_CRDS_STAMP):
	@rm -rf $(BIN)/workload-crds $(BIN)/operator-crds && mkdir -p $(BIN)/workload-crds $(BIN)/operator-crds
	set -e; moddir() { $(GO) mod download -json "$$1" | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p'; }; \
	kueue=$$(moddir sigs.k8s.io/kueue@$(KUEUE_VERSION)); \
	ray=$$(moddir github.com/ray-project/kuberay/ray-operator@$(KUBERAY_VERSION)); \
	training=$$(moddir github.com/kubeflow/training-operator@$(TRAINING_OPERATOR_VERSION)); \
	trainer=$$(moddir github.com/kubeflow/trainer/v2@$(TRAINER_VERSION)); \
	cp "$$kueue/config/components/crd/bases/kueue.x-k8s.io_workloads.yaml" \
	   "$$ray/config/crd/bases/ray.io_rayclusters.yaml" "$$ray/config/crd/bases/ray.io_rayjobs.yaml" \
	   "$$training/manifests/base/crds/kubeflow.org_pytorchjobs.yaml" \
	   "$$trainer/manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml" $(BIN)/workload-crds/; \
	cp "$$kueue"/config/components/crd/bases/*.yaml "$$ray"/config/crd/bases/*.yaml \
	   "$$training/manifests/base/crds/kubeflow.org_pytorchjobs.yaml" $(BIN)/operator-crds/; \
	chmod u+w $(BIN)/workload-crds/*.yaml $(BIN)/operator-crds/*.yaml
	@touch $@

## device-check: on a machine with a real GPU, run the exporter while a matmul loads the GPU.
device-check:
	./hack/device-check.sh

clean:
	rm -rf $(BIN) .cache .run
