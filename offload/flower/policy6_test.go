package flower

import (
	"net/netip"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// dualBase is base with blue dual-stack: an IPv6 subnet, a and b and the
// remote r1 with an IPv6 address each.
func dualBase() (plan.Plan, map[string]string) {
	p, reps := base()
	n := p.Networks["blue"]
	n.Subnets = []plan.Subnet{
		{Name: "blue-v4", Network: "blue", CIDR: netip.MustParsePrefix("198.51.100.0/24")},
		{Name: "blue-v6", Network: "blue", CIDR: netip.MustParsePrefix("2001:db8:100::/64")},
	}
	p.Networks["blue"] = n
	for name, v6 := range map[string]string{"a": "2001:db8:100::a/64", "b": "2001:db8:100::b/64"} {
		e := p.Local[name]
		e.IPs = append(e.IPs, netip.MustParsePrefix(v6))
		p.Local[name] = e
	}
	r := p.Remote["r1"]
	r.IPs = append(r.IPs, netip.MustParsePrefix("2001:db8:100::1/64"))
	p.Remote["r1"] = r
	return p, reps
}

// On a dual-stack network IPv6 runs the same pipeline as IPv4 at its own
// priorities (a priority holds one ethernet type): ct in the network's
// zone, +est/+rel, the rules with IPv6 prefixes (an ipBlock's except
// subtracted), the default deny to the endpoint's IPv6 address; ICMPv6
// router and neighbour discovery passes chain 1 as the software table
// lets it. IPv4 is what it was on an IPv4-only network.
func TestCompilePolicyDualStack(t *testing.T) {
	p, reps := dualBase()
	p.Groups["g"] = plan.AddressGroup{Name: "g", Members: []netip.Addr{
		netip.MustParseAddr("198.51.100.10"), netip.MustParseAddr("2001:db8:100::a")}}
	p.Policies["b"] = plan.EndpointPolicy{Endpoint: "b", IngressIsolated: true, Ingress: []plan.PolicyRule{
		{Peers: []plan.PolicyPeer{{Group: "g"}}, Ports: []plan.PolicyPort{{Protocol: "TCP", Port: 80}}},
		{Peers: []plan.PolicyPeer{{CIDR: netip.MustParsePrefix("2001:db8:100::/126"), Except: []netip.Prefix{netip.MustParsePrefix("2001:db8:100::/128")}}}},
	}}
	ct6 := []string{
		"repa 0 V6 ipv6: ct zone 101, goto chain 1",
		"repa 1 EST6 ipv6 ct_state +trk+est: goto chain 3",
		"repa 1 REL6 ipv6 ct_state +trk+rel: goto chain 3",
		"repa 1 OPEN6 ipv6: goto chain 2",
		"repa 2 OPEN6 ipv6: ct commit zone 101, goto chain 3",
		"repb 0 V6 ipv6: ct zone 101, goto chain 1",
		"repb 1 EST6 ipv6 ct_state +trk+est: goto chain 3",
		"repb 1 REL6 ipv6 ct_state +trk+rel: goto chain 3",
		"repb 1 OPEN6 ipv6: goto chain 2",
		"repb 2 OPEN6 ipv6: ct commit zone 101, goto chain 3",
		"skvx 0 V6 ipv6 enc_key_id 100: ct zone 101, goto chain 1",
		"skvx 1 EST6 ipv6 ct_state +trk+est: goto chain 3",
		"skvx 1 REL6 ipv6 ct_state +trk+rel: goto chain 3",
		"skvx 1 OPEN6 ipv6 enc_key_id 100: goto chain 2",
		"skvx 2 OPEN6 ipv6 enc_key_id 100: ct commit zone 101, goto chain 3",
	}
	var nd []string
	for _, dev := range []string{"repa", "repb", "skvx"} {
		for _, typ := range []string{"133", "134", "135", "136", "137"} {
			nd = append(nd, dev+" 1 ND ipv6 ip_proto 58 type "+typ+": goto chain 3")
		}
	}
	bIn := []string{
		// IPv4: from a (on its representor and from the tunnel).
		"repa 1 OPEN ip: goto chain 2",
		"repb 1 OPEN ip: goto chain 2",
		"repa 2 R0 ip ip_proto 6 src 198.51.100.10/32 dst 198.51.100.11/32 dst_port 80 NEW: ct commit zone 101, goto chain 3 [b ingress 1]",
		"repa 2 DENY ip dst 198.51.100.11/32: drop [b ingress 0]",
		"skvx 2 R0 ip enc_key_id 100 ip_proto 6 src 198.51.100.10/32 dst 198.51.100.11/32 dst_port 80 NEW: ct commit zone 101, goto chain 3 [b ingress 1]",
		"skvx 2 DENY ip enc_key_id 100 dst 198.51.100.11/32: drop [b ingress 0]",
		// IPv6: rule 0 from a's IPv6 address; rule 1 from ::1 and
		// ::2/127, which a's representor never carries.
		"repa 2 S0 ipv6 ip_proto 6 src 2001:db8:100::a/128 dst 2001:db8:100::b/128 dst_port 80 NEW: ct commit zone 101, goto chain 3 [b ingress 1]",
		"repa 2 DENY6 ipv6 dst 2001:db8:100::b/128: drop [b ingress 0]",
		"skvx 2 S0 ipv6 enc_key_id 100 ip_proto 6 src 2001:db8:100::a/128 dst 2001:db8:100::b/128 dst_port 80 NEW: ct commit zone 101, goto chain 3 [b ingress 1]",
		"skvx 2 S1 ipv6 enc_key_id 100 src 2001:db8:100::1/128 dst 2001:db8:100::b/128 NEW: ct commit zone 101, goto chain 3 [b ingress 2]",
		"skvx 2 S1 ipv6 enc_key_id 100 src 2001:db8:100::2/127 dst 2001:db8:100::b/128 NEW: ct commit zone 101, goto chain 3 [b ingress 2]",
		"skvx 2 DENY6 ipv6 enc_key_id 100 dst 2001:db8:100::b/128: drop [b ingress 0]",
	}
	expectPolicy(t, "b ingress-isolated, dual stack", p, reps, entryAll, ctBlue, ct6, nd, bIn)

	// Egress-isolated a: its IPv6 rules and deny on its representor; the
	// IPv4-only rule (a CIDR) makes no IPv6 filter.
	p.Policies["a"] = plan.EndpointPolicy{Endpoint: "a", EgressIsolated: true, Egress: []plan.PolicyRule{
		{Peers: []plan.PolicyPeer{{CIDR: netip.MustParsePrefix("203.0.113.0/24")}}},
		{Peers: []plan.PolicyPeer{{CIDR: netip.MustParsePrefix("2001:db8:200::/48")}}, Ports: []plan.PolicyPort{{Protocol: "UDP", Port: 53}}},
	}}
	aEg := []string{
		"repa 1 R0 ip dst 203.0.113.0/24 NEW: goto chain 2 [a egress 1]",
		"repa 1 DENY ip: drop [a egress 0]",
		"repa 1 S1 ipv6 ip_proto 17 dst 2001:db8:200::/48 dst_port 53 NEW: goto chain 2 [a egress 2]",
		"repa 1 DENY6 ipv6: drop [a egress 0]",
	}
	expectPolicy(t, "a egress-isolated too", p, reps, entryAll, ctBlue, nd, aEg,
		without(bIn, "repa 1 OPEN ip:"), without(ct6, "repa 1 OPEN6"))
}

// An isolated endpoint of an IPv4-only network: its IPv6 (link-local
// only there) is dropped at its representor, as before.
func TestCompilePolicyIPv4OnlyDropsIPv6(t *testing.T) {
	p, reps := base()
	p.Policies["b"] = plan.EndpointPolicy{Endpoint: "b", IngressIsolated: true}
	rs := compileBoth(t, p, Input{Reps: reps, VXLAN: "skvx"})
	drops, v6 := 0, 0
	for _, r := range rs {
		if r.Match.EthType != EthIPv6 {
			continue
		}
		v6++
		if r.Dev == "repb" && r.Chain == ChainEntry && r.Prio == PrioEntryIPv6 && r.Actions[0].Kind == PolicyDrop {
			drops++
		}
	}
	if drops != 1 || v6 != 1 {
		t.Errorf("IPv6 filters on an IPv4-only network: %d, drops at b's representor %d; want exactly that one drop", v6, drops)
	}
}
