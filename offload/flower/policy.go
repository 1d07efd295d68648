package flower

// The policy pipeline: a plan's compiled NetworkPolicy (plan.Policies
// over plan.Groups) as flower filters with conntrack, in chains ahead of
// the forwarding rules. On every device that holds Skiff rules:
//
//	chain 0 (entry)    IPv4 (and IPv6, on a network with an IPv6 subnet)
//	                   of a network with an isolated local endpoint:
//	                   ct zone Z, goto 1. IPv6 from an isolated endpoint
//	                   of an IPv4-only network: drop. Everything else:
//	                   goto 3.
//	chain 1 (egress)   +trk+est, +trk+rel, ICMPv6 ND: goto 3. On the representor of
//	                   an egress-isolated endpoint: to its gateway's MAC
//	                   on a network that routes out, goto 2 (the node's
//	                   stack enforces its egress, after DNAT); its egress
//	                   rules (+trk+new), goto 2; else drop. Elsewhere:
//	                   goto 2.
//	chain 2 (ingress)  for each ingress-isolated local endpoint the
//	                   packet may be for: its ingress rules (+trk+new,
//	                   destination one of its addresses): ct commit, goto
//	                   3; else, to its addresses: drop. Everything else:
//	                   ct commit, goto 3.
//	chain 3 (forward)  the datapath's rules (Compile).
//
// Replies and later packets of an allowed connection are +est in the same
// zone (one per network) and skip the rules; a NIC that offloads ct
// carries them in hardware, the first packets go through software
// conntrack (+new is never offloaded). Flower has no sets: a group is one
// filter per member, an ipBlock with except one filter per prefix of the
// difference, times one per port.

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// Chains of a device's ingress.
const (
	ChainEntry   uint32 = 0
	ChainEgress  uint32 = 1
	ChainIngress uint32 = 2
	ChainForward uint32 = 3
)

// Priorities of the policy pipeline's filters (outside the forwarding
// rules' PrioARP..PrioLast). A priority holds one ethernet type: the
// families' filters sit at their own.
const (
	// PrioEntryReply: chain 0 of the gateway port of a network that
	// routes out, what carries ReplyMark to forwarding (a fw filter).
	PrioEntryReply uint16 = 0x52ff
	PrioEntryCt    uint16 = 0x5310 // chain 0: IPv4 into conntrack
	PrioEntryCt6   uint16 = 0x5311 // chain 0: IPv6 into conntrack (dual-stack networks)
	// PrioEntryIPv6: chain 0, IPv6 of an isolated endpoint of a network
	// without an IPv6 subnet (its link-local traffic): drop.
	PrioEntryIPv6 uint16 = 0x5311
	PrioEntryAll  uint16 = 0x5312 // chain 0: the rest, to forwarding
	PrioTracked   uint16 = 0x5310 // chain 1: established
	PrioRelated   uint16 = 0x5311 // chain 1: related
	PrioTracked6  uint16 = 0x5312 // chain 1: IPv6 established
	PrioRelated6  uint16 = 0x5313 // chain 1: IPv6 related
	// PrioND: chain 1, ICMPv6 router and neighbour discovery (types
	// 133-137) to forwarding, as the software table lets it through:
	// conntrack does not track it, NetworkPolicy does not govern it.
	PrioND uint16 = 0x5314
	// PrioGateway (IPv4) and PrioGateway6: chain 1, on the
	// representors of a network that routes out (snat or routed), what
	// an endpoint sends to its gateway's MAC goes to forwarding (goto
	// 3), past the egress rules of an egress-isolated one and
	// uncommitted: the node's stack routes it, after kube-proxy's DNAT,
	// and enforces those rules there (datapath/firewall's policy table
	// on the gateway skg<VNI>), as a software node does; what it lets through
	// comes back with ReplyMark.
	PrioGateway  uint16 = 0x5315
	PrioGateway6 uint16 = 0x5316
	PrioRule     uint16 = 0x5400 // IPv4 rule i of an endpoint's direction at PrioRule+i
	PrioRule6    uint16 = 0x5c00 // IPv6 rule i at PrioRule6+i
	PrioDeny     uint16 = 0x6400 // the default deny of an isolated endpoint (IPv4)
	PrioOpen     uint16 = 0x6401 // not isolated: on (IPv4)
	PrioDeny6    uint16 = 0x6402 // the same for IPv6
	PrioOpen6    uint16 = 0x6403
	// MaxPolicyRules is how many rules one direction of an endpoint's
	// policy may have on an offload node.
	MaxPolicyRules = int(PrioRule6 - PrioRule)
)

// ReplyMark is the packet mark (a bit of skb->mark) the node's stack
// sets on what it sends out of a gateway skg<VNI> of a network that
// routes out on a connection it let through (conntrack established or
// related: datapath/firewall Device.ReplyMark). The gateway port's
// fw filter (PrioEntryReply) sends such packets to forwarding: they
// need no zone, since the representor commits nothing the node routes
// (PrioGateway). So a connection the node refuses (a Service DNATed to
// a backend the endpoint's egress rules do not admit) leaves no entry
// in the network's zone whose reverse 5-tuple would pass the
// endpoint's ingress rules as established. A bit no one else sets:
// kube-proxy uses 0x4000 and 0x8000, Calico 0xffff0000.
const ReplyMark uint32 = 0x00200000

// ndTypes are the ICMPv6 types that pass policy: router solicitation and
// advertisement, neighbour solicitation and advertisement, redirect.
var ndTypes = []uint8{133, 134, 135, 136, 137}

// EthAll is also a policy match's EthType: every protocol.

// Directions of PolicyRule.Direction.
const (
	Ingress = "ingress"
	Egress  = "egress"
)

// Zone is the conntrack zone of a network's connections on an offload
// node: 1..65535 from the VNI. Two networks of one node whose VNIs share
// a zone are refused by CompilePolicy.
func Zone(vni uint32) uint16 { return uint16(vni%65535) + 1 }

var protoNumbers = map[string]uint8{"TCP": unix.IPPROTO_TCP, "UDP": unix.IPPROTO_UDP, "SCTP": unix.IPPROTO_SCTP}

// family is an address family's part of the pipeline: its ethernet type,
// priorities and addresses.
type family struct {
	eth                     uint16
	entry, tracked, related uint16
	gateway                 uint16
	rule, deny, open        uint16
	v6                      bool
	addrs                   func([]netip.Prefix) []netip.Addr
}

var (
	fam4 = family{eth: EthIPv4, entry: PrioEntryCt, tracked: PrioTracked, related: PrioRelated, gateway: PrioGateway,
		rule: PrioRule, deny: PrioDeny, open: PrioOpen, addrs: ipv4s}
	fam6 = family{eth: EthIPv6, entry: PrioEntryCt6, tracked: PrioTracked6, related: PrioRelated6, gateway: PrioGateway6,
		rule: PrioRule6, deny: PrioDeny6, open: PrioOpen6, v6: true, addrs: ipv6s}
)

// families are those a network's policy covers: IPv4, and IPv6 when the
// network has an IPv6 subnet.
func families(n plan.Network) []family {
	if dualStack(n) {
		return []family{fam4, fam6}
	}
	return []family{fam4}
}

// CompilePolicy returns the policy pipeline of p (chains 0-2) for the
// devices of in, and a chain-0 filter sending everything else to
// ChainForward on every device that holds one of fwd (the forwarding
// rules Compile made of the same plan). Sorted by device, chain and
// priority; no two filters share a device, chain, priority and match.
// Bad input is an error naming the field.
func CompilePolicy(p plan.Plan, in Input, fwd []Rule) ([]PolicyRule, error) {
	var out []PolicyRule
	add := func(r PolicyRule) { out = append(out, r) }
	gotoChain := func(c uint32) PolicyAction { return PolicyAction{Kind: PolicyGoto, Chain: c} }

	// Local endpoints with representors, by network.
	byNet := map[string][]plan.Endpoint{}
	for _, name := range slices.Sorted(maps.Keys(p.Local)) {
		if rep := in.Reps[name]; rep != "" {
			e := p.Local[name]
			byNet[e.Network] = append(byNet[e.Network], e)
		}
	}
	isolated := func(name string) (in, eg bool) {
		pol, ok := p.Policies[name]
		return ok && pol.IngressIsolated, ok && pol.EgressIsolated
	}
	zones := map[uint16]string{}
	netZone := map[string]uint16{}
	for _, nname := range slices.Sorted(maps.Keys(byNet)) {
		need := false
		for _, e := range byNet[nname] {
			i, eg := isolated(e.Name)
			need = need || i || eg
		}
		if !need {
			continue
		}
		n, ok := p.Networks[nname]
		if !ok {
			return nil, fmt.Errorf("networks: %q (of local endpoints) is not in the plan", nname)
		}
		z := Zone(n.VNI)
		if other, ok := zones[z]; ok {
			return nil, fmt.Errorf("networks[%s].vni: %d shares conntrack zone %d with network %s on this node; give one of them another VNI", nname, n.VNI, z, other)
		}
		zones[z], netZone[nname] = nname, z
	}

	// Each endpoint's rules, expanded once per family.
	type expanded struct {
		in, eg [][]PolicyMatch // by rule index: the matches that allow
	}
	exp := map[string][2]expanded{}
	for _, nname := range slices.Sorted(maps.Keys(netZone)) {
		for _, e := range byNet[nname] {
			pol, ok := p.Policies[e.Name]
			if !ok {
				continue
			}
			var x [2]expanded
			for _, f := range families(p.Networks[nname]) {
				var err error
				i := 0
				if f.v6 {
					i = 1
				}
				if x[i].in, err = expandRules(pol.Ingress, p.Groups, true, f.v6); err != nil {
					return nil, fmt.Errorf("policies[%s].ingress%w", e.Name, err)
				}
				if x[i].eg, err = expandRules(pol.Egress, p.Groups, false, f.v6); err != nil {
					return nil, fmt.Errorf("policies[%s].egress%w", e.Name, err)
				}
			}
			exp[e.Name] = x
		}
	}
	rulesOf := func(name string, f family) expanded {
		if f.v6 {
			return exp[name][1]
		}
		return exp[name][0]
	}

	// Chain 2 of a device of network nname: the ingress rules of its
	// isolated local endpoints, then on. On the representor of from,
	// whatever enters comes from from: rules for other sources can never
	// match there and are left out (a forged source meets the deny).
	ingress := func(dev, nname string, vni uint32, from *plan.Endpoint) {
		z := netZone[nname]
		commit := []PolicyAction{{Kind: PolicyCt, Zone: z, Commit: true}, gotoChain(ChainForward)}
		for _, f := range families(p.Networks[nname]) {
			skip := ""
			var srcs []netip.Addr
			if from != nil {
				skip, srcs = from.Name, f.addrs(from.IPs)
			}
			reaches := func(m PolicyMatch) bool {
				if from == nil || !m.Src.IsValid() {
					return true
				}
				return slices.ContainsFunc(srcs, m.Src.Contains)
			}
			for _, e := range byNet[nname] {
				if i, _ := isolated(e.Name); !i || e.Name == skip {
					continue
				}
				for _, a := range f.addrs(e.IPs) {
					dst := netip.PrefixFrom(a, a.BitLen())
					for ri, ms := range rulesOf(e.Name, f).in {
						for _, m := range ms {
							if !reaches(m) {
								continue
							}
							m.Dst, m.EncKeyID = dst, vni
							add(PolicyRule{Dev: dev, Chain: ChainIngress, Prio: f.rule + uint16(ri), Match: m, Actions: commit,
								Endpoint: e.Name, Direction: Ingress, RuleIndex: ri})
						}
					}
					m := PolicyMatch{EthType: f.eth, Dst: dst, EncKeyID: vni}
					add(PolicyRule{Dev: dev, Chain: ChainIngress, Prio: f.deny, Match: m, Actions: []PolicyAction{{Kind: PolicyDrop}},
						Endpoint: e.Name, Direction: Ingress, RuleIndex: -1})
				}
			}
			add(PolicyRule{Dev: dev, Chain: ChainIngress, Prio: f.open, Match: PolicyMatch{EthType: f.eth, EncKeyID: vni}, Actions: commit})
		}
	}
	// Chain 1's conntrack verdicts (and, for IPv6, neighbour discovery).
	tracked := func(dev string, fams []family) {
		for _, f := range fams {
			for _, s := range []struct {
				prio  uint16
				state uint16
			}{{f.tracked, CtEstablished}, {f.related, CtRelated}} {
				m := PolicyMatch{EthType: f.eth, CtState: CtTracked | s.state, CtStateMask: CtTracked | s.state}
				add(PolicyRule{Dev: dev, Chain: ChainEgress, Prio: s.prio, Match: m, Actions: []PolicyAction{gotoChain(ChainForward)}})
			}
			if f.v6 {
				for _, t := range ndTypes {
					m := PolicyMatch{EthType: EthIPv6, IPProto: unix.IPPROTO_ICMPV6, ICMPType: t}
					add(PolicyRule{Dev: dev, Chain: ChainEgress, Prio: PrioND, Match: m, Actions: []PolicyAction{gotoChain(ChainForward)}})
				}
			}
		}
	}
	entry := func(dev string, zone uint16, vni uint32, fams []family) {
		for _, f := range fams {
			add(PolicyRule{Dev: dev, Chain: ChainEntry, Prio: f.entry, Match: PolicyMatch{EthType: f.eth, EncKeyID: vni},
				Actions: []PolicyAction{{Kind: PolicyCt, Zone: zone}, gotoChain(ChainEgress)}})
		}
	}

	var vxlanFams []family // of every network with a zone
	for _, nname := range slices.Sorted(maps.Keys(netZone)) {
		z := netZone[nname]
		n := p.Networks[nname]
		fams := families(n)
		if len(fams) > len(vxlanFams) {
			vxlanFams = fams
		}
		for _, e := range byNet[nname] {
			rep := in.Reps[e.Name]
			ii, ei := isolated(e.Name)
			entry(rep, z, 0, fams)
			if (ii || ei) && !dualStack(n) {
				add(PolicyRule{Dev: rep, Chain: ChainEntry, Prio: PrioEntryIPv6, Match: PolicyMatch{EthType: EthIPv6},
					Actions: []PolicyAction{{Kind: PolicyDrop}}, Endpoint: e.Name, RuleIndex: -1})
			}
			tracked(rep, fams)
			mac := NodeEgressMAC(n, in.Gateways[nname])
			for _, f := range fams {
				if mac != "" {
					// What the node routes: its stack decides, so
					// nothing is committed here (ReplyMark).
					add(PolicyRule{Dev: rep, Chain: ChainEgress, Prio: f.gateway, Match: PolicyMatch{EthType: f.eth, DstMAC: mac},
						Actions: []PolicyAction{gotoChain(ChainForward)}})
				}
				if !ei {
					add(PolicyRule{Dev: rep, Chain: ChainEgress, Prio: f.open, Match: PolicyMatch{EthType: f.eth}, Actions: []PolicyAction{gotoChain(ChainIngress)}})
					continue
				}
				for ri, ms := range rulesOf(e.Name, f).eg {
					for _, m := range ms {
						add(PolicyRule{Dev: rep, Chain: ChainEgress, Prio: f.rule + uint16(ri), Match: m,
							Actions: []PolicyAction{gotoChain(ChainIngress)}, Endpoint: e.Name, Direction: Egress, RuleIndex: ri})
					}
				}
				add(PolicyRule{Dev: rep, Chain: ChainEgress, Prio: f.deny, Match: PolicyMatch{EthType: f.eth}, Actions: []PolicyAction{{Kind: PolicyDrop}},
					Endpoint: e.Name, Direction: Egress, RuleIndex: -1})
			}
			ingress(rep, nname, 0, &e)
		}
		// Into the network from the tunnel, the node's gateway and its
		// host port: the sender's node checked its egress. The host
		// port also carries a pod's Service connection DNATed to a
		// remote backend with the pod's own address: tracked and
		// committed here, the backend's reply from the tunnel is
		// established, not new to the client's ingress rules.
		for _, d := range []struct {
			dev string
			vni uint32
		}{{in.VXLAN, n.VNI}, {in.Gateways[nname].Port, 0}, {in.HostPorts[nname].Port, 0}} {
			if d.dev == "" {
				continue
			}
			if d.dev == in.Gateways[nname].Port && NodeEgressMAC(n, in.Gateways[nname]) != "" {
				// What the node's stack sends on connections it let
				// through (ReplyMark) needs no zone here.
				add(PolicyRule{Dev: d.dev, Chain: ChainEntry, Prio: PrioEntryReply, Match: PolicyMatch{EthType: EthAll, Mark: ReplyMark},
					Actions: []PolicyAction{gotoChain(ChainForward)}})
			}
			entry(d.dev, z, d.vni, fams)
			for _, f := range fams {
				add(PolicyRule{Dev: d.dev, Chain: ChainEgress, Prio: f.open, Match: PolicyMatch{EthType: f.eth, EncKeyID: d.vni},
					Actions: []PolicyAction{gotoChain(ChainIngress)}})
			}
			ingress(d.dev, nname, d.vni, nil)
		}
	}
	if len(netZone) > 0 && in.VXLAN != "" {
		tracked(in.VXLAN, vxlanFams) // once for every network
	}
	for _, nname := range slices.Sorted(maps.Keys(netZone)) {
		for _, d := range []string{in.Gateways[nname].Port, in.HostPorts[nname].Port} {
			if d != "" {
				tracked(d, families(p.Networks[nname]))
			}
		}
	}
	// Everything else on every device with forwarding rules. fwd holds
	// each device's rules together (tens of thousands on a node with
	// many remote endpoints, and a member change compiles this again):
	// a device is looked up only where it changes along fwd.
	seen := map[string]bool{}
	last := ""
	for i := range fwd {
		dev := fwd[i].Dev
		if dev == last && i > 0 {
			continue
		}
		last = dev
		if !seen[dev] {
			seen[dev] = true
			add(PolicyRule{Dev: dev, Chain: ChainEntry, Prio: PrioEntryAll, Match: PolicyMatch{EthType: EthAll},
				Actions: []PolicyAction{gotoChain(ChainForward)}})
		}
	}
	return sortPolicy(out)
}

// NodeEgressMAC is the gateway MAC (lower case) of network n whose
// frames from an egress-isolated endpoint skip the egress rules on its
// representor, or "" when none do: n routes out (snat or routed) through
// its gateway gw here. The node's stack forwards such a frame (a
// Service's ClusterIP DNATed to a backend, the outside world, another
// subnet of n) and must enforce the endpoint's egress rules there, after
// the DNAT. A network that does not route out (none) has no forwarding
// gateway: what its endpoints send to the gateway MAC is for the node
// itself, and the representor's rules keep governing it.
func NodeEgressMAC(n plan.Network, gw Gateway) string {
	if n.Egress != plan.EgressSNAT && n.Egress != plan.EgressRouted || gw.Port == "" {
		return ""
	}
	mac, err := net.ParseMAC(gw.MAC)
	if err != nil || len(mac) != 6 {
		return ""
	}
	return mac.String()
}

// sortPolicy sorts rules by device, chain, priority and match, drops
// exact repeats (the same prefix from two peers of one rule) and refuses
// two rules with one place and different actions.
func sortPolicy(rs []PolicyRule) ([]PolicyRule, error) {
	type keyed struct {
		key string
		r   PolicyRule
	}
	ks := make([]keyed, len(rs))
	for i, r := range rs {
		// Dev, chain (10 digits), priority (5 digits), match: built
		// without fmt, which was most of a member change's compile.
		b := make([]byte, 0, len(r.Dev)+20+64)
		b = append(append(b, r.Dev...), 0)
		b = appendPadded(b, uint64(r.Chain), 10)
		b = appendPadded(append(b, 0), uint64(r.Prio), 5)
		b = append(append(b, 0), r.Match.String()...)
		ks[i] = keyed{string(b), r}
	}
	slices.SortStableFunc(ks, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	out := rs[:0]
	for i, k := range ks {
		if i > 0 && k.key == ks[i-1].key {
			if k.r.String() != ks[i-1].r.String() {
				return nil, fmt.Errorf("two policy rules on %s at %s: %q and %q", k.r.Dev, k.r.Match, ks[i-1].r, k.r)
			}
			continue
		}
		out = append(out, k.r)
	}
	return out, nil
}

// appendPadded appends v in decimal, zero-padded to width digits (fmt's
// %0*d for what fits).
func appendPadded(b []byte, v uint64, width int) []byte {
	var d [20]byte
	n := strconv.AppendUint(d[:0], v, 10)
	for range width - len(n) {
		b = append(b, '0')
	}
	return append(b, n...)
}

// expandRules turns a direction's rules into flower matches of one family
// (IPv4, or IPv6 when v6; +trk+new), by rule index: the peers' prefixes
// of that family (Src for ingress, Dst for egress) times the ports. A
// rule whose peers select no address of the family has no match: it
// allows nothing of that family here.
func expandRules(rules []plan.PolicyRule, groups map[string]plan.AddressGroup, ingress, v6 bool) ([][]PolicyMatch, error) {
	if len(rules) > MaxPolicyRules {
		return nil, fmt.Errorf(": %d rules, more than the %d an offload node takes", len(rules), MaxPolicyRules)
	}
	out := make([][]PolicyMatch, len(rules))
	for ri, r := range rules {
		var prefixes []netip.Prefix // nil with any: every peer
		any := len(r.Peers) == 0
		for pi, peer := range r.Peers {
			switch {
			case peer.Group != "":
				g, ok := groups[peer.Group]
				if !ok {
					return nil, fmt.Errorf("[%d].peers[%d].group: %q is not in the plan", ri, pi, peer.Group)
				}
				for _, a := range g.Members {
					if a.Is6() == v6 {
						prefixes = append(prefixes, netip.PrefixFrom(a, a.BitLen()))
					}
				}
			case peer.CIDR.IsValid():
				if peer.CIDR.Addr().Is6() != v6 {
					continue // the other family's
				}
				ps, err := subtract(peer.CIDR, peer.Except)
				if err != nil {
					return nil, fmt.Errorf("[%d].peers[%d].except: %w", ri, pi, err)
				}
				prefixes = append(prefixes, ps...)
			default:
				return nil, fmt.Errorf("[%d].peers[%d]: neither a group nor a CIDR", ri, pi)
			}
		}
		type port struct {
			proto    uint8
			min, max uint16
		}
		var ports []port
		for pi, pp := range r.Ports {
			proto, ok := protoNumbers[pp.Protocol]
			if !ok {
				return nil, fmt.Errorf("[%d].ports[%d].protocol: %q is not TCP, UDP or SCTP", ri, pi, pp.Protocol)
			}
			max := pp.EndPort
			if max == 0 {
				max = pp.Port
			}
			if pp.Port != 0 && max < pp.Port {
				return nil, fmt.Errorf("[%d].ports[%d].endPort: %d is below port %d", ri, pi, pp.EndPort, pp.Port)
			}
			if pp.Port == 0 {
				max = 0
			}
			ports = append(ports, port{proto, pp.Port, max})
		}
		if len(ports) == 0 {
			ports = []port{{}}
		}
		if any {
			prefixes = []netip.Prefix{{}}
		}
		for _, pre := range prefixes {
			for _, pt := range ports {
				m := PolicyMatch{EthType: EthIPv4, IPProto: pt.proto, DstPortMin: pt.min, DstPortMax: pt.max,
					CtState: CtTracked | CtNew, CtStateMask: CtTracked | CtNew}
				if v6 {
					m.EthType = EthIPv6
				}
				if ingress {
					m.Src = pre
				} else {
					m.Dst = pre
				}
				out[ri] = append(out[ri], m)
			}
		}
	}
	return out, nil
}

// subtract returns the prefixes that cover p except the given prefixes,
// fewest first-found: each except inside p splits the prefix holding it
// along its path. An except outside p is an error.
func subtract(p netip.Prefix, except []netip.Prefix) ([]netip.Prefix, error) {
	p = p.Masked()
	set := []netip.Prefix{p}
	for _, x := range except {
		x = x.Masked()
		if x.Addr().Is4() != p.Addr().Is4() || !p.Contains(x.Addr()) || x.Bits() < p.Bits() {
			return nil, fmt.Errorf("%s is not inside %s", x, p)
		}
		var next []netip.Prefix
		for _, s := range set {
			switch {
			case x.Bits() <= s.Bits() && x.Contains(s.Addr()):
				// s lies wholly in the except: gone.
			case s.Bits() < x.Bits() && s.Contains(x.Addr()):
				// Split s down to x, keeping the halves that miss it.
				cur := s
				for cur.Bits() < x.Bits() {
					lo, hi := halves(cur)
					if lo.Contains(x.Addr()) {
						next, cur = append(next, hi), lo
					} else {
						next, cur = append(next, lo), hi
					}
				}
			default:
				next = append(next, s)
			}
		}
		set = next
	}
	slices.SortFunc(set, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return set, nil
}

// halves splits a prefix in its two halves.
func halves(p netip.Prefix) (netip.Prefix, netip.Prefix) {
	b := p.Bits() + 1
	lo := netip.PrefixFrom(p.Addr(), b)
	a := p.Addr().AsSlice()
	a[(b-1)/8] |= 0x80 >> ((b - 1) % 8)
	hi, _ := netip.AddrFromSlice(a)
	return lo, netip.PrefixFrom(hi, b)
}
