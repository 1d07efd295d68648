package nltest

import (
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// sysctls, by their path under /proc/sys, and modules.

const (
	sysV4Forward = "net/ipv4/ip_forward"
	sysV4All     = "net/ipv4/conf/all/forwarding" // the same as ip_forward
	sysV4Default = "net/ipv4/conf/default/forwarding"
	sysV6All     = "net/ipv6/conf/all/forwarding"
	sysV6Default = "net/ipv6/conf/default/forwarding"
	bridgeNF     = "net/bridge/bridge-nf-call-"
)

// bridgeNFNames are the sysctls br_netfilter adds to every namespace.
var bridgeNFNames = []string{bridgeNF + "arptables", bridgeNF + "iptables", bridgeNF + "ip6tables"}

// sysctls are a namespace's forwarding settings (the links hold their
// own).
type sysctls map[string]string

func defaultSysctls() sysctls {
	return sysctls{sysV4All: "0", sysV4Default: "0", sysV6All: "0", sysV6Default: "0"}
}

func (s sysctls) get(name string) string { return s[name] }

// sysctlName cleans a name as the real handle's path does; names that
// climb out of /proc/sys are refused.
func sysctlName(name string) (string, error) {
	p := filepath.Join("/proc/sys", name)
	if !strings.HasPrefix(p, "/proc/sys/") || strings.Contains(name, "..") {
		return "", fmt.Errorf("nl: sysctl %q: not a name under /proc/sys", name)
	}
	return strings.TrimPrefix(p, "/proc/sys/"), nil
}

// linkSysctl splits net/ipv4/conf/NAME/forwarding into the family (0 or
// 1) and NAME.
func linkSysctl(name string) (fam int, dev string, ok bool) {
	dir, leaf := path.Split(name)
	if leaf != "forwarding" {
		return 0, "", false
	}
	dir = strings.TrimSuffix(dir, "/")
	for fam, prefix := range []string{"net/ipv4/conf/", "net/ipv6/conf/"} {
		if dev, ok := strings.CutPrefix(dir, prefix); ok && !strings.Contains(dev, "/") && dev != "all" && dev != "default" {
			return fam, dev, true
		}
	}
	return 0, "", false
}

// sysctl reads a sysctl of n; ok is false when it does not exist.
func (n *NS) sysctl(name string) (string, bool) {
	if name == sysV4Forward {
		name = sysV4All
	}
	if v, ok := n.sys[name]; ok {
		return v, true
	}
	if fam, dev, ok := linkSysctl(name); ok {
		if l := n.byName(dev); l != nil {
			return l.fwd[fam], true
		}
	}
	if strings.HasPrefix(name, bridgeNF) && n.w.modules["br_netfilter"] {
		for _, b := range bridgeNFNames {
			if b == name {
				if v, ok := n.bridge[name]; ok {
					return v, true
				}
				return "1", true
			}
		}
	}
	v, ok := n.extra[name]
	return v, ok
}

func (k *kernel) Sysctl(name string) (string, error) {
	var out string
	err := k.do(func(n *NS) error {
		clean, err := sysctlName(name)
		if err != nil {
			return err
		}
		v, ok := n.sysctl(clean)
		if !ok {
			return fmt.Errorf("nl: sysctl %s: open /proc/sys/%s: %w", name, clean, fs.ErrNotExist)
		}
		out = v
		return nil
	})
	return out, err
}

// SetSysctl writes a sysctl with the kernel's effects: IPv4 (ip_forward,
// conf/all) and IPv6 conf/all forwarding set the default and every
// link's; br_netfilter's take 0 or 1.
func (k *kernel) SetSysctl(name, value string) error {
	clean, err := sysctlName(name)
	if err != nil {
		return err
	}
	k.write()
	return k.do(func(n *NS) error {
		fail := func(err error) error { return fmt.Errorf("nl: sysctl %s=%s: %w", name, value, err) }
		if clean == sysV4Forward {
			clean = sysV4All
		}
		if _, ok := n.sysctl(clean); !ok {
			return fail(fmt.Errorf("open /proc/sys/%s: %w", clean, fs.ErrNotExist))
		}
		if _, ok := n.extra[clean]; ok {
			n.extra[clean] = strings.TrimSpace(value)
			return nil
		}
		v, err := strconv.Atoi(strings.TrimSpace(value))
		if err != nil {
			return fail(unix.EINVAL)
		}
		val := strconv.Itoa(v)
		if strings.HasPrefix(clean, bridgeNF) {
			if n.bridge == nil {
				n.bridge = map[string]string{}
			}
			n.bridge[clean] = map[bool]string{false: "0", true: "1"}[v != 0]
			return nil
		}
		if fam, dev, ok := linkSysctl(clean); ok {
			n.byName(dev).fwd[fam] = val
			return nil
		}
		n.sys[clean] = val
		for fam, all := range []string{sysV4All, sysV6All} {
			if clean == all {
				n.sys[[]string{sysV4Default, sysV6Default}[fam]] = val
				for _, l := range n.links {
					l.fwd[fam] = val
				}
			}
		}
		return nil
	})
}

// LoadModule marks a module loaded (modules are the world's); loading
// br_netfilter gives every namespace its bridge-nf-call-* sysctls ("1").
// A module that is loaded costs no write.
func (k *kernel) LoadModule(name string) error {
	return k.do(func(n *NS) error {
		if n.w.modules[name] {
			return nil
		}
		k.write()
		n.w.modules[name] = true
		return nil
	})
}
