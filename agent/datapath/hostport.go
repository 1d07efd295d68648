package datapath

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/skiff-sdn/skiff/internal/nl"
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

// HostRouting is what the host ports of a plan want of the node's
// routing: Skiff's routes (RouteProtocol) and rules (HostRulePriority).
type HostRouting struct {
	Routes map[nl.HostRoute]bool
	Rules  map[nl.HostRule]bool
}

// NewHostRouting returns an empty HostRouting.
func NewHostRouting() HostRouting {
	return HostRouting{Routes: map[nl.HostRoute]bool{}, Rules: map[nl.HostRule]bool{}}
}

// SyncHostRouting makes Skiff's routes and rules those of st: the
// others of Skiff's go, the missing ones are added. Idempotent; writes
// nothing when the kernel matches. Not safe for concurrent use on one h.
func SyncHostRouting(h nl.HostNet, st HostRouting) error {
	var errs []error
	have, err := h.Routes()
	if err != nil {
		return err
	}
	haveSet := map[nl.HostRoute]bool{}
	for _, r := range have {
		haveSet[r] = true
		if !st.Routes[r] {
			errs = append(errs, h.DeleteRoute(r))
		}
	}
	for r := range st.Routes {
		if !haveSet[r] {
			errs = append(errs, h.ReplaceRoute(r))
		}
	}
	rules, err := h.Rules(HostRulePriority)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	haveRule := map[nl.HostRule]bool{}
	for _, r := range rules {
		haveRule[r] = true
		if !st.Rules[r] {
			errs = append(errs, h.DeleteRule(r))
		}
	}
	for r := range st.Rules {
		if !haveRule[r] {
			errs = append(errs, h.AddRule(r))
		}
	}
	return errors.Join(errs...)
}

// SyncPermanentNeighs makes a device's permanent neighbour entries the
// wanted ones (address to MAC); the kernel's dynamic entries are left
// alone. Idempotent; writes nothing when the kernel matches.
func SyncPermanentNeighs(k nl.Kernel, link int, want map[netip.Addr]string) error {
	have, err := k.Neighs(link)
	if err != nil {
		return err
	}
	var errs []error
	seen := map[netip.Addr]bool{}
	for _, h := range have {
		if !h.Permanent {
			continue
		}
		seen[h.IP] = true
		mac, ok := want[h.IP]
		switch {
		case !ok:
			errs = append(errs, k.DeleteNeigh(h))
		case mac != h.MAC:
			errs = append(errs, k.SetNeigh(nl.Neigh{LinkIndex: link, IP: h.IP, MAC: mac, Permanent: true}))
		}
	}
	for ip, mac := range want {
		if !seen[ip] {
			errs = append(errs, k.SetNeigh(nl.Neigh{LinkIndex: link, IP: ip, MAC: mac, Permanent: true}))
		}
	}
	return errors.Join(errs...)
}
