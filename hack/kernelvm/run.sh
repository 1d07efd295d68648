#!/usr/bin/env bash
# Runs the given Go packages' tests inside Debian's 6.12 kernel under qemu,
# in one boot. Prepare the kernel first with hack/kernelvm/setup.sh.
#   hack/kernelvm/run.sh [-v] [-run REGEXP] [-count N] [-short] [-tags TAGS] [-show PKG,...] [-timeout 15m] ./offload/eswitch ./test/kernelvm/vmtest
# Exit status: 0 only when every package passed in the guest, at least one
# test ran in each and none skipped. See docs/kernelvm.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/kernelvm" ./test/kernelvm/cmd/kernelvm
"$bin/kernelvm" "$@"
