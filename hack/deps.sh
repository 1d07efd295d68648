#!/usr/bin/env bash
# Installs what Skiff's build, tests and demo need on Debian 12, as root.
# Idempotent: a package already installed is not fetched again.
set -euo pipefail
pkgs=(
  protobuf-compiler   # protoc 3.21.12 for `make generate` and its staleness test
  etcd-server         # a real external etcd for the replica tests
  iproute2 iputils-ping
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The Debian etcd-server package starts a system etcd on 2379; the tests
# start their own, so keep the system one from holding the port.
if systemctl is-active --quiet etcd 2>/dev/null; then systemctl stop etcd || true; fi
if pgrep -x etcd >/dev/null && [ -f /etc/default/etcd ]; then pkill -x etcd || true; fi
