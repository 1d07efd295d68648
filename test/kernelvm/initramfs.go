package kernelvm

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"

	"strings"
)

// DefaultModules are loaded in every boot (with their dependencies).
var DefaultModules = []string{
	"virtio_pci", "9pnet_virtio", "9p",
	"netdevsim", "veth", "bridge", "8021q", "vxlan", "dummy",
	"sch_ingress", "cls_flower", "cls_matchall", "cls_bpf", "cls_fw",
	"act_mirred", "act_gact", "act_tunnel_key", "act_ct", "act_vlan", "act_pedit", "act_csum",
	"nf_conntrack", "nf_tables", "nft_ct", "nft_masq", "nft_chain_nat", "nft_nat", "nft_numgen", "nft_meta_bridge", "br_netfilter", "sctp",
	"vfio_pci", "virtio_rng", "tun",
}

// Tools are copied from the host with their libraries, at the same paths.
var Tools = []string{"/usr/sbin/ip", "/usr/sbin/tc", "/usr/sbin/bridge", "/usr/sbin/devlink", "/usr/sbin/nft"}

const busyboxPath = "/bin/busybox"

// normMod gives the module name of a file name or a module name.
func normMod(s string) string {
	s = filepath.Base(s)
	for _, ext := range []string{".xz", ".zst", ".gz", ".ko"} {
		s = strings.TrimSuffix(s, ext)
	}
	return strings.ReplaceAll(s, "-", "_")
}

// moduleOrder resolves wanted modules and their dependencies from
// modules.dep into load order. Built-in modules are skipped; unknown ones
// are an error.
func moduleOrder(modDir string, wanted []string) (order []string, files map[string]string, err error) {
	dep, err := os.ReadFile(filepath.Join(modDir, "modules.dep"))
	if err != nil {
		return nil, nil, fmt.Errorf("modules.dep (run hack/kernelvm/setup.sh): %w", err)
	}
	builtin := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(modDir, "modules.builtin")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if l != "" {
				builtin[normMod(l)] = true
			}
		}
	}
	files = map[string]string{}
	deps := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(dep))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		file, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		name := normMod(file)
		files[name] = file
		for _, d := range strings.Fields(rest) {
			deps[name] = append(deps[name], normMod(d))
		}
	}
	// softdep X pre: Y — Y is named by module name or alias (crc32c).
	aliases := map[string][]string{}
	if b, err := os.ReadFile(filepath.Join(modDir, "modules.alias")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[0] == "alias" {
				aliases[f[1]] = append(aliases[f[1]], normMod(f[2]))
			}
		}
	}
	pick := func(name string) string {
		if _, ok := files[normMod(name)]; ok {
			return normMod(name)
		}
		cands := aliases[name]
		for _, c := range cands {
			if strings.Contains(c, "generic") {
				return c
			}
		}
		if len(cands) > 0 {
			return cands[0]
		}
		return ""
	}
	if b, err := os.ReadFile(filepath.Join(modDir, "modules.softdep")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) < 3 || f[0] != "softdep" {
				continue
			}
			m, pre := normMod(f[1]), false
			for _, w := range f[2:] {
				switch w {
				case "pre:":
					pre = true
				case "post:":
					pre = false
				default:
					if p := pick(w); pre && p != "" {
						deps[m] = append([]string{p}, deps[m]...)
					}
				}
			}
		}
	}
	seen := map[string]bool{}
	var visit func(m string, from string) error
	visit = func(m, from string) error {
		if seen[m] {
			return nil
		}
		seen[m] = true
		if _, ok := files[m]; !ok {
			if builtin[m] {
				return nil
			}
			return fmt.Errorf("module %s (wanted by %s) is neither in modules.dep nor built in", m, from)
		}
		for _, d := range deps[m] {
			if err := visit(d, m); err != nil {
				return err
			}
		}
		order = append(order, m)
		return nil
	}
	for _, m := range wanted {
		if err := visit(normMod(m), "config"); err != nil {
			return nil, nil, err
		}
	}
	return order, files, nil
}

var lddPath = regexp.MustCompile(`(/[^\s]+)`)

// sharedLibs lists the libraries of a dynamic binary, the dynamic loader
// included (ldd prints it without "=>").
func sharedLibs(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).Output()
	if err != nil {
		if bytes.Contains(out, []byte("not a dynamic executable")) {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %w", bin, err)
	}
	var libs []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "=>") {
			_, rhs, _ := strings.Cut(l, "=>")
			if m := lddPath.FindString(rhs); m != "" {
				libs = append(libs, m)
			}
			continue
		}
		if m := lddPath.FindString(l); m != "" { // the loader: /lib64/ld-linux-x86-64.so.2 (0x...)
			libs = append(libs, m)
		}
	}
	return libs, nil
}

const initScript = `#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /tmp /mnt /run /usr/bin
/bin/busybox --install -s /bin
export PATH=/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
: > /tmp/insmod.err
for m in $(cat /modules.list); do
	insmod /lib/modules/$m.ko 2>>/tmp/insmod.err || echo "insmod $m failed" >>/tmp/insmod.err
done
if ! mount -t 9p -o trans=virtio,version=9p2000.L,msize=1048576 host0 /mnt; then
	echo "KERNELVM-NO-9P"
	cat /tmp/insmod.err
	poweroff -f
fi
mkdir -p /mnt/out
/usr/sbin/ip link set lo up
/usr/sbin/nft -f /keys.nft 2>>/tmp/insmod.err || echo "nft -f /keys.nft failed" >>/tmp/insmod.err
{ /usr/sbin/ip link add kvmkeys0 type dummy && /usr/sbin/tc qdisc add dev kvmkeys0 clsact; } 2>>/tmp/insmod.err || echo "clsact on kvmkeys0 failed" >>/tmp/insmod.err
cp /tmp/insmod.err /mnt/out/insmod.err
dmesg > /mnt/out/dmesg.boot
uname -r > /mnt/out/uname
export SKIFF_KERNELVM=1 TMPDIR=/tmp HOME=/tmp SKIFF_BIN=/mnt/skiffbin SKIFF_KERNELVM_OUT=/mnt/out/files
echo "KERNELVM-TESTS-START"
for t in $(cat /mnt/tests.list); do
	args=$(cat /mnt/args.$t 2>/dev/null)
	cd /tmp
	start=$(date +%s)
	/mnt/bin/$t -test.v $args > /mnt/out/$t.log 2>&1
	echo $? > /mnt/out/$t.rc
	echo "KERNELVM-RAN $t rc=$(cat /mnt/out/$t.rc) $(( $(date +%s) - start ))s"
done
echo ok > /mnt/out/DONE
sync
poweroff -f
`

// keysRuleset is loaded by the guest's init before the first test and held
// for the whole run, with a clsact qdisc on the dummy device kvmkeys0: a
// base chain on every inet, bridge and arp hook keeps the kernel's
// netfilter hook static keys on, and the clsact its tc ingress and egress
// keys, so they switch once, before any test, and never again. Each test's
// tables, conntrack and qdiscs coming and going would otherwise switch
// them, and switching a static key patches kernel text, which races a CPU
// running through that code under qemu's multi-threaded emulation: the
// guest has panicked with "Oops: int3" in __dev_queue_xmit (tc keys) and in
// NF_HOOK from mld_sendpack (IPv6 output hook). Hardware has no such race;
// no test is about it. The chains are empty and accept.
var keysRuleset = func() string {
	hooks := []struct{ chain, hook string }{
		{"kpre", "prerouting"}, {"kin", "input"}, {"kfwd", "forward"}, {"kout", "output"}, {"kpost", "postrouting"},
	}
	var b strings.Builder
	for _, family := range []string{"inet", "bridge", "arp"} {
		fmt.Fprintf(&b, "table %s kernelvm-keys {\n", family)
		for _, h := range hooks {
			if family == "arp" && h.hook != "input" && h.hook != "output" {
				continue // arp has only these two hooks
			}
			fmt.Fprintf(&b, "\tchain %s { type filter hook %s priority 0; policy accept; }\n", h.chain, h.hook)
		}
		b.WriteString("}\n")
	}
	return b.String()
}()

// buildInitramfs writes (once; it is cached by content) the initramfs for
// a kernel version and a module list, and returns its path.
func buildInitramfs(verDir, version string, modules []string) (string, error) {
	modDir := filepath.Join(verDir, "root", "lib", "modules", version)
	order, files, err := moduleOrder(modDir, modules)
	if err != nil {
		return "", err
	}
	a := newArchive()
	a.file("init", 0o755, []byte(initScript))
	a.file("keys.nft", 0o644, []byte(keysRuleset))
	a.file("modules.list", 0o644, []byte(strings.Join(order, "\n")+"\n"))
	bb, err := os.ReadFile(busyboxPath)
	if err != nil {
		return "", fmt.Errorf("busybox (install busybox-static): %w", err)
	}
	a.file("bin/busybox", 0o755, bb)
	libs := map[string]bool{}
	for _, t := range Tools {
		b, err := os.ReadFile(t)
		if err != nil {
			return "", fmt.Errorf("tool %s: %w", t, err)
		}
		a.file(t, 0o755, b)
		ls, err := sharedLibs(t)
		if err != nil {
			return "", err
		}
		for _, l := range ls {
			libs[l] = true
		}
	}
	for l := range libs {
		b, err := os.ReadFile(l) // follows symlinks: the guest gets the file at the name asked for
		if err != nil {
			return "", fmt.Errorf("library %s: %w", l, err)
		}
		a.file(l, 0o755, b)
	}
	for _, m := range order {
		src := filepath.Join(modDir, files[m])
		b, err := readModule(src)
		if err != nil {
			return "", fmt.Errorf("module %s (%s): %w", m, src, err)
		}
		a.file("lib/modules/"+m+".ko", 0o644, b)
	}
	var buf bytes.Buffer
	if err := a.write(&buf); err != nil {
		return "", err
	}
	sum := sha256.Sum256(buf.Bytes())
	out := filepath.Join(verDir, "initramfs-"+hex.EncodeToString(sum[:8])+".cpio")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	// Concurrent runs may build the same image: write a private file and
	// rename it into place.
	f, err := os.CreateTemp(verDir, ".initramfs-*")
	if err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	_, werr := f.Write(buf.Bytes())
	if err := errors.Join(werr, f.Chmod(0o644), f.Close()); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("initramfs: %w", err)
	}
	if err := os.Rename(f.Name(), out); err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	// Older images of this version (other module lists, older tools) are
	// not used again.
	if old, _ := filepath.Glob(filepath.Join(verDir, "initramfs-*.cpio")); len(old) > 1 {
		for _, o := range old {
			if o != out {
				_ = os.Remove(o)
			}
		}
	}
	return out, nil
}
