#!/usr/bin/env bash
# Prepares what the real-Kubernetes tests need, from Debian packages and the
# Go module proxy only (no image registry, no downloads from elsewhere):
#   - node packages: containerd, runc, busybox-static (the test image),
#     conntrack and iptables (kube-proxy), etcd-server (the API's store);
#   - kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
#     kube-proxy and kubectl built from k8s.io/kubernetes (the module in
#     hack/k8s/build pins the version), with their version stamped in.
# Binaries are cached by version under
#   ${SKIFF_K8S_CACHE:-/var/cache/skiff-k8s}/<version>/bin/
# with <cache>/current naming the version the last setup prepared. A warm
# run takes well under a second and touches no network. Safe to run
# concurrently (flock). Needs root. Usage: hack/k8s/setup.sh [-q]
set -euo pipefail
cd "$(dirname "$0")/../.."

CACHE=${SKIFF_K8S_CACHE:-/var/cache/skiff-k8s}
quiet=0
[ "${1:-}" = -q ] && quiet=1
log() { [ "$quiet" = 1 ] || echo "k8s-setup: $*" >&2; }

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9

pkgs=(containerd runc busybox-static conntrack iptables etcd-server)
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

export PATH=/usr/local/go/bin:$PATH
build=hack/k8s/build
ver=$(cd "$build" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
dir=$CACHE/$ver
cmds=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
if [ -f "$dir/.complete" ]; then
	echo "$ver" >"$CACHE/current"
	log "Kubernetes $ver ready in $dir/bin (cached)"
	exit 0
fi
log "building Kubernetes $ver into $dir/bin (a cold build takes 10-20 minutes on 2 cores)"
rm -rf "$dir"
work=$(mktemp -d "$CACHE/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT
minor=${ver#v1.}
minor=${minor%%.*}
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$ver -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$ver"
start=$(date +%s)
(cd "$build" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$work/" $(printf 'k8s.io/kubernetes/cmd/%s ' "${cmds[@]}"))
for c in "${cmds[@]}"; do
	args=(--version)
	[ "$c" = kubectl ] && args=(version --client)
	out=$("$work/$c" "${args[@]}" 2>&1 || true)
	case "$out" in *"$ver"*) ;; *) echo "k8s-setup: $c does not say it is $ver: $out" >&2; exit 1 ;; esac
done
mkdir -p "$dir"
mv "$work" "$dir/bin"
trap - EXIT
chmod 0755 "$dir/bin"
touch "$dir/.complete"
echo "$ver" >"$CACHE/current"
log "Kubernetes $ver built in $(($(date +%s) - start)) s"
