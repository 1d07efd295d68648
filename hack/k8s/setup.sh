#!/usr/bin/env bash
# Prepares what the real-Kubernetes tests (test/k8s) need, from Debian's apt
# and the Go module proxy only (no image registry, nothing else):
#   - node packages: containerd and runc (the runtime), busybox-static (the
#     test pod image), conntrack and iptables (kube-proxy), etcd-server (the
#     API server's store), iproute2;
#   - kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
#     kube-proxy and kubectl built from k8s.io/kubernetes with their version
#     stamped in. hack/k8s/build is a Go module of its own (so the main
#     go.mod does not carry Kubernetes); its go.mod pins the version.
# The binaries are cached by version:
#   ${SKIFF_K8S_CACHE:-/var/cache/skiff-k8s}/<version>/bin/   (+ .complete)
#   ${SKIFF_K8S_CACHE:-/var/cache/skiff-k8s}/current          (the version)
# A warm run (packages installed, binaries cached) takes well under a second
# and touches no network; a cold build takes 15-20 minutes on 2 cores. Runs
# are idempotent and safe to run concurrently (flock on <cache>/.lock).
# Needs root. Usage: hack/k8s/setup.sh [-q]
set -euo pipefail
cd "$(dirname "$0")/../.."

CACHE=${SKIFF_K8S_CACHE:-/var/cache/skiff-k8s}
quiet=0
[ "${1:-}" = -q ] && quiet=1
log() { [ "$quiet" = 1 ] || echo "k8s-setup: $*" >&2; }

build=hack/k8s/build
# The version comes from go.mod itself: no go command (and no module
# download) on the warm path.
ver=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" { print $3 } $1 == "k8s.io/kubernetes" { print $2 }' "$build/go.mod" | head -1)
case "$ver" in v1.*) ;; *) echo "k8s-setup: no k8s.io/kubernetes version in $build/go.mod" >&2; exit 1 ;; esac
dir=$CACHE/$ver
cmds=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9

pkgs=(containerd runc busybox-static conntrack iptables etcd-server iproute2)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The Debian packages may start a system containerd and etcd; the tests run
# their own, on their own sockets and ports, and touch neither.

if [ -f "$dir/.complete" ]; then
	[ "$(cat "$CACHE/current" 2>/dev/null)" = "$ver" ] || echo "$ver" >"$CACHE/current"
	log "Kubernetes $ver ready in $dir/bin (cached)"
	exit 0
fi

export PATH=/usr/local/go/bin:$PATH GOWORK=off GOFLAGS=-mod=readonly CGO_ENABLED=0
log "building Kubernetes $ver into $dir/bin (a cold build takes 15-20 minutes on 2 cores)"
start=$(date +%s)
rm -rf "$dir"
work=$(mktemp -d "$CACHE/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT
minor=${ver#v1.}
minor=${minor%%.*}
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$ver -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$ver -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
(cd "$build" && go build -trimpath -ldflags "$ldflags" -o "$work/" $(printf 'k8s.io/kubernetes/cmd/%s ' "${cmds[@]}"))
for c in "${cmds[@]}"; do
	args=(--version)
	[ "$c" = kubectl ] && args=(version --client)
	out=$("$work/$c" "${args[@]}" 2>&1 || true)
	case "$out" in *"$ver"*) ;; *) echo "k8s-setup: $c does not say it is $ver: $out" >&2; exit 1 ;; esac
done
mkdir -p "$dir"
chmod 0755 "$work"
mv "$work" "$dir/bin"
trap - EXIT
touch "$dir/.complete"
echo "$ver" >"$CACHE/current"
log "Kubernetes $ver built in $(($(date +%s) - start)) s"
