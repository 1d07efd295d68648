#!/usr/bin/env bash
# Prepares everything the kernel VM tests need, from Debian packages only:
#   - host tools: qemu-system-x86, busybox-static, iproute2, kmod, xz, gcc/make
#   - Debian's linux-image-6.12-amd64 (vmlinuz + modules, extracted, depmod'ed)
#   - netdevsim.ko built out of tree from linux-source-6.12 against the
#     matching linux-headers-<version>
# Everything kernel-specific is cached by kernel version under
#   ${SKIFF_KERNELVM_CACHE:-/var/cache/skiff-kernelvm}/<version>/
# and <cache>/current names the version the last setup prepared.
# Idempotent; a warm run takes well under a second and touches no network.
# Needs root. Usage: hack/kernelvm/setup.sh [-q]
set -euo pipefail

CACHE=${SKIFF_KERNELVM_CACHE:-/var/cache/skiff-kernelvm}
META=linux-image-6.12-amd64   # Debian's metapackage; its dependency names the version
log() { echo "kernelvm-setup: $*" >&2; }

updated=0
apt_update() {
	if [ "$updated" = 0 ]; then
		log "apt-get update"
		apt-get update -qq
		updated=1
	fi
}

# Host packages. Installed only when missing.
host_pkgs=(qemu-system-x86 busybox-static iproute2 nftables kmod xz-utils gcc-12 make libc6-dev libelf1 libssl3)
missing=()
for p in "${host_pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
export DEBIAN_FRONTEND=noninteractive
if [ ${#missing[@]} -gt 0 ]; then
	apt_update
	log "installing ${missing[*]}"
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Resolve the kernel version from the local package lists (no network).
resolve_version() {
	apt-cache depends "$META" 2>/dev/null |
		sed -n 's/^ *Depends: linux-image-\(6\.12\.[^ ]*-amd64\)$/\1/p' | grep -v unsigned | head -n1
}
ver=$(resolve_version || true)
if [ -z "$ver" ]; then
	apt_update
	ver=$(resolve_version || true)
fi
[ -n "$ver" ] || { log "cannot resolve the version behind $META"; exit 1; }

dir=$CACHE/$ver
if [ -f "$dir/.complete" ]; then
	echo "$ver" >"$CACHE/current"
	log "kernel $ver ready in $dir (cached)"
	exit 0
fi
log "preparing kernel $ver in $dir"
mkdir -p "$dir"
work=$(mktemp -d "$CACHE/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT

# 1. Kernel image and modules: download the .deb and extract it; no
#    postinst, no initramfs-tools.
if [ ! -f "$dir/vmlinuz" ] || [ ! -d "$dir/root/lib/modules/$ver" ]; then
	(cd "$work" && { apt-get download -qq "linux-image-$ver" 2>/dev/null || { apt_update && apt-get download -qq "linux-image-$ver"; }; })
	rm -rf "$dir/root"
	mkdir -p "$dir/root"
	dpkg-deb -x "$work"/linux-image-"$ver"_*.deb "$dir/root"
	cp "$dir/root/boot/vmlinuz-$ver" "$dir/vmlinuz.tmp" && mv "$dir/vmlinuz.tmp" "$dir/vmlinuz"
fi

# 2. Headers for the out-of-tree build, extracted into the cache. They are
#    not installed: linux-headers-<version> depends on the kernel image,
#    whose postinst builds an initramfs for this machine (minutes, for
#    nothing). The arch Makefile includes the common one by absolute path;
#    point it at the extracted copy. The kbuild helpers are relative links.
kabi=${ver%-amd64}            # 6.12.117+deb12
hdr=$dir/headers
build=$hdr/usr/src/linux-headers-$ver
if [ ! -f "$hdr/.complete" ]; then
	rm -rf "$hdr"
	mkdir -p "$hdr" "$work/hdr"
	(cd "$work/hdr" && apt-get download -qq "linux-headers-$ver" "linux-headers-$kabi-common" "linux-kbuild-$kabi" 2>/dev/null ||
		{ apt_update && apt-get download -qq "linux-headers-$ver" "linux-headers-$kabi-common" "linux-kbuild-$kabi"; })
	for deb in "$work"/hdr/*.deb; do dpkg-deb -x "$deb" "$hdr"; done
	sed -i "s|^include /usr/src/|include $hdr/usr/src/|" "$build/Makefile"
	touch "$hdr/.complete"
fi

# 3. netdevsim source from Debian's linux-source-6.12 (only its directory is
#    kept) and the build. The source package's version must match the image.
srcver=${ver%-amd64}          # 6.12.117+deb12
srcver=${srcver%+*}           # 6.12.117
if [ ! -f "$dir/netdevsim/netdevsim.ko" ]; then
	(cd "$work" && { apt-get download -qq linux-source-6.12 2>/dev/null || { apt_update && apt-get download -qq linux-source-6.12; }; })
	deb=$(ls "$work"/linux-source-6.12_*.deb)
	case "$deb" in
	*"_${srcver}-"*) ;;
	*) log "warning: $(basename "$deb") does not match kernel $ver; building anyway" ;;
	esac
	mkdir -p "$work/src"
	dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work/src" ./usr/src/linux-source-6.12.tar.xz
	tar -xJf "$work/src/usr/src/linux-source-6.12.tar.xz" -C "$work/src" linux-source-6.12/drivers/net/netdevsim
	rm -rf "$dir/netdevsim"
	mv "$work/src/linux-source-6.12/drivers/net/netdevsim" "$dir/netdevsim"
	log "building netdevsim against linux-headers-$ver"
	# No module BTF: it needs pahole, which is not installed, and the
	# module loads without it.
	make -s -C "$build" M="$dir/netdevsim" CONFIG_NETDEVSIM=m CONFIG_DEBUG_INFO_BTF_MODULES= modules -j"$(nproc)" >"$dir/netdevsim.build.log" 2>&1 ||
		{ cat "$dir/netdevsim.build.log" >&2; exit 1; }
fi
mkdir -p "$dir/root/lib/modules/$ver/updates"
cp "$dir/netdevsim/netdevsim.ko" "$dir/root/lib/modules/$ver/updates/netdevsim.ko"

# 4. modules.dep for the extracted tree (it ships none).
depmod -b "$dir/root" "$ver"

touch "$dir/.complete"
echo "$ver" >"$CACHE/current"
log "kernel $ver ready in $dir"
