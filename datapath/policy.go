package datapath

import (
	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
)

var protocols = map[string]uint8{"TCP": unix.IPPROTO_TCP, "UDP": unix.IPPROTO_UDP, "SCTP": unix.IPPROTO_SCTP}

// NftPolicyRules are a direction's compiled rules as internal/nl's
// nftables policy takes them (a group peer is the set of that name), on
// software nodes for both directions, on offload nodes for the egress
// the node's stack enforces after DNAT.
func NftPolicyRules(rs []plan.PolicyRule) []nl.PolicyRule {
	var out []nl.PolicyRule
	for _, r := range rs {
		var x nl.PolicyRule
		for _, p := range r.Peers {
			x.Peers = append(x.Peers, nl.PolicyPeer{Set: p.Group, CIDR: p.CIDR, Except: p.Except})
		}
		for _, p := range r.Ports {
			x.Ports = append(x.Ports, nl.PolicyPort{Proto: protocols[p.Protocol], From: p.Port, To: p.EndPort})
		}
		out = append(out, x)
	}
	return out
}
