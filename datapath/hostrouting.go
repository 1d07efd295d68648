package datapath

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
)

// Host ports: the node's own way into a network whose egress is not
// none (software and offload datapaths alike). The node is known on the
// network by its underlay address and HostMAC, carried by the node's
// end (HostPortName) of a veth pair whose other end (HostPeerName) is in
// the network (a bridge port, or an eswitch port with flower rules);
// remote endpoints are routed through it, and what the node routes in
// from the network for another node's address goes, by a rule at
// HostRulePriority and HostTable's routes, to that node's host port.

// HostRulePriority is the priority of Skiff's policy routing rules.
const HostRulePriority = 2500

// HostPortName names the node's end of a network's host port pair.
func HostPortName(vni uint32) string { return fmt.Sprintf("skn%d", vni) }

// HostPeerName names the network's end of a network's host port pair.
func HostPeerName(vni uint32) string { return fmt.Sprintf("sknp%d", vni) }

// HostTable is the routing table of a network's routes to other nodes.
func HostTable(vni uint32) int { return int(0x53000000 | vni) }

// HostMAC is the MAC of a node's host port on a network: locally
// administered, made of the VNI's low byte and the node's underlay
// address: all of an IPv4 one, the last 32 bits of an IPv6 one (unique
// among the network's nodes as long as their IPv6 VTEPs differ there).
func HostMAC(vni uint32, underlay netip.Addr) string {
	a := underlay.As16()
	return fmt.Sprintf("06:%02x:%02x:%02x:%02x:%02x", byte(vni), a[12], a[13], a[14], a[15])
}

// HostAddrs returns a network's host addresses (plan.Network.HostAddrs):
// the node's own, found by its VTEP under (zero when it has none), and
// the other nodes' by their VTEPs. An address of the underlay's family,
// or inside one of the network's subnets (a pod's to hold), is left out.
func HostAddrs(n plan.Network, under netip.Addr) (own netip.Addr, peers map[netip.Addr]netip.Addr) {
	peers = map[netip.Addr]netip.Addr{}
	for _, h := range n.HostAddrs {
		if h.IP.Is4() == under.Is4() || slices.ContainsFunc(n.Subnets, func(s plan.Subnet) bool { return s.CIDR.Contains(h.IP) }) {
			continue
		}
		if h.VTEP == under {
			own = h.IP
		} else {
			peers[h.VTEP] = h.IP
		}
	}
	return own, peers
}

// PeerAddrs returns what a node routes into a network to the other
// nodes' host ports, with those ports' MACs: each peer's VTEP (peers:
// VTEP to MAC) and its host address (hostAddrs, by VTEP; HostAddrs),
// to the same MAC. Host addresses of VTEPs not in peers are left out.
func PeerAddrs(peers map[netip.Addr]string, hostAddrs map[netip.Addr]netip.Addr) map[netip.Addr]string {
	out := maps.Clone(peers)
	if out == nil {
		out = map[netip.Addr]string{}
	}
	for v, a := range hostAddrs {
		if mac, ok := peers[v]; ok {
			out[a] = mac
		}
	}
	return out
}

// RoutePeers adds to st what routes a network's traffic from dev to the
// other nodes' host ports: each address of addrs (PeerAddrs) out of dev
// in table, and a rule iif dev into table for each family routed (those
// of addrs, of the node's underlay address under and of its host
// address own, if valid).
func (st HostRouting) RoutePeers(dev nl.Link, table int, addrs map[netip.Addr]string, under, own netip.Addr) {
	families := map[bool]bool{under.Is6(): true} // by IPv6
	if own.IsValid() {
		families[own.Is6()] = true
	}
	for a := range addrs {
		st.AddRoute(netip.PrefixFrom(a, a.BitLen()), dev.Index, netip.Addr{}, table)
		families[a.Is6()] = true
	}
	for v6 := range families {
		st.Rules[nl.Rule{IIF: dev.Name, Table: table, Priority: HostRulePriority, IPv6: v6}] = true
	}
}

// HostRouting is what the host ports of a plan want of the node's
// routing: Skiff's routes (RouteProtocol) and rules (HostRulePriority).
type HostRouting struct {
	Routes map[nl.Route]bool
	Rules  map[nl.Rule]bool
}

// AddRoute wants a route of Skiff's (nl.RouteProtocol) to dst through
// link, from src (invalid: the kernel's choice), in table (0: main).
func (st HostRouting) AddRoute(dst netip.Prefix, link int, src netip.Addr, table int) {
	st.Routes[nl.Route{Dst: dst, LinkIndex: link, Src: src, Table: table, Protocol: nl.RouteProtocol}] = true
}

// NewHostRouting returns an empty HostRouting.
func NewHostRouting() HostRouting {
	return HostRouting{Routes: map[nl.Route]bool{}, Rules: map[nl.Rule]bool{}}
}

// Routing is what SyncHostRouting needs of a namespace; an nl.Kernel
// has it.
type Routing interface {
	Routes() ([]nl.Route, error)
	ReplaceRoute(r nl.Route) error
	DeleteRoute(r nl.Route) error
	Rules(priority int) ([]nl.Rule, error)
	AddRule(r nl.Rule) error
	DeleteRule(r nl.Rule) error
}

// SyncHostRouting makes Skiff's routes and rules those of st: the
// missing ones are added first, then the others of Skiff's go (a route
// displaced by a wanted one to the same prefix in the same table was
// replaced in place and is not deleted). Idempotent; writes nothing
// when the kernel matches; every failure is returned, joined. Not safe
// for concurrent use on one h.
func SyncHostRouting(h Routing, st HostRouting) error {
	have, err := h.Routes()
	if err != nil {
		return err
	}
	rules, err := h.Rules(HostRulePriority)
	if err != nil {
		return err
	}
	addRoutes, delRoutes := setDiff(have, st.Routes)
	addRules, delRules := setDiff(rules, st.Rules)
	var errs []error
	type key struct {
		dst   netip.Prefix
		table int
	}
	replaced := map[key]bool{}
	for _, r := range addRoutes {
		replaced[key{r.Dst, r.Table}] = true
		errs = append(errs, h.ReplaceRoute(r))
	}
	for _, r := range addRules {
		errs = append(errs, h.AddRule(r))
	}
	for _, r := range delRoutes {
		if !replaced[key{r.Dst, r.Table}] {
			errs = append(errs, h.DeleteRoute(r))
		}
	}
	for _, r := range delRules {
		errs = append(errs, h.DeleteRule(r))
	}
	return errors.Join(errs...)
}

// setDiff returns the members of want missing from have (add) and the
// members of have not in want (del), each once.
func setDiff[T comparable](have []T, want map[T]bool) (add, del []T) {
	seen := make(map[T]bool, len(have))
	for _, x := range have {
		if !want[x] && !seen[x] {
			del = append(del, x)
		}
		seen[x] = true
	}
	for x := range want {
		if !seen[x] {
			add = append(add, x)
		}
	}
	return add, del
}

// SyncPermanentNeighs makes a device's permanent neighbour entries the
// wanted ones (address to MAC), adding and changing before it deletes;
// the kernel's dynamic entries are left alone. Idempotent; writes
// nothing when the kernel matches.
func SyncPermanentNeighs(k nl.Kernel, link int, want map[netip.Addr]string) error {
	have, err := k.Neighs(link)
	if err != nil {
		return err
	}
	var set, stale []nl.Neigh
	seen := map[netip.Addr]bool{}
	for _, h := range have {
		if !h.Permanent {
			continue
		}
		seen[h.IP] = true
		mac, ok := want[h.IP]
		switch {
		case !ok:
			stale = append(stale, h)
		case mac != h.MAC:
			set = append(set, nl.Neigh{LinkIndex: link, IP: h.IP, MAC: mac, Permanent: true})
		}
	}
	for _, ip := range slices.SortedFunc(maps.Keys(want), netip.Addr.Compare) {
		if !seen[ip] {
			set = append(set, nl.Neigh{LinkIndex: link, IP: ip, MAC: want[ip], Permanent: true})
		}
	}
	return errors.Join(k.SetNeighs(set), k.DeleteNeighs(stale))
}
