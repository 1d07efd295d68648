# Skiff. `make demo` and `make test` work on a fresh Debian 12 machine as root.
GO      ?= go
BIN     := bin
CMDS    := skiff-controller skiff-agent skiffctl skiff-cni skiff-deviceplugin
GOFLAGS ?=
export GOFLAGS

.PHONY: all build deps generate test test-kernel test-kernel-long test-offload-fleet test-k8s k8s-setup image lint demo demo-k8s bench bench-k8s bench-kernel bench-kernel-fleet scale clean

all: build

build:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(CMDS))

deps:
	./hack/deps.sh

generate: deps
	./hack/generate.sh

# All tests: unit, privileged and end-to-end (need root), the real
# Kubernetes cluster (test/k8s) and the kernel VM (test-kernel). The kernel
# VM's setup comes first (test/e2e boots a guest with its kernel), and the
# Kubernetes binaries' (cached by version: a cold build takes 10-20
# minutes). The NetworkPolicy truth tables on software nodes (test/e2e,
# IPv4 and IPv6) run as a step of their own with -v, so that the log shows
# every case's matrix matching; the ./... step leaves them out (-skip).
TRUTH_TESTS = ^TestPolicyTruthTable(IPv6)?$$
test: deps build lint
	./hack/kernelvm/setup.sh
	./hack/k8s/setup.sh
	$(GO) test -count=1 -timeout 30m -skip '$(TRUTH_TESTS)' ./...
	$(GO) test -count=1 -timeout 30m -v -run '$(TRUTH_TESTS)' ./test/e2e/
	$(MAKE) test-kernel

# Kubernetes components built from the Kubernetes modules, containerd and
# runc from Debian (hack/k8s/setup.sh; cached under /var/cache/skiff-k8s).
k8s-setup:
	./hack/k8s/setup.sh

# Skiff's image (the four static binaries), without a registry:
# bin/skiff-image.tar, for `ctr -n k8s.io images import`, tagged
# skiff.local/skiff:dev (what deploy/kubernetes names) and :<git describe>.
IMAGE_VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
image: build
	$(GO) run ./hack/image skiff --bin-dir $(BIN) --out $(BIN)/skiff-image.tar --tag skiff.local/skiff:dev --tag skiff.local/skiff:$(IMAGE_VERSION)

# Only the real-cluster tests (test/k8s).
test-k8s: deps build k8s-setup
	$(GO) test -count=1 -timeout 30m ./test/k8s/...

# Tests that need what the host kernel lacks (netdevsim, switchdev, flower),
# run inside Debian's kernel under qemu (docs/kernelvm.md).
KERNELVM_PKGS := ./offload/eswitch ./offload/vf ./deviceplugin ./datapath/offload ./test/kernelvm/vmtest ./test/kernelvm/agentvm ./test/kernelvm/offloadvm ./test/kernelvm/policyvm ./test/kernelvm/ctvm ./test/kernelvm/offloadpolicyvm ./test/kernelvm/vmportvm ./test/kernelvm/vfpodvm ./test/kernelvm/dpuvm ./test/kernelvm/egressvm ./internal/nl/nltest
# The truth tables on offload nodes: their output is shown even when they
# pass (run.sh -show: each log message's first line, every case's).
KERNELVM_SHOW := ./test/kernelvm/offloadpolicyvm
# test-kernel runs every test of these packages, with -short: the long
# loops (vfpodvm's 100 VF ADD/DEL cycles, dpuvm's 20 VF pods) run a
# smaller count. The truth table on offload nodes runs in full, IPv4 and
# IPv6 (TestPolicyTruthOffload, TestPolicyTruthOffloadIPv6: 4-5 minutes
# each). The boot takes about 34 minutes on 2 cores without KVM
# (docs/kernelvm.md, Timings); its limit leaves room for a busy host.
# test-kernel-long runs the loops in full and builds the files tagged
# kernelvm_long too: offloadpolicyvm's TestPolicyTruthSoftware, the control
# (the truth table on software nodes in the VM).
# internal/nl/tc's other tests are the host's (its UAPI headers, iproute2):
# only its guest test runs in the VM.
test-kernel:
	./hack/kernelvm/setup.sh
	./hack/kernelvm/run.sh -short -timeout 60m -show $(KERNELVM_SHOW) $(KERNELVM_PKGS)
	./hack/kernelvm/run.sh -short -timeout 5m -run TestWatchFilters ./internal/nl/tc

# test-offload-fleet runs the offload fleet test at its whole size: three
# offload nodes, 250 local endpoints on one, 1,000 stand-in nodes.
test-offload-fleet:
	./hack/kernelvm/setup.sh
	./hack/kernelvm/run.sh -v -memory 6144 -timeout 60m -run TestOffloadFleet ./test/kernelvm/offloadvm

test-kernel-long:
	./hack/kernelvm/setup.sh
	./hack/kernelvm/run.sh -tags kernelvm_long -memory 6144 -timeout 90m -show $(KERNELVM_SHOW) $(KERNELVM_PKGS)
	./hack/kernelvm/run.sh -timeout 5m -run TestWatchFilters ./internal/nl/tc

# The kernel VM's files tagged kernelvm_long are vetted too.
lint:
	$(GO) vet ./...
	$(GO) vet -tags kernelvm_long ./test/kernelvm/...
	$(GO) run ./hack/importcheck
	./hack/nobinaries.sh
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem -timeout 60m ./controller/...

# The Kubernetes adapter's memory at 1,000 and 10,000 pods made in a real
# kube-apiserver (test/k8s/kubemem; docs/performance.md).
bench-k8s: deps build k8s-setup
	$(GO) test -count=1 -run '^$$' -bench AdapterMemory -benchtime 1x -timeout 30m ./test/k8s/kubemem

# The offload datapath's figures in the kernel VM (test/kernelvm/offloadbench:
# rule installation beside tc -batch, changes, re-apply, counters, policy
# groups; docs/kernelvm.md): 5.5-12 minutes of emulation, its output shown
# (the figures, offloadbench: NAME=VALUE). No other target runs it.
bench-kernel:
	./hack/kernelvm/setup.sh
	./hack/kernelvm/run.sh -v -bins "" -timeout 30m -run '^Test(WriteModes|Scale|FirstChangeElsewhere|Policy|Replication)$$' ./test/kernelvm/offloadbench

# The offload datapath at a fleet's sizes (TestFleetSize: 250 pods on a
# network of 1,000 and of 5,000 nodes, encap rules on demand) beside
# TestScale (the encap rule per remote endpoint): about 30 minutes of
# emulation. No other target runs TestFleetSize.
bench-kernel-fleet:
	./hack/kernelvm/setup.sh
	./hack/kernelvm/run.sh -v -bins "" -memory 6144 -timeout 60m -run 'TestScale$$|TestFleetSize' ./test/kernelvm/offloadbench

# The scale harness at full size (test/scale/README.md): about an hour,
# heavy, so it takes the machine's heavy lock. Figures go to bin/scale-*.txt.
# SCALE_FLAGS are added to every run (e.g. SCALE_FLAGS=--profile).
SCALE_FLAGS ?=
SCALE := flock /tmp/skiff-heavy.lock $(BIN)/skiff-scale --bin-dir $(BIN) $(SCALE_FLAGS)
scale: deps build
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ ./test/scale/cmd/skiff-scale ./test/scale/cmd/scale-etcd
	$(SCALE) --workload local --agents 5000 --out $(BIN)/scale-local.txt
	$(SCALE) --workload wide --agents 1000 --out $(BIN)/scale-wide.txt
	$(SCALE) --workload local --agents 5000 --policies 10000 --scenarios cold,latency,policy,rest,load --out $(BIN)/scale-policies.txt
	$(SCALE) --workload wide --agents 1000 --policies 10000 --scenarios cold,latency,policy,rest,load --changes 200 --out $(BIN)/scale-wide-policies.txt
	$(SCALE) --workload local --agents 5000 --replicas 3 --scenarios cold,failover --out $(BIN)/scale-failover.txt

demo: deps build
	$(GO) run ./test/demo

# Skiff in a real two-node Kubernetes cluster on this machine (test/demo-k8s):
# installed with kubectl apply -k from its image (made from bin/), pods on
# both nodes, a NetworkPolicy applied with kubectl and probed; everything
# torn down at the end or on Ctrl-C.
demo-k8s: deps build k8s-setup
	$(GO) run ./test/demo-k8s

clean:
	rm -rf $(BIN)
