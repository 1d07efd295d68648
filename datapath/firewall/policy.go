package firewall

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
)

// PolicyTable holds the node's NetworkPolicy enforcement (Policy).
const PolicyTable = "skiff-policy"

// Port is an allowed protocol (unix.IPPROTO_TCP, _UDP, _SCTP) and
// destination port range; From 0 means every port.
type Port struct {
	Proto    uint8
	From, To uint16
}

// Peer is an allowed peer: a named address group, or a CIDR with
// exceptions.
type Peer struct {
	Group  string
	CIDR   netip.Prefix
	Except []netip.Prefix
}

// Rule allows any of Peers (none: every peer) on any of Ports (none:
// every port).
type Rule struct {
	Peers []Peer
	Ports []Port
}

// Endpoint is one isolated endpoint: the device its traffic enters the
// node's stack through and leaves it by, its addresses, and what it may
// receive and send. Device is its network's bridge on a software node;
// on an offload node, whose flower rules enforce the rest, its network's
// gateway skg<VNI>, for the egress the node routes (after DNAT), with no
// ingress.
type Endpoint struct {
	Name            string
	Device          string
	IPs             []netip.Addr
	IngressIsolated bool
	EgressIsolated  bool
	Ingress, Egress []Rule
}

// Policy is the whole policy state of a node: its address groups and its
// isolated endpoints.
type Policy struct {
	Groups    map[string][]netip.Addr
	Endpoints []Endpoint
}

// Rules are a direction's compiled rules as the table takes them.
func Rules(rs []plan.PolicyRule) []Rule {
	protocols := map[string]uint8{"TCP": unix.IPPROTO_TCP, "UDP": unix.IPPROTO_UDP, "SCTP": unix.IPPROTO_SCTP}
	var out []Rule
	for _, r := range rs {
		var x Rule
		for _, p := range r.Peers {
			x.Peers = append(x.Peers, Peer{Group: p.Group, CIDR: p.CIDR, Except: p.Except})
		}
		for _, p := range r.Ports {
			x.Ports = append(x.Ports, Port{Proto: protocols[p.Protocol], From: p.Port, To: p.EndPort})
		}
		out = append(out, x)
	}
	return out
}

// Directions, as chain names and counter tags say them.
const (
	dirIn  = "in"
	dirOut = "out"
)

// setName is a group's set of one family.
func setName(group string, v6 bool) string {
	if v6 {
		return group + "-6"
	}
	return group + "-4"
}

// Table is the table (PolicyTable) that makes the node enforce the
// policy: replies of allowed connections pass (conntrack), and so does what
// concerns no isolated endpoint; an isolated endpoint's traffic, known
// by its device and address, goes through a chain of its own per
// direction ("in-<name>", "out-<name>"): each compiled rule returns
// (allowed) for its peers (a group is a set lookup, whatever its size)
// and ports, IPv6 neighbour discovery passes, the rest is dropped, every
// rule and the drop counted. Bridged traffic reaches the table through
// br_netfilter (EnableBridgeNetfilter). When only group members change,
// only the sets differ, which nl writes as set elements alone. No
// endpoint: no table.
func (pol Policy) Table() nl.NftTable {
	t := nl.NftTable{Name: PolicyTable}
	if len(pol.Endpoints) == 0 {
		return t
	}
	for _, g := range slices.Sorted(maps.Keys(pol.Groups)) {
		for _, v6 := range []bool{false, true} {
			t.Sets = append(t.Sets, nl.NftSet{Name: setName(g, v6), IPv6: v6, Elems: pol.Groups[g]})
		}
	}
	fwd := nl.NftChain{Name: "forward", Hook: nl.HookForward, Type: nl.ChainFilter, Priority: nl.PriorityFilter,
		Rules: []nl.NftRule{{Tag: "established", Match: []nl.NftMatch{nl.CtState{Established: true, Related: true}}, Action: nl.Accept{}}}}
	var chains []nl.NftChain
	eps := slices.SortedFunc(slices.Values(pol.Endpoints), func(a, b Endpoint) int { return cmp.Compare(a.Name, b.Name) })
	for _, e := range eps {
		for _, d := range []struct {
			on    bool
			name  string
			rules []Rule
			// out: the endpoint's device is where the packet leaves
			// (ingress) rather than where it came in (egress).
			out bool
		}{{e.IngressIsolated, dirIn, e.Ingress, true}, {e.EgressIsolated, dirOut, e.Egress, false}} {
			if !d.on {
				continue
			}
			name := d.name + "-" + e.Name
			// The endpoint's own address is the destination of what it
			// receives, the source of what it sends; the peer's the
			// other.
			own, peer := d.out, !d.out
			for _, ip := range e.IPs {
				fwd.Rules = append(fwd.Rules, nl.NftRule{Match: []nl.NftMatch{
					nl.IfName{Out: d.out, Name: e.Device}, nl.Family{IPv6: ip.Is6()}, nl.Addr{Dst: own, Prefix: netip.PrefixFrom(ip, ip.BitLen())},
				}, Action: nl.Jump{Chain: name}})
			}
			ch := nl.NftChain{Name: name}
			for i, r := range d.rules {
				tag := counterTag(e.Name, d.name, strconv.Itoa(i))
				for _, v6 := range []bool{false, true} {
					for _, pm := range peerMatches(r.Peers, peer, v6) {
						ports := r.Ports
						if len(ports) == 0 {
							ports = []Port{{}}
						}
						for _, pt := range ports {
							m := append(append([]nl.NftMatch{nl.Family{IPv6: v6}}, pm...), portMatch(pt)...)
							ch.Rules = append(ch.Rules, nl.NftRule{Tag: tag, Match: m, Counter: true, Action: nl.Return{}})
						}
					}
				}
			}
			// ARP never reaches an inet table; ND must pass for IPv6 to work.
			ch.Rules = append(ch.Rules,
				nl.NftRule{Tag: "nd", Match: []nl.NftMatch{nl.Family{IPv6: true}, nl.ICMPv6Type{From: 133, To: 137}}, Action: nl.Return{}},
				nl.NftRule{Tag: counterTag(e.Name, d.name, "drop"), Counter: true, Action: nl.Drop{}})
			chains = append(chains, ch)
		}
	}
	t.Chains = append([]nl.NftChain{fwd}, chains...)
	return t
}

// peerMatches are the matches of a rule's peers of one family (dst: the
// peer is the destination): one list per peer; none when no peer of the
// family can match; a list with no match for every peer.
func peerMatches(peers []Peer, dst, v6 bool) [][]nl.NftMatch {
	if len(peers) == 0 {
		return [][]nl.NftMatch{nil}
	}
	var out [][]nl.NftMatch
	for _, p := range peers {
		switch {
		case p.Group != "":
			out = append(out, []nl.NftMatch{nl.AddrIn{Dst: dst, IPv6: v6, Set: setName(p.Group, v6)}})
		case p.CIDR.IsValid():
			if p.CIDR.Addr().Is6() != v6 {
				continue
			}
			m := []nl.NftMatch{nl.Addr{Dst: dst, Prefix: p.CIDR.Masked()}}
			for _, x := range p.Except {
				if x.Addr().Is6() == v6 {
					m = append(m, nl.Addr{Dst: dst, Prefix: x.Masked(), Not: true})
				}
			}
			out = append(out, m)
		default:
			out = append(out, nil)
		}
	}
	return out
}

func portMatch(p Port) []nl.NftMatch {
	if p.Proto == 0 {
		return nil
	}
	m := []nl.NftMatch{nl.L4Proto{Proto: p.Proto}}
	if p.From != 0 {
		m = append(m, nl.DPort{From: p.From, To: max(p.To, p.From)})
	}
	return m
}

// counterTag names the counter of an endpoint's direction's rule (its
// index, or "drop").
func counterTag(endpoint, dir, rule string) string {
	return endpoint + "\x00" + dir + "\x00" + rule
}

// PolicyCounters sums a policy table's counters (nl TableCounters) per
// endpoint, direction and compiled rule (one rule is several nftables
// rules: one per peer, port and family; -1 is the final drop), sorted
// by endpoint, direction and rule. Only the first packet of a
// connection is counted: replies and later packets pass as established
// before any endpoint chain.
func PolicyCounters(cs []nl.NftCounter) []datapath.PolicyCounter {
	type key struct {
		ep, dir string
		rule    int
	}
	sum := map[key]*datapath.PolicyCounter{}
	for _, c := range cs {
		parts := strings.Split(c.Tag, "\x00")
		if len(parts) != 3 {
			continue
		}
		k := key{ep: parts[0], rule: -1}
		switch parts[1] {
		case dirIn:
			k.dir = datapath.Ingress
		case dirOut:
			k.dir = datapath.Egress
		default:
			continue
		}
		if parts[2] != "drop" {
			i, err := strconv.Atoi(parts[2])
			if err != nil {
				continue
			}
			k.rule = i
		}
		v := sum[k]
		if v == nil {
			v = &datapath.PolicyCounter{Endpoint: k.ep, Direction: k.dir, Rule: k.rule}
			sum[k] = v
		}
		v.Packets += c.Packets
		v.Bytes += c.Bytes
	}
	out := make([]datapath.PolicyCounter, 0, len(sum))
	for _, v := range sum {
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b datapath.PolicyCounter) int {
		return cmp.Or(cmp.Compare(a.Endpoint, b.Endpoint), cmp.Compare(a.Direction, b.Direction), cmp.Compare(a.Rule, b.Rule))
	})
	return out
}

// CountWrites adds what a policy table write did to counts, by the kinds
// the datapaths report (datapath.Counters.PolicyWrites): "table" for a
// table rewritten (or removed), "element" per set element changed.
func CountWrites(counts map[string]int, c nl.NftChange) {
	if c.Rewritten {
		counts["table"]++
	}
	counts["element"] += c.Elements
}
