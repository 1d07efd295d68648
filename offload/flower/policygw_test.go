package flower

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// chainOf renders the filters of one device's chain in the order the
// kernel runs them (rising priority), each with its priority.
func chainOf(rs []PolicyRule, dev string, chain uint32) []string {
	var out []string
	for _, r := range rs {
		if r.Dev == dev && r.Chain == chain {
			s := fmt.Sprintf("%#x %s:", r.Prio, r.Match)
			for i, a := range r.Actions {
				if i > 0 {
					s += ","
				}
				s += " " + a.String()
			}
			if r.Endpoint != "" {
				s += fmt.Sprintf(" [%s %s %d]", r.Endpoint, r.Direction, r.RuleIndex)
			}
			out = append(out, s)
		}
	}
	return out
}

// An egress-isolated endpoint of a network that routes out: what it
// sends to the gateway's MAC skips its egress rules on its representor
// (the node's stack routes it, after kube-proxy's DNAT, and enforces
// them there), ahead of those rules and after the conntrack verdicts,
// per family, straight to forwarding: nothing the node routes is
// committed on a representor (of an isolated endpoint or not), so a
// connection the node refuses leaves no entry whose reverse 5-tuple
// would pass as established; what the node lets through comes back
// with ReplyMark, which the gateway port's first filter sends to
// forwarding. Everything else meets the rules as before. On a network
// that does not route out (none) the gateway is the node itself, whose
// traffic stays with the representor's rules and zone.
func TestCompilePolicyGatewayEgress(t *testing.T) {
	p, reps := dualBase()
	n := p.Networks["blue"]
	n.Egress = plan.EgressSNAT
	p.Networks["blue"] = n
	p.Groups["only-b"] = plan.AddressGroup{Name: "only-b", Members: []netip.Addr{
		netip.MustParseAddr("198.51.100.11"), netip.MustParseAddr("2001:db8:100::b")}}
	p.Policies["a"] = plan.EndpointPolicy{Endpoint: "a", EgressIsolated: true, Egress: []plan.PolicyRule{
		{Peers: []plan.PolicyPeer{{Group: "only-b"}}, Ports: []plan.PolicyPort{{Protocol: "TCP", Port: 8080}}},
	}}
	in := hostPortInput(reps)
	compile := func(name string) []PolicyRule {
		t.Helper()
		fwd, err := Compile(p, in)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		rs, err := CompilePolicy(p, in, fwd)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, r := range rs {
			r.Index = 1
			if err := r.Validate(); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
		return rs
	}
	check := func(name string, got, want []string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s:\ngot\n  %s\nwant\n  %s", name, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	}
	verdicts := []string{
		"0x5310 ip ct_state +trk+est: goto chain 3",
		"0x5311 ip ct_state +trk+rel: goto chain 3",
		"0x5312 ipv6 ct_state +trk+est: goto chain 3",
		"0x5313 ipv6 ct_state +trk+rel: goto chain 3",
		"0x5314 ipv6 ip_proto 58 type 133: goto chain 3",
		"0x5314 ipv6 ip_proto 58 type 134: goto chain 3",
		"0x5314 ipv6 ip_proto 58 type 135: goto chain 3",
		"0x5314 ipv6 ip_proto 58 type 136: goto chain 3",
		"0x5314 ipv6 ip_proto 58 type 137: goto chain 3",
	}
	rules := []string{
		"0x5400 ip ip_proto 6 dst 198.51.100.11/32 dst_port 8080 ct_state +trk+new: goto chain 2 [a egress 0]",
		"0x5c00 ipv6 ip_proto 6 dst 2001:db8:100::b/128 dst_port 8080 ct_state +trk+new: goto chain 2 [a egress 0]",
		"0x6400 ip: drop [a egress -1]",
		"0x6402 ipv6: drop [a egress -1]",
	}
	gateway := []string{
		"0x5315 ip dst_mac 02:73:6b:00:00:64: goto chain 3",
		"0x5316 ipv6 dst_mac 02:73:6b:00:00:64: goto chain 3",
	}
	rs := compile("snat")
	check("snat: a's chain 1", chainOf(rs, "repa", ChainEgress), slices.Concat(verdicts, gateway, rules))
	// b is not isolated: the gateway filters, then its chain 1 is open.
	check("snat: b's chain 1", chainOf(rs, "repb", ChainEgress), slices.Concat(verdicts, gateway, []string{
		"0x6401 ip: goto chain 2",
		"0x6403 ipv6: goto chain 2",
	}))
	// The gateway port: what the node marked goes to forwarding ahead
	// of the zone; the rest is tracked as before.
	gwEntry := []string{
		"0x52ff all mark 0x200000: goto chain 3",
		"0x5310 ip: ct zone 101, goto chain 1",
		"0x5311 ipv6: ct zone 101, goto chain 1",
		"0x5312 all: goto chain 3",
	}
	check("snat: the gateway port's chain 0", chainOf(rs, "skh100", ChainEntry), gwEntry)
	check("snat: the host port's chain 0", chainOf(rs, "sknp100", ChainEntry), gwEntry[1:])
	// Entry and ingress chains are those of any isolated endpoint.
	check("snat: a's chain 0", chainOf(rs, "repa", ChainEntry), []string{
		"0x5310 ip: ct zone 101, goto chain 1",
		"0x5311 ipv6: ct zone 101, goto chain 1",
		"0x5312 all: goto chain 3",
	})
	check("snat: a's chain 2", chainOf(rs, "repa", ChainIngress), []string{
		"0x6401 ip: ct commit zone 101, goto chain 3",
		"0x6403 ipv6: ct commit zone 101, goto chain 3",
	})

	n.Egress = plan.EgressRouted
	p.Networks["blue"] = n
	rs = compile("routed")
	check("routed: a's chain 1", chainOf(rs, "repa", ChainEgress), slices.Concat(verdicts, gateway, rules))
	check("routed: the gateway port's chain 0", chainOf(rs, "skh100", ChainEntry), gwEntry)

	// none: the gateway does not forward; a's frames to it (the node
	// itself) meet a's rules on its representor, as before, and the
	// gateway port has no mark filter.
	n.Egress = plan.EgressNone
	p.Networks["blue"] = n
	delete(in.HostPorts, "blue")
	rs = compile("none")
	check("none: a's chain 1", chainOf(rs, "repa", ChainEgress), slices.Concat(verdicts, rules))
	check("none: the gateway port's chain 0", chainOf(rs, "skh100", ChainEntry), gwEntry[1:])

	// No gateway on this node (no Input.Gateways): nothing to skip to.
	n.Egress = plan.EgressSNAT
	p.Networks["blue"] = n
	in.Gateways = nil
	check("no gateway: a's chain 1", chainOf(compile("no gateway"), "repa", ChainEgress), slices.Concat(verdicts, rules))
}
