#!/usr/bin/env bash
# Installs what Skiff's build, tests and demo need on Debian 12, as root.
# Idempotent: a package already installed is not fetched again.
set -euo pipefail
pkgs=(
  protobuf-compiler libprotobuf-dev  # protoc 3.21.12 and its well-known types (timestamp.proto) for `make generate`
  etcd-server         # a real external etcd for the replica tests
  iproute2 iputils-ping curl nftables
  iperf3              # TCP between pods in the e2e tests and benchmarks
  iptables            # the reference rule chain of the policy benchmark
  linux-libc-dev      # the kernel uapi headers internal/nl/tc checks its tc/flower numbers against
  systemd             # systemd-analyze checks the units of deploy/systemd
  frr                 # bgpd + zebra for the BGP EVPN interop tests (test/e2e/bgp*_test.go)
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
# The Debian etcd-server package may start a system etcd on 2379. The tests
# start their own etcd on free loopback ports and never touch that one.
