package nl

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// RouteProtocol marks the routes Skiff owns (rtm_protocol; "proto 83" in
// ip route). Routes of other protocols are never read or changed.
const RouteProtocol = 83

// HostRoute is an IPv4 or IPv6 route to a prefix through a device, with
// the source address the node uses for it.
type HostRoute struct {
	Dst       netip.Prefix
	LinkIndex int
	Src       netip.Addr // invalid: the kernel's choice
	Table     int        // 0: main
}

// HostRule is a policy routing rule: packets that came in on IIF look
// up Table first. Skiff's rules carry RouteProtocol (FRA_PROTOCOL).
type HostRule struct {
	IIF      string
	Table    int
	Priority int
	IPv6     bool // an IPv6 rule; else IPv4
}

// HostNet is the node's own routing, as far as Skiff owns it: veth pairs
// in this namespace, routes and policy rules marked with RouteProtocol. Implemented by the kernel Open returns. Not safe for
// concurrent use.
type HostNet interface {
	// AddPair creates a veth pair with both ends in this namespace.
	AddPair(p Pair) error
	// Routes lists Skiff's routes (RouteProtocol) in every table.
	Routes() ([]HostRoute, error)
	// ReplaceRoute creates the route or replaces the one to its prefix
	// in its table. Idempotent.
	ReplaceRoute(r HostRoute) error
	// DeleteRoute removes the route; a missing one is no error.
	DeleteRoute(r HostRoute) error
	// Rules lists Skiff's IPv4 and IPv6 rules of a priority
	// (RouteProtocol).
	Rules(priority int) ([]HostRule, error)
	AddRule(r HostRule) error
	// DeleteRule removes the rule; a missing one is no error.
	DeleteRule(r HostRule) error
}

func (k *real) Routes() ([]HostRoute, error) {
	rs, err := dump(func() ([]netlink.Route, error) {
		return k.h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC, Protocol: RouteProtocol},
			netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	})
	if err != nil {
		return nil, fmt.Errorf("nl: list routes: %w", err)
	}
	var out []HostRoute
	for _, r := range rs {
		if r.Dst == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(r.Dst.IP)
		if !ok {
			continue
		}
		bits, _ := r.Dst.Mask.Size()
		h := HostRoute{Dst: netip.PrefixFrom(ip.Unmap(), bits), LinkIndex: r.LinkIndex, Table: r.Table}
		if src, ok := netip.AddrFromSlice(r.Src); ok {
			h.Src = src.Unmap()
		}
		if h.Table == unix.RT_TABLE_MAIN {
			h.Table = 0
		}
		out = append(out, h)
	}
	return out, nil
}

func routeOf(r HostRoute) *netlink.Route {
	x := &netlink.Route{
		Dst:       &net.IPNet{IP: r.Dst.Addr().AsSlice(), Mask: net.CIDRMask(r.Dst.Bits(), r.Dst.Addr().BitLen())},
		LinkIndex: r.LinkIndex, Protocol: RouteProtocol, Scope: netlink.SCOPE_LINK, Table: r.Table,
	}
	if r.Src.IsValid() {
		x.Src = r.Src.AsSlice()
	}
	return x
}

func (k *real) ReplaceRoute(r HostRoute) error {
	k.w()
	if err := k.h.RouteReplace(routeOf(r)); err != nil {
		return fmt.Errorf("nl: route %s dev %d src %s table %d: %w", r.Dst, r.LinkIndex, r.Src, r.Table, err)
	}
	return nil
}

func (k *real) DeleteRoute(r HostRoute) error {
	k.w()
	if err := k.h.RouteDel(routeOf(r)); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("nl: delete route %s dev %d table %d: %w", r.Dst, r.LinkIndex, r.Table, err)
	}
	return nil
}

func (k *real) Rules(priority int) ([]HostRule, error) {
	f := netlink.NewRule()
	f.Priority = priority
	var out []HostRule
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := dump(func() ([]netlink.Rule, error) {
			return k.h.RuleListFiltered(fam, f, netlink.RT_FILTER_PRIORITY)
		})
		if err != nil {
			return nil, fmt.Errorf("nl: list rules: %w", err)
		}
		for _, r := range rs {
			if r.Protocol == RouteProtocol {
				out = append(out, HostRule{IIF: r.IifName, Table: r.Table, Priority: r.Priority, IPv6: fam == netlink.FAMILY_V6})
			}
		}
	}
	return out, nil
}

func ruleOf(r HostRule) *netlink.Rule {
	x := netlink.NewRule()
	x.Family = netlink.FAMILY_V4
	if r.IPv6 {
		x.Family = netlink.FAMILY_V6
	}
	x.IifName, x.Table, x.Priority, x.Protocol = r.IIF, r.Table, r.Priority, RouteProtocol
	return x
}

func (k *real) AddRule(r HostRule) error {
	k.w()
	if err := k.h.RuleAdd(ruleOf(r)); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("nl: rule iif %s lookup %d pref %d (ipv6 %v): %w", r.IIF, r.Table, r.Priority, r.IPv6, err)
	}
	return nil
}

func (k *real) DeleteRule(r HostRule) error {
	k.w()
	if err := k.h.RuleDel(ruleOf(r)); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("nl: delete rule iif %s lookup %d pref %d (ipv6 %v): %w", r.IIF, r.Table, r.Priority, r.IPv6, err)
	}
	return nil
}
