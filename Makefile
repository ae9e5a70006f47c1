# gpureclaim. `make run` runs the system on simulated GPUs (or the node's real
# ones), `make test` runs every test. Tools the tests need are built from the
# Go module proxy at pinned versions into bin/ (ignored), once.

SHELL := /bin/bash
GO    ?= go
BIN   := $(CURDIR)/bin
# go-nvml's cgo header marks old calls deprecated; that is not our warning to read.
export CGO_CFLAGS := -O2 -g -Wno-deprecated-declarations

PROMETHEUS_VERSION := v0.316.0
PROMETHEUS_RELEASE := 3.16.0

VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS  := -X github.com/prometheus/common/version.Version=$(VERSION) \
            -X github.com/prometheus/common/version.Revision=$(REVISION) \
            -X github.com/prometheus/common/version.Branch=main

TOOLS := $(BIN)/promtool $(BIN)/prometheus

.PHONY: all build run test bench lint tools rules dashboards clean device-check

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/gpureclaim-exporter ./exporter

## run: the exporter on the node's GPUs, or on the simulated demo node when there are none.
run: build
	@if [ -e /dev/nvidiactl ] && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then \
		echo "NVIDIA GPUs found: exporting them on :9847/metrics"; \
		exec $(BIN)/gpureclaim-exporter; \
	else \
		echo "No NVIDIA GPU here: running the simulated demo node on :9847/metrics"; \
		exec $(BIN)/gpureclaim-exporter --simulate=demo --simulate.speed=60 --sample.interval=1s; \
	fi

## test: vet, then every test with the pinned tools required.
test: tools lint
	GPURECLAIM_REQUIRE_TOOLS=1 $(GO) test -count=1 ./...

## rules: regenerate the committed rules from the default config.
rules:
	$(GO) run ./rules/gen -o rules/gpureclaim.rules.yml

## dashboards: regenerate the committed Grafana dashboards.
dashboards:
	$(GO) run ./dashboards/gen -o dashboards

## bench: benchmarks with allocations.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

lint:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

tools: $(TOOLS)

# Built once per version: the stamp names the version, so a bump rebuilds.
$(BIN)/.prometheus-$(PROMETHEUS_VERSION):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install -ldflags '-X github.com/prometheus/common/version.Version=$(PROMETHEUS_RELEASE)' \
		github.com/prometheus/prometheus/cmd/promtool@$(PROMETHEUS_VERSION) \
		github.com/prometheus/prometheus/cmd/prometheus@$(PROMETHEUS_VERSION)
	@touch $@

$(BIN)/promtool $(BIN)/prometheus: $(BIN)/.prometheus-$(PROMETHEUS_VERSION)
	@test -x $@ || { rm -f $< && $(MAKE) --no-print-directory $<; }

## device-check: on a machine with a real GPU, run the exporter while a matmul loads the GPU.
device-check:
	./hack/device-check.sh

clean:
	rm -rf $(BIN) .cache .run
