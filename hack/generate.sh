#!/usr/bin/env bash
# Regenerates the Go code for proto/ into OUT (default: the source tree).
# Generator versions are pinned: protoc-gen-go and protoc-gen-go-grpc through
# the tool lines of go.mod, protoc through Debian bookworm's protobuf-compiler
# (3.21.12), checked below.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.}
want="libprotoc 3.21.12"
have=$(protoc --version 2>/dev/null || true)
if [ "$have" != "$want" ]; then
  echo "generate: need protoc '$want' (Debian protobuf-compiler), have '${have:-none}'" >&2
  exit 1
fi
bindir=$(mktemp -d)
trap 'rm -rf "$bindir"' EXIT
go build -o "$bindir/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go
go build -o "$bindir/protoc-gen-go-grpc" google.golang.org/grpc/cmd/protoc-gen-go-grpc
mkdir -p "$out/proto"
PATH="$bindir:$PATH" protoc -I proto -I /usr/include \
  --go_out="$out/proto" --go_opt=paths=source_relative \
  --go-grpc_out="$out/proto" --go-grpc_opt=paths=source_relative \
  proto/skiff/v1/*.proto
