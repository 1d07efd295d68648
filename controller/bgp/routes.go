package bgp

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Route types.
const (
	TypeMACIP     = 2 // MAC/IP advertisement
	TypeMulticast = 3 // inclusive multicast Ethernet tag
	TypePrefix    = 5 // IP prefix
)

// Route is one EVPN route, advertised or learned.
type Route struct {
	Type    int
	VNI     uint32
	RD      string
	RTs     []string
	MAC     string       // type 2
	IP      netip.Addr   // type 2 (may be zero: MAC only); type 3: originating router
	Prefix  netip.Prefix // type 5
	NextHop netip.Addr
	// Peer is the neighbour the route was learned from; zero for routes
	// this speaker originates.
	Peer netip.Addr
	// Best is set on learned routes that are the best path.
	Best bool
}

// key identifies the route's NLRI (what a later advertisement replaces).
func (r Route) key() string {
	switch r.Type {
	case TypeMACIP:
		return "2|" + r.RD + "|" + strconv.FormatUint(uint64(r.VNI), 10) + "|" + r.MAC + "|" + r.IP.String()
	case TypeMulticast:
		return "3|" + r.RD + "|" + r.IP.String()
	default:
		return "5|" + r.RD + "|" + r.Prefix.String()
	}
}

// same reports whether two routes are equal in everything advertised.
func (r Route) same(o Route) bool {
	return r.Type == o.Type && r.VNI == o.VNI && r.RD == o.RD && r.MAC == o.MAC && r.IP == o.IP &&
		r.Prefix == o.Prefix && r.NextHop == o.NextHop && slices.Equal(r.RTs, o.RTs)
}

// String is a one-line form for logs and tests.
func (r Route) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "type%d vni=%d rd=%s", r.Type, r.VNI, r.RD)
	switch r.Type {
	case TypeMACIP:
		fmt.Fprintf(&b, " mac=%s", r.MAC)
		if r.IP.IsValid() {
			fmt.Fprintf(&b, " ip=%s", r.IP)
		}
	case TypeMulticast:
		fmt.Fprintf(&b, " orig=%s", r.IP)
	case TypePrefix:
		fmt.Fprintf(&b, " prefix=%s", r.Prefix)
	}
	fmt.Fprintf(&b, " nh=%s rt=%s", r.NextHop, strings.Join(r.RTs, ","))
	return b.String()
}

// State is what the speaker advertises from: the store's networks,
// endpoints and nodes, reduced to what BGP needs.
type State struct {
	Networks  []Network
	Endpoints []Endpoint
	Nodes     []Node
}

// Network is a Skiff network. The model has only L2 networks so far;
// Routed is there for type-5 routes once routed networks exist.
type Network struct {
	Name    string
	VNI     uint32
	Routed  bool
	Subnets []netip.Prefix
}

// Endpoint is one interface on a network.
type Endpoint struct {
	Name    string
	Network string
	Node    string
	MAC     string
	IPs     []netip.Addr
}

// Node is a worker: its VTEP and whether its agent holds a live session
// (lease). Routes of a node that is not connected are withdrawn.
type Node struct {
	Name      string
	VTEP      netip.Addr
	Connected bool
}

// Desired returns the routes the state calls for, sorted: per (node, VNI)
// with local endpoints a type-3 route; per endpoint address a type-2 route
// (MAC only when it has none); per subnet of a routed network a type-5
// route (one per prefix, next hop the lowest VTEP with an endpoint on it:
// one RD cannot carry several next hops for one prefix). Endpoints on unknown
// networks or on nodes without a VTEP or a live lease are left out.
func (c *Config) Desired(s State) []Route {
	out := c.desired(s)
	sortRoutes(out)
	return out
}

// desired is Desired unsorted.
func (c *Config) desired(s State) []Route {
	nets := map[string]Network{}
	for _, n := range s.Networks {
		nets[n.Name] = n
	}
	nodes := map[string]Node{}
	for _, n := range s.Nodes {
		nodes[n.Name] = n
	}
	var out []Route
	type nodeVNI struct {
		vtep netip.Addr
		vni  uint32
	}
	flood := map[nodeVNI]bool{}
	// Route targets and distinguishers, per VNI and VTEP.
	rts := map[uint32][]string{}
	rds := map[nodeVNI]string{}
	tags := func(vni uint32, vtep netip.Addr) ([]string, string) {
		rt, ok := rts[vni]
		if !ok {
			_, s := c.routeTarget(vni)
			rt = []string{s}
			rts[vni] = rt
		}
		k := nodeVNI{vtep, vni}
		rd, ok := rds[k]
		if !ok {
			rd = c.rd(vni, vtep).String()
			rds[k] = rd
		}
		return rt, rd
	}
	type routed struct {
		net  Network
		vtep netip.Addr
	}
	prefixes := map[uint32]routed{}
	for _, e := range s.Endpoints {
		n, ok := nets[e.Network]
		if !ok {
			continue
		}
		nd, ok := nodes[e.Node]
		if !ok || !nd.Connected || !nd.VTEP.IsValid() {
			continue
		}
		rt, rd := tags(n.VNI, nd.VTEP)
		base := Route{Type: TypeMACIP, VNI: n.VNI, RD: rd, RTs: rt, MAC: e.MAC, NextHop: nd.VTEP}
		if len(e.IPs) == 0 {
			out = append(out, base)
		}
		for _, ip := range e.IPs {
			r := base
			r.IP = ip
			out = append(out, r)
		}
		k := nodeVNI{nd.VTEP, n.VNI}
		if !flood[k] {
			flood[k] = true
			out = append(out, Route{Type: TypeMulticast, VNI: n.VNI, RD: rd, RTs: rt, IP: nd.VTEP, NextHop: nd.VTEP})
			if p, ok := prefixes[n.VNI]; n.Routed && (!ok || nd.VTEP.Less(p.vtep)) {
				prefixes[n.VNI] = routed{n, nd.VTEP}
			}
		}
	}
	for vni, r := range prefixes {
		rt, rd := tags(vni, r.vtep)
		for _, p := range r.net.Subnets {
			out = append(out, Route{Type: TypePrefix, VNI: vni, RD: rd, RTs: rt, Prefix: p, NextHop: r.vtep})
		}
	}
	return out
}

func sortRoutes(rs []Route) {
	slices.SortFunc(rs, func(a, b Route) int {
		if c := cmp.Or(cmp.Compare(a.VNI, b.VNI), cmp.Compare(a.Type, b.Type), cmp.Compare(a.MAC, b.MAC)); c != 0 {
			return c
		}
		if c := cmp.Or(a.IP.Compare(b.IP), a.NextHop.Compare(b.NextHop), a.Prefix.Addr().Compare(b.Prefix.Addr())); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.Prefix.Bits(), b.Prefix.Bits()), a.Peer.Compare(b.Peer), cmp.Compare(a.RD, b.RD))
	})
}
