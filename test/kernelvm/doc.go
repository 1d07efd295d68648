// Package kernelvm runs the project's privileged Go tests inside Debian's
// own kernel, booted under qemu-system-x86_64 in software emulation, for
// what the host kernel lacks (cls_flower, act_tunnel_key, act_ct,
// netdevsim switchdev).
//
// hack/kernelvm/setup.sh prepares, once per kernel version, a cache
// directory (/var/cache/skiff-kernelvm/<version>/) holding vmlinuz, the
// image's modules with a modules.dep, and netdevsim.ko built out of tree.
// Run then:
//
//  1. builds one static test binary per package (CGO_ENABLED=0 go test -c);
//  2. makes (and caches by content) an initramfs: busybox, iproute2 with its
//     shared libraries and dynamic loader, the wanted modules and their
//     dependencies decompressed, and an /init that loads them in
//     dependency order, mounts a 9p share, runs every test binary with
//     SKIFF_KERNELVM=1 and writes each one's output and exit status back;
//  3. boots qemu once for all packages and decides pass/fail only from
//     what the guest wrote (never from qemu's exit status): a package
//     passes when its binary exited 0, at least one test passed and no
//     test skipped.
//
// Tests that need the VM call guest.Require(t), which skips outside it.
// From the command line: hack/kernelvm/run.sh ./offload/eswitch ...
package kernelvm
