package nltest_test

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// The conformance tests' reading of a namespace through nl.Kernel calls
// only, normalized so that the fake's and the kernel's read the same:
// indexes as names, MACs as who they belong to, what the kernel makes
// on its own that the fake does not model left out (link-local and
// multicast routes and neighbours, the multicast addresses a device's
// FDB dump lists).

// errClass is an error as the datapaths can tell it apart.
func errClass(err error) string {
	var errno unix.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, nl.ErrLinkGone):
		return "gone"
	case errors.Is(err, nl.ErrNoLink):
		return "nolink"
	case errors.Is(err, nl.ErrNoNetNS):
		return "nonetns"
	case errors.Is(err, fs.ErrNotExist):
		return "notexist"
	case errors.As(err, &errno):
		return unix.ErrnoName(errno)
	}
	return "error"
}

// observer reads namespaces and writes what it reads as lines.
type observer struct {
	lines []string
	macs  map[string]string // MACs the script gave, by value: their label
}

func (o *observer) add(format string, args ...any) {
	o.lines = append(o.lines, fmt.Sprintf(format, args...))
}

// step records the outcome of a call.
func (o *observer) step(what string, err error) { o.add("%s: %s", what, errClass(err)) }

// mac labels a MAC: one the script gave, all zeros, or that of a link
// of the namespace (other than self).
func (o *observer) mac(mac string, ls []nl.Link, self string) string {
	if l, ok := o.macs[mac]; ok {
		return l
	}
	if mac == "00:00:00:00:00:00" {
		return "zero"
	}
	for _, l := range ls {
		if l.MAC == mac && l.Name != self {
			return "mac-of-" + l.Name
		}
	}
	return "own"
}

func names(ls []nl.Link) func(int) string {
	return func(i int) string {
		for _, l := range ls {
			if l.Index == i {
				return l.Name
			}
		}
		return fmt.Sprintf("if%d", i)
	}
}

// observe reads everything of namespace label through k.
func (o *observer) observe(label string, k nl.Kernel) {
	ls, err := k.Links()
	if err != nil {
		o.add("%s links: %s", label, errClass(err))
		return
	}
	slices.SortFunc(ls, func(a, b nl.Link) int { return strings.Compare(a.Name, b.Name) })
	name := names(ls)
	for _, l := range ls {
		s := fmt.Sprintf("%s link %s %s mtu %d up %v alias %q mac %s", label, l.Name, l.Kind, l.MTU, l.Up, l.Alias, o.mac(l.MAC, ls, l.Name))
		if l.Master != 0 {
			s += " master " + name(l.Master)
			f, err := k.PortFlags(l.Index)
			s += fmt.Sprintf(" flags %+v %s", f, errClass(err))
		}
		if l.Kind == "vxlan" {
			s += fmt.Sprintf(" vni %d local %v port %d learning %v external %v", l.VNI, l.Local, l.Port, l.Learning, l.External)
		}
		o.add("%s", s)
		addrs, err := k.Addrs(l.Index)
		slices.SortFunc(addrs, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
		o.add("%s addrs %s %v %s", label, l.Name, addrs, errClass(err))
		o.routes(label, k, l, name)
		neighs, err := k.Neighs(l.Index)
		var ns []string
		for _, n := range neighs {
			// A link-local neighbour the kernel learnt from a peer's own
			// traffic (a router solicitation of the bridge port at the
			// other end of a veth, whenever its timers send one) is
			// not the script's: the fake does not learn.
			if !n.IP.IsMulticast() && !(n.IP.IsLinkLocalUnicast() && !n.Permanent) {
				ns = append(ns, fmt.Sprintf("%s %s perm %v usable %v", n.IP, o.mac(n.MAC, ls, ""), n.Permanent, n.Usable))
			}
		}
		slices.Sort(ns)
		o.add("%s neighs %s %v %s", label, l.Name, ns, errClass(err))
		fdb, err := k.FDB(l.Index)
		var fs []string
		for _, e := range fdb {
			if e.Self && l.Kind != "vxlan" && e.MAC[1]&1 != 0 || e.Master && !e.Static && !e.Permanent {
				continue // the device's multicast addresses; what the bridge learned from traffic
			}
			fs = append(fs, fmt.Sprintf("%s dst %v self %v master %v static %v perm %v", o.mac(e.MAC, ls, ""), e.Dst, e.Self, e.Master, e.Static, e.Permanent))
		}
		// A kernel with bridge VLAN support lists a bridge's entries
		// once per VLAN of the port (0 and the default 1); nl.FDB has
		// no VLAN.
		slices.Sort(fs)
		fs = slices.Compact(fs)
		o.add("%s fdb %s %v %s", label, l.Name, fs, errClass(err))
		for _, fam := range []string{"ipv4", "ipv6"} {
			v, err := k.Sysctl("net/" + fam + "/conf/" + l.Name + "/forwarding")
			o.add("%s sysctl %s %s forwarding %s %s", label, l.Name, fam, v, errClass(err))
		}
	}
	rs, err := k.Routes()
	var routes []string
	for _, r := range rs {
		routes = append(routes, routeLine(r, name))
	}
	slices.Sort(routes)
	o.add("%s routes %v %s", label, routes, errClass(err))
	for _, pref := range []int{100, 200} {
		rules, err := k.Rules(pref)
		o.add("%s rules %d %+v %s", label, pref, rules, errClass(err))
	}
	for _, s := range []string{"net/ipv4/ip_forward", "net/ipv4/conf/all/forwarding", "net/ipv4/conf/default/forwarding",
		"net/ipv6/conf/all/forwarding", "net/ipv6/conf/default/forwarding"} {
		v, err := k.Sysctl(s)
		o.add("%s sysctl %s %s %s", label, s, v, errClass(err))
	}
	for _, f := range []nl.NftFamily{nl.NftInet, nl.NftBridge} {
		tables, err := k.Tables(f)
		o.add("%s %s tables %v %s", label, f, tables, errClass(err))
		for _, t := range tables {
			cs, err := k.TableCounters(f, t)
			o.add("%s counters %s %s %+v %s", label, f, t, cs, errClass(err))
		}
	}
}

func routeLine(r nl.Route, name func(int) string) string {
	return fmt.Sprintf("%s via %v dev %s src %v table %d proto %d", r.Dst, r.Gw, name(r.LinkIndex), r.Src, r.Table, r.Protocol)
}

// routes records the main table's routes through l (link-local and
// multicast destinations left out).
func (o *observer) routes(label string, k nl.Kernel, l nl.Link, name func(int) string) {
	rs, err := k.LinkRoutes(l.Index)
	var out []string
	for _, r := range rs {
		if a := r.Dst.Addr(); a.IsLinkLocalUnicast() || a.IsMulticast() {
			continue
		}
		out = append(out, routeLine(r, name))
	}
	slices.Sort(out)
	o.add("%s linkroutes %s %v %s", label, l.Name, out, errClass(err))
}
