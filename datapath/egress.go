package datapath

import (
	"slices"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// RoutesOut reports whether a network's egress lets the node route its
// traffic out of the overlay (snat and routed; not none).
func RoutesOut(n plan.Network) bool {
	return n.Egress == plan.EgressSNAT || n.Egress == plan.EgressRouted
}

// RoutesIPv6 reports whether the node routes a network's IPv6 out of
// the overlay: it routes out and has an IPv6 subnet. Both datapaths turn
// the node's IPv6 forwarding on for such a network.
func RoutesIPv6(n plan.Network) bool {
	return RoutesOut(n) && slices.ContainsFunc(n.Subnets, func(s plan.Subnet) bool { return s.CIDR.Addr().Is6() })
}
