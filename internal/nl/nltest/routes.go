package nltest

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// Addresses, routes and rules, as the real handle's routes.go reads and
// writes them.

const (
	protoKernel = unix.RTPROT_KERNEL
	protoBoot   = unix.RTPROT_BOOT // what a route of protocol 0 is written as
)

// routeKey is what ReplaceRoute replaces by: the table (0 for main) and
// the destination.
type routeKey struct {
	table int
	dst   netip.Prefix
}

func mainTable(t int) int {
	if t == unix.RT_TABLE_MAIN {
		return 0
	}
	return t
}

func (k *kernel) Addrs(index int) ([]netip.Prefix, error) {
	var out []netip.Prefix
	err := k.do(func(n *NS) error {
		l, err := n.link(index)
		if err != nil {
			return err
		}
		// The kernel lists IPv4 in order, IPv6 newest first.
		var v6 []netip.Prefix
		for _, a := range l.addrs {
			switch {
			case a.Addr().IsLinkLocalUnicast():
			case a.Addr().Is4():
				out = append(out, a)
			default:
				v6 = append(v6, a)
			}
		}
		slices.Reverse(v6)
		out = append(out, v6...)
		return nil
	})
	return out, err
}

func (k *kernel) AddAddr(index int, a netip.Prefix) error {
	return k.set(index, "add "+a.String()+" to", func(n *NS, l *link) error {
		if !a.IsValid() {
			return unix.EINVAL
		}
		n.addAddr(l, a)
		return nil
	})
}

// addAddr adds a to l unless it is there: IPv4 addresses by address and
// prefix length, IPv6 by address (a replacement keeps the prefix length
// it had, as the kernel does).
func (n *NS) addAddr(l *link, a netip.Prefix) {
	for _, h := range l.addrs {
		if h.Addr() == a.Addr() && (a.Addr().Is6() || h.Bits() == a.Bits()) {
			return
		}
	}
	l.addrs = append(l.addrs, a)
	n.event(nl.Event{Kind: "addr", Index: l.Index, Addr: a.Addr()})
}

func (k *kernel) DeleteAddr(index int, a netip.Prefix) error {
	return k.set(index, "delete "+a.String()+" from", func(n *NS, l *link) error {
		i := slices.Index(l.addrs, a)
		if i < 0 {
			return nil
		}
		// An IPv4 primary address takes its secondaries (the later
		// addresses of its subnet) with it: promote_secondaries is off.
		if a.Addr().Is4() && n.primary(l, a) {
			for _, h := range slices.Clone(l.addrs[i+1:]) {
				if h.Addr().Is4() && h.Bits() == a.Bits() && h.Masked() == a.Masked() {
					n.dropAddr(l, h)
				}
			}
		}
		n.dropAddr(l, a)
		return nil
	})
}

// primary reports whether a is the first address of its subnet on l.
func (n *NS) primary(l *link, a netip.Prefix) bool {
	for _, h := range l.addrs {
		if h.Addr().Is4() && h.Bits() == a.Bits() && h.Masked() == a.Masked() {
			return h == a
		}
	}
	return false
}

// dropAddr removes a from l: IPv4 routes preferring it as source go
// (unless another link holds it), IPv6 ones lose the preference.
func (n *NS) dropAddr(l *link, a netip.Prefix) {
	l.addrs = slices.DeleteFunc(l.addrs, func(h netip.Prefix) bool { return h == a })
	n.event(nl.Event{Kind: "addr", Index: l.Index, Deleted: true, Addr: a.Addr()})
	if n.local(a.Addr()) {
		return
	}
	for key, r := range n.routes {
		if r.Src != a.Addr() {
			continue
		}
		if a.Addr().Is4() {
			delete(n.routes, key)
		} else {
			r.Src = netip.Addr{}
			n.routes[key] = r
		}
	}
}

// local reports whether a is an address of a link of n.
func (n *NS) local(a netip.Addr) bool {
	for _, l := range n.links {
		for _, h := range l.addrs {
			if h.Addr() == a {
				return true
			}
		}
	}
	return false
}

// connected are the routes the kernel makes for the addresses of up
// links in the main table: an IPv4 primary address's subnet (not for a
// /32) with the address as source, every IPv6 address's prefix.
func (n *NS) connected() []nl.Route {
	var out []nl.Route
	for _, l := range n.sorted() {
		if !l.Up || l.loop {
			continue // lo's are in the local table
		}
		for _, a := range l.addrs {
			r := nl.Route{Dst: a.Masked(), LinkIndex: l.Index, Protocol: protoKernel}
			switch {
			case a.Addr().IsLinkLocalUnicast():
				continue
			case a.Addr().Is4():
				if a.Bits() == 32 || !n.primary(l, a) {
					continue
				}
				r.Src = a.Addr()
			}
			out = append(out, r)
		}
	}
	return out
}

func sortRoutes(rs []nl.Route) {
	slices.SortFunc(rs, func(a, b nl.Route) int {
		return cmp.Or(cmp.Compare(a.Table, b.Table), a.Dst.Addr().Compare(b.Dst.Addr()), cmp.Compare(a.Dst.Bits(), b.Dst.Bits()),
			cmp.Compare(a.LinkIndex, b.LinkIndex))
	})
}

func (k *kernel) Routes() ([]nl.Route, error) {
	var out []nl.Route
	err := k.do(func(n *NS) error {
		for _, r := range n.routes {
			if r.Protocol == nl.RouteProtocol {
				out = append(out, r)
			}
		}
		sortRoutes(out)
		return nil
	})
	return out, err
}

func (k *kernel) LinkRoutes(index int) ([]nl.Route, error) {
	var out []nl.Route
	err := k.do(func(n *NS) error {
		if _, err := n.link(index); err != nil {
			return err
		}
		for _, r := range n.routes {
			if r.Table == 0 && r.LinkIndex == index {
				out = append(out, r)
			}
		}
		for _, r := range n.connected() {
			if r.LinkIndex == index {
				out = append(out, r)
			}
		}
		sortRoutes(out)
		return nil
	})
	return out, err
}

// routeText names a route in errors.
func routeText(r nl.Route) string {
	return fmt.Sprintf("route %s via %v dev %d src %v table %d", r.Dst, r.Gw, r.LinkIndex, r.Src, r.Table)
}

func (k *kernel) ReplaceRoute(r nl.Route) error {
	if !r.Dst.IsValid() {
		return fmt.Errorf("nl: %s: no destination", routeText(r))
	}
	k.write()
	return k.do(func(n *NS) error {
		if err := n.checkRoute(r); err != nil {
			return fmt.Errorf("nl: %s: %w", routeText(r), err)
		}
		x := r
		x.Dst, x.Table = r.Dst.Masked(), mainTable(r.Table)
		if x.Protocol == 0 {
			x.Protocol = protoBoot
		}
		n.routes[routeKey{x.Table, x.Dst}] = x
		return nil
	})
}

// checkRoute refuses what the kernel refuses of a route: a missing or
// down link, a gateway of another family or not on the link's subnets,
// a source that is not a local address.
func (n *NS) checkRoute(r nl.Route) error {
	l := n.links[r.LinkIndex]
	switch {
	case r.LinkIndex == 0:
		return unix.EINVAL
	case l == nil:
		return fmt.Errorf("%w: %w", nl.ErrLinkGone, unix.ENODEV)
	case !l.Up:
		return unix.ENETDOWN
	case r.Src.IsValid() && (r.Src.Is4() != r.Dst.Addr().Is4() || !n.local(r.Src)):
		return unix.EINVAL
	}
	if !r.Gw.IsValid() {
		return nil
	}
	if r.Gw.Is4() != r.Dst.Addr().Is4() {
		return unix.EINVAL
	}
	if r.Gw.IsLinkLocalUnicast() && r.Gw.Is6() {
		return nil
	}
	for _, c := range n.connected() {
		if c.LinkIndex == l.Index && c.Dst.Contains(r.Gw) {
			return nil
		}
	}
	for _, h := range n.routes {
		if h.Table == 0 && h.LinkIndex == l.Index && !h.Gw.IsValid() && h.Dst.Contains(r.Gw) {
			return nil
		}
	}
	if r.Gw.Is4() {
		return unix.ENETUNREACH
	}
	return unix.EHOSTUNREACH
}

// DeleteRoute deletes the route to r.Dst in its table when what r gives
// (link, gateway, source, protocol; on link or via a gateway) matches;
// a route that is not there is no error.
func (k *kernel) DeleteRoute(r nl.Route) error {
	k.write()
	return k.do(func(n *NS) error {
		key := routeKey{mainTable(r.Table), r.Dst.Masked()}
		h, ok := n.routes[key]
		if !ok || r.LinkIndex != 0 && h.LinkIndex != r.LinkIndex || r.Gw.IsValid() && h.Gw != r.Gw ||
			!r.Gw.IsValid() && h.Gw.IsValid() || r.Src.IsValid() && h.Src != r.Src || r.Protocol != 0 && h.Protocol != r.Protocol {
			return nil
		}
		delete(n.routes, key)
		return nil
	})
}

// RouteTo looks dst up as the kernel does for a packet this host sends:
// its own addresses first (Local, through lo), then the longest prefix
// of the main table's routes and the connected ones (for a tie, an
// IPv4 route made through a handle replaced the kernel's; an IPv6
// connected one has the lower metric).
func (k *kernel) RouteTo(dst netip.Addr) (nl.NextHop, error) {
	var out nl.NextHop
	err := k.do(func(n *NS) error {
		if n.local(dst) {
			out = nl.NextHop{LinkIndex: 1, Local: true}
			return nil
		}
		var best *nl.Route
		consider := func(r nl.Route, user bool) {
			if !r.Dst.Contains(dst) {
				return
			}
			if best == nil || r.Dst.Bits() > best.Dst.Bits() || r.Dst.Bits() == best.Dst.Bits() && user == dst.Is4() {
				best = &r
			}
		}
		for _, r := range n.connected() {
			consider(r, false)
		}
		for _, r := range n.routes {
			if r.Table == 0 {
				consider(r, true)
			}
		}
		if best == nil {
			return fmt.Errorf("nl: route to %s: %w", dst, unix.ENETUNREACH)
		}
		out = nl.NextHop{LinkIndex: best.LinkIndex, Gateway: best.Gw}
		return nil
	})
	return out, err
}

func (k *kernel) Rules(priority int) ([]nl.Rule, error) {
	var out []nl.Rule
	err := k.do(func(n *NS) error {
		for _, v6 := range []bool{false, true} {
			for _, r := range n.rules {
				if r.Priority == priority && r.IPv6 == v6 {
					out = append(out, r)
				}
			}
		}
		return nil
	})
	return out, err
}

func (k *kernel) AddRule(r nl.Rule) error {
	k.write()
	return k.do(func(n *NS) error {
		if r.Table <= 0 || r.Priority < 0 {
			return fmt.Errorf("nl: rule iif %s lookup %d pref %d (ipv6 %v): %w", r.IIF, r.Table, r.Priority, r.IPv6, unix.EINVAL)
		}
		if !slices.Contains(n.rules, r) {
			n.rules = append(n.rules, r)
		}
		return nil
	})
}

func (k *kernel) DeleteRule(r nl.Rule) error {
	k.write()
	return k.do(func(n *NS) error {
		n.rules = slices.DeleteFunc(n.rules, func(h nl.Rule) bool { return h == r })
		return nil
	})
}
