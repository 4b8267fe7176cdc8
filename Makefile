# kubeslurm — build, local cluster and tests.
# `make up` brings up the whole local system; `make test` runs every test (unit, then
# end-to-end on a local cluster it brings up and takes down again).

SHELL := /bin/bash
BIN   := $(CURDIR)/bin
GO    ?= go

.PHONY: all build scheduler controller podrunner helm tools slurm-root up down status up-slurmcluster down-slurmcluster test unit e2e bench bench-e2e bench-scale fmt vet clean generate

all: build

## build: the scheduler and controller binaries into ./bin, and the local cluster's pod runner
build: scheduler controller podrunner

## scheduler, controller: one binary each (Dockerfile.scheduler/.controller run these with
## CGO_ENABLED=0 BIN=/out)
scheduler:
	$(GO) build -o $(BIN)/kubeslurm-scheduler ./cmd/scheduler
controller:
	$(GO) build -o $(BIN)/kubeslurm-controller ./cmd/controller
podrunner:
	$(GO) build -o $(BIN)/kubeslurm-podrunner ./deploy/local/podrunner

## helm: helm alone (rebuilt only on version change)
helm:
	deploy/local/build-tools.sh helm

## tools: etcd, kube-apiserver, kube-controller-manager, kubectl, kwok, helm, the JobSet and LWS controllers
## (rebuilt only on version change)
tools:
	deploy/local/build-tools.sh

## slurm-root: the Debian root filesystem with Slurm (made once per machine, cached)
slurm-root:
	deploy/local/slurm-root.sh

## up: the whole local system — Kubernetes, Slurm, our scheduler and controller — and an example pod
up: build tools slurm-root
	deploy/local/up.sh

## down: stop everything `up` started (by PID file); leaves no mounts behind
down:
	deploy/local/down.sh

status:
	deploy/local/status.sh

## up-slurmcluster: on the running local system, a Slurm that kubeslurm runs from a SlurmCluster
## (workers on two kwok nodes), a kubeslurm release placing pods through it, and an example pod
up-slurmcluster: up
	deploy/local/slurmcluster.sh up

## down-slurmcluster: remove what up-slurmcluster added (make down does too)
down-slurmcluster:
	deploy/local/slurmcluster.sh down

## generate: our CRDs (manifests/crds/slurm.kubeslurm.io_*) and DeepCopy from api/, by controller-gen
generate:
	hack/generate.sh

## unit: unit tests (no cluster needed); charts/kubeslurm's lint and golden files
## (UPDATE_GOLDEN=1 refreshes them, and manifests/ rendered from the chart); generated code
unit: helm
	hack/chart.sh --check
	hack/crds.sh --check
	hack/generate.sh --check
	$(GO) test ./pkg/... ./cmd/... ./deploy/...

## e2e: end-to-end tests on the local cluster (brings it up if needed); their output is
## kept in .local/e2e.log
e2e: up
	set -o pipefail; $(GO) test -count=1 -timeout 70m -v ./e2e/... 2>&1 | tee .local/e2e.log

## test: everything, unit to end-to-end; the cluster is taken down afterwards, and when an
## end-to-end test failed, which one and why is the last thing printed
test: unit
	@rm -f .local/e2e.log; $(MAKE) e2e; rc=$$?; $(MAKE) down; \
	if [ $$rc -ne 0 ] && [ -f .local/e2e.log ]; then \
		echo "==> failed end-to-end tests (whole output: .local/e2e.log)"; hack/test-failures.sh .local/e2e.log; \
	fi; exit $$rc

## bench: scheduling-attempt cost at 100 and 5000 Slurm jobs; a SlurmCluster's reconcile at 100, 1000 and 5000 nodes
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/scheduler/...
	$(GO) test -run '^$$' -bench ReconcileSteadyState -benchmem ./pkg/controller/slurmcluster/

## bench-e2e: lag of each direction (pod → bound, scancel → pod gone, drains) on the running local cluster, p50/p99;
## and, for pod groups of 8, 64 and 256 on 256 extra nodes, Slurm allocation → last member bound
bench-e2e:
	$(GO) test -run '^$$' -bench 'Latency' -benchtime=20x -timeout 30m ./e2e/...
	$(GO) test -run '^$$' -bench 'GroupAllocationToBound' -benchtime=3x -timeout 30m ./e2e/...

## bench-scale: on the running local cluster, kubeslurm at 1,100 nodes beside 10,000 queued sbatch
## jobs: Slurm read traffic idle and in a burst of 2,000 pods, pods/s against kube-scheduler,
## latencies, gangs up to 1,024, memory (sizes: KUBESLURM_BENCH_NODES, _QUEUED, _PODS, _IDLE)
bench-scale: up
	cd e2e && $(GO) test -run '^$$' -bench 'BenchmarkScale$$' -benchtime=1x -timeout 60m

fmt:
	gofmt -l -w cmd pkg e2e

vet:
	$(GO) vet ./...

clean: down
	rm -rf $(BIN) .local
