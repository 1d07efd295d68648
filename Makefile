# Skiff. `make demo` and `make test` work on a fresh Debian 12 machine as root.
GO      ?= go
BIN     := bin
CMDS    := skiff-controller skiff-agent skiffctl skiff-cni
GOFLAGS ?=
export GOFLAGS

.PHONY: all build deps generate test test-kernel lint demo bench clean

all: build

build:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ $(addprefix ./cmd/,$(CMDS))

deps:
	./hack/deps.sh

generate: deps
	./hack/generate.sh

# All tests: unit, privileged and end-to-end (need root), and the kernel VM.
test: deps build lint
	$(GO) test -count=1 -timeout 30m ./...
	$(MAKE) test-kernel

# Tests that need what the host kernel lacks (netdevsim, switchdev, flower),
# run inside Debian's kernel under qemu (docs/kernelvm.md).
KERNELVM_PKGS := ./offload/eswitch ./offload/vf ./offload/datapath ./test/kernelvm/vmtest ./test/kernelvm/agentvm ./test/kernelvm/offloadvm ./test/kernelvm/policyvm ./test/kernelvm/ctvm ./test/kernelvm/offloadpolicyvm
test-kernel:
	./hack/kernelvm/setup.sh
	./hack/kernelvm/run.sh -timeout 20m $(KERNELVM_PKGS)

lint:
	$(GO) vet ./...
	$(GO) run ./hack/importcheck
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem -timeout 60m ./controller/...

demo: deps build
	$(GO) run ./test/demo

clean:
	rm -rf $(BIN)
