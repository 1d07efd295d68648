package nl

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// addrFrom converts a netlink address (4 or 16 bytes) to netip.
func addrFrom(b net.IP) (netip.Addr, bool) {
	a, ok := netip.AddrFromSlice(b)
	return a.Unmap(), ok
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Masked().Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func (k *real) Addrs(index int) ([]netip.Prefix, error) {
	l, err := k.byIndex(index)
	if err != nil {
		return nil, err
	}
	as, err := dump(func() ([]netlink.Addr, error) { return k.h.AddrList(l, netlink.FAMILY_ALL) })
	if err = k.gone(index, err); err != nil {
		return nil, fmt.Errorf("nl: addresses of %s: %w", l.Attrs().Name, err)
	}
	var out []netip.Prefix
	for _, a := range as {
		ip, ok := addrFrom(a.IP)
		if !ok || ip.IsLinkLocalUnicast() {
			continue
		}
		bits, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip, bits))
	}
	return out, nil
}

func addrOf(a netip.Prefix) *netlink.Addr {
	x := &netlink.Addr{IPNet: &net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen())}}
	if a.Addr().Is6() {
		x.Flags = unix.IFA_F_NODAD
	}
	return x
}

func (k *real) AddAddr(index int, a netip.Prefix) error {
	return k.set(index, "add "+a.String()+" to", func(l netlink.Link) error { return k.h.AddrReplace(l, addrOf(a)) })
}

func (k *real) DeleteAddr(index int, a netip.Prefix) error {
	return k.set(index, "delete "+a.String()+" from", func(l netlink.Link) error {
		if err := k.h.AddrDel(l, addrOf(a)); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return err
		}
		return nil
	})
}

func routeFrom(r netlink.Route) (Route, bool) {
	x := Route{LinkIndex: r.LinkIndex, Table: r.Table, Protocol: int(r.Protocol)}
	if x.Table == unix.RT_TABLE_MAIN {
		x.Table = 0
	}
	if gw, ok := addrFrom(r.Gw); ok {
		x.Gw = gw
	}
	if src, ok := addrFrom(r.Src); ok {
		x.Src = src
	}
	switch {
	case r.Dst != nil:
		ip, ok := addrFrom(r.Dst.IP)
		if !ok {
			return Route{}, false
		}
		bits, _ := r.Dst.Mask.Size()
		x.Dst = netip.PrefixFrom(ip, bits)
	case x.Gw.IsValid():
		// The default route of the gateway's family.
		x.Dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		if x.Gw.Is4() {
			x.Dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		}
	default:
		return Route{}, false
	}
	return x, true
}

func (k *real) Routes() ([]Route, error) {
	rs, err := dump(func() ([]netlink.Route, error) {
		return k.h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC, Protocol: RouteProtocol},
			netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	})
	if err != nil {
		return nil, fmt.Errorf("nl: list routes: %w", err)
	}
	var out []Route
	for _, r := range rs {
		if x, ok := routeFrom(r); ok {
			out = append(out, x)
		}
	}
	return out, nil
}

func (k *real) LinkRoutes(index int) ([]Route, error) {
	l, err := k.byIndex(index)
	if err != nil {
		return nil, err
	}
	rs, err := dump(func() ([]netlink.Route, error) { return k.h.RouteList(l, netlink.FAMILY_ALL) })
	if err = k.gone(index, err); err != nil {
		return nil, fmt.Errorf("nl: routes of %s: %w", l.Attrs().Name, err)
	}
	var out []Route
	for _, r := range rs {
		if x, ok := routeFrom(r); ok {
			out = append(out, x)
		}
	}
	return out, nil
}

func routeOf(r Route) *netlink.Route {
	x := &netlink.Route{Dst: ipNet(r.Dst), LinkIndex: r.LinkIndex, Protocol: netlink.RouteProtocol(r.Protocol), Table: r.Table}
	if r.Gw.IsValid() {
		x.Gw = r.Gw.AsSlice()
	} else {
		x.Scope = netlink.SCOPE_LINK
	}
	if r.Src.IsValid() {
		x.Src = r.Src.AsSlice()
	}
	return x
}

func routeText(r Route) string {
	s := fmt.Sprintf("route %s dev %d", r.Dst, r.LinkIndex)
	if r.Gw.IsValid() {
		s += " via " + r.Gw.String()
	}
	if r.Src.IsValid() {
		s += " src " + r.Src.String()
	}
	return s + fmt.Sprintf(" table %d", r.Table)
}

func (k *real) ReplaceRoute(r Route) error {
	if !r.Dst.IsValid() {
		return fmt.Errorf("nl: %s: no destination", routeText(r))
	}
	k.w()
	if err := k.h.RouteReplace(routeOf(r)); err != nil {
		return fmt.Errorf("nl: %s: %w", routeText(r), k.gone(r.LinkIndex, err))
	}
	return nil
}

func (k *real) DeleteRoute(r Route) error {
	k.w()
	if err := k.h.RouteDel(routeOf(r)); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("nl: delete %s: %w", routeText(r), err)
	}
	return nil
}

func (k *real) RouteTo(dst netip.Addr) (NextHop, error) {
	rs, err := k.h.RouteGet(dst.AsSlice())
	if err != nil {
		return NextHop{}, fmt.Errorf("nl: route to %s: %w", dst, err)
	}
	if len(rs) == 0 {
		return NextHop{}, fmt.Errorf("nl: route to %s: none", dst)
	}
	r := NextHop{LinkIndex: rs[0].LinkIndex, Local: rs[0].Type == unix.RTN_LOCAL}
	if gw, ok := addrFrom(rs[0].Gw); ok {
		r.Gateway = gw
	}
	return r, nil
}

func (k *real) Rules(priority int) ([]Rule, error) {
	f := netlink.NewRule()
	f.Priority = priority
	var out []Rule
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := dump(func() ([]netlink.Rule, error) {
			return k.h.RuleListFiltered(fam, f, netlink.RT_FILTER_PRIORITY)
		})
		if err != nil {
			return nil, fmt.Errorf("nl: list rules: %w", err)
		}
		for _, r := range rs {
			if r.Protocol == RouteProtocol {
				out = append(out, Rule{IIF: r.IifName, Table: r.Table, Priority: r.Priority, IPv6: fam == netlink.FAMILY_V6})
			}
		}
	}
	return out, nil
}

func ruleOf(r Rule) *netlink.Rule {
	x := netlink.NewRule()
	x.Family = netlink.FAMILY_V4
	if r.IPv6 {
		x.Family = netlink.FAMILY_V6
	}
	x.IifName, x.Table, x.Priority, x.Protocol = r.IIF, r.Table, r.Priority, RouteProtocol
	return x
}

func (k *real) AddRule(r Rule) error {
	k.w()
	if err := k.h.RuleAdd(ruleOf(r)); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("nl: rule iif %s lookup %d pref %d (ipv6 %v): %w", r.IIF, r.Table, r.Priority, r.IPv6, err)
	}
	return nil
}

func (k *real) DeleteRule(r Rule) error {
	k.w()
	if err := k.h.RuleDel(ruleOf(r)); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("nl: delete rule iif %s lookup %d pref %d (ipv6 %v): %w", r.IIF, r.Table, r.Priority, r.IPv6, err)
	}
	return nil
}
