package planner

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// The indexes behind incremental planning (endpoints by network and by node,
// per-network member counts) and what each node should hold of an object.

func (p *Planner) putSubnet(s plan.Subnet) {
	m := p.subnets[s.Network]
	if m == nil {
		m = map[string]plan.Subnet{}
		p.subnets[s.Network] = m
	}
	m[s.Name] = s
}

func (p *Planner) putEndpoint(e plan.Endpoint) {
	p.eps[e.Name] = e
	p.pidx.SetEndpoint(policyEndpoint(e))
	if p.byNet[e.Network] == nil {
		p.byNet[e.Network] = map[string]struct{}{}
	}
	p.byNet[e.Network][e.Name] = struct{}{}
	if p.members[e.Network] == nil {
		p.members[e.Network] = map[string]int{}
	}
	dp := p.dpNode(e.Node)
	if p.members[e.Network][dp]++; p.localCount(dp, e.Network) == 1 {
		p.forgetNetwork(e.Network) // a member joined, or a host member got an endpoint
	}
	if p.byNode[dp] == nil {
		p.byNode[dp] = map[string]struct{}{}
	}
	p.byNode[dp][e.Name] = struct{}{}
	if dp != e.Node {
		if p.byHost[e.Node] == nil {
			p.byHost[e.Node] = map[string]struct{}{}
		}
		p.byHost[e.Node][e.Name] = struct{}{}
	}
}

// dropEndpoint removes e from the indexes; the policy index keeps it when
// it is replaced (putEndpoint follows), so that only what changed of it
// is recompiled.
func (p *Planner) dropEndpoint(e plan.Endpoint, replaced bool) {
	delete(p.eps, e.Name)
	if !replaced {
		p.pidx.DeleteEndpoint(e.Name)
	}
	dp := p.dpNode(e.Node)
	delete(p.byNode[dp], e.Name)
	if len(p.byNode[dp]) == 0 {
		delete(p.byNode, dp)
	}
	delete(p.byHost[e.Node], e.Name)
	if len(p.byHost[e.Node]) == 0 {
		delete(p.byHost, e.Node)
	}
	delete(p.byNet[e.Network], e.Name)
	if len(p.byNet[e.Network]) == 0 {
		delete(p.byNet, e.Network)
	}
	if m := p.members[e.Network]; m != nil {
		if m[dp]--; p.localCount(dp, e.Network) == 0 {
			p.forgetNetwork(e.Network) // a member left, or has no endpoint left
		}
		if m[dp] <= 0 {
			delete(m, dp)
		}
		if len(m) == 0 {
			delete(p.members, e.Network)
		}
	}
}

func (p *Planner) registered(node string) (netip.Addr, bool) {
	n, ok := p.nodes[node]
	return n.UnderlayIP, ok && n.UnderlayIP.IsValid()
}

func (p *Planner) member(node, network string) bool { return p.members[network][node] > 0 }

// wantNetwork is network as node should have it. Its subnets, VTEP
// lists and host addresses are the network's, shared by every node's plan
// and delta (memberVTEPs): a node's flood list is the members' VTEPs with
// its own marked as Own, not a copy without it, so that a network of N
// nodes costs one list of N, not N. Only external (BGP) VTEPs make a
// node's flood list a copy of its own.
func (p *Planner) wantNetwork(node, network string) (plan.Network, bool) {
	base, ok := p.networks[network]
	if ok && p.isHost(node) {
		// A host's network: what its pods need (subnets, MTU), no
		// flood list (its DPU's VTEP floods).
		if !p.hostMember(node, network) {
			return plan.Network{}, false
		}
		n := base
		n.Subnets = p.memberVTEPs(network).subnets
		return n, true
	}
	if !ok || !p.member(node, network) {
		return plan.Network{}, false
	}
	n := base
	v := p.memberVTEPs(network)
	n.Subnets = v.subnets
	n.FloodVTEPs, n.HostPortVTEPs, n.HostAddrs = v.all, v.hostPorts, v.hostAddrs // shared, read-only
	if own, ok := p.registered(node); ok {
		n.Own = own
	}
	if len(p.ext.flood[n.VNI]) > 0 {
		n.FloodVTEPs = slices.Clone(n.FloodVTEPs) // this node's own
		p.externalFlood(node, &n)
		slices.SortFunc(n.FloodVTEPs, func(a, b netip.Addr) int { return a.Compare(b) })
	}
	return n, true
}

// vteps are the registered members' VTEPs of a network, sorted: all of
// them, and those of members whose datapath gives the network host ports
// (the software and offload datapaths': modes software, offload and dpu),
// and those members' host addresses; and the network's subnets, sorted by
// name. Every node's plan of the network shares these lists (read-only;
// each is full, so that an append copies it).
type vteps struct {
	all, hostPorts []netip.Addr
	hostAddrs      []plan.HostAddr
	subnets        []plan.Subnet
	// prev are the lists computed before these (nil: none), and
	// diffAll, diffHost what all and hostPorts differ from them by (the
	// VTEPs in one and not the other): sameNetwork's.
	prev              *vteps
	diffAll, diffHost []netip.Addr
}

// hasHostPorts reports whether a node's datapath gives its networks host
// ports (datapath/software, datapath/offload; a DPU runs one of
// them). A dpu-host's networks are its DPU's, and a node that named no
// mode is not routed into.
func hasHostPorts(n plan.Node) bool {
	return n.Mode == plan.ModeSoftware || n.Mode == plan.ModeOffload || n.Mode == plan.ModeDPU
}

// memberVTEPs is the VTEPs of network, computed once per network while
// the objects do not change (every node of a network that spans the
// cluster asks for it after a member joins). Caller holds mu; a change
// of the network's members or of any other object clears it (forget).
// A list equal to the one computed before it is that one, so that the
// plans holding it compare equal at once (plan.Network.Equal) and keep
// sharing one list.
func (p *Planner) memberVTEPs(network string) vteps {
	if v, ok := p.vtepMemo[network]; ok {
		return v
	}
	all, host := map[netip.Addr]bool{}, map[netip.Addr]bool{}
	var addrs []plan.HostAddr
	for other := range p.members[network] {
		if ip, ok := p.registered(other); ok {
			if p.localCount(other, network) > 0 {
				all[ip] = true // flooded to: it has endpoints
			}
			if nd := p.nodes[other]; hasHostPorts(nd) {
				host[ip] = true
				if nd.HostIP.IsValid() {
					addrs = append(addrs, plan.HostAddr{VTEP: ip, IP: nd.HostIP})
				}
			}
		}
	}
	slices.SortFunc(addrs, func(a, b plan.HostAddr) int { return a.VTEP.Compare(b.VTEP) })
	sorted := func(m map[netip.Addr]bool) []netip.Addr {
		return slices.Clip(slices.SortedFunc(maps.Keys(m), func(a, b netip.Addr) int { return a.Compare(b) }))
	}
	var subnets []plan.Subnet
	for _, name := range slices.Sorted(maps.Keys(p.subnets[network])) {
		subnets = append(subnets, p.subnets[network][name])
	}
	v := vteps{all: sorted(all), hostPorts: sorted(host), hostAddrs: slices.Clip(addrs), subnets: slices.Clip(subnets)}
	if prev, ok := p.vtepPrev[network]; ok {
		v.prev = &prev
		v.diffAll, v.diffHost = symDiff(prev.all, v.all), symDiff(prev.hostPorts, v.hostPorts)
		v.all = sameOr(prev.all, v.all, slices.Equal)
		v.hostPorts = sameOr(prev.hostPorts, v.hostPorts, slices.Equal)
		v.hostAddrs = sameOr(prev.hostAddrs, v.hostAddrs, slices.Equal)
		v.subnets = sameOr(prev.subnets, v.subnets, func(a, b []plan.Subnet) bool { return slices.EqualFunc(a, b, plan.Subnet.Equal) })
		delete(p.vtepPrev, network)
	}
	if p.vtepMemo == nil {
		p.vtepMemo = map[string]vteps{}
	}
	p.vtepMemo[network] = v
	return v
}

// sameOr returns prev when it equals cur, else cur.
func sameOr[T any](prev, cur []T, equal func(a, b []T) bool) []T {
	if equal(prev, cur) {
		return prev
	}
	return cur
}

// forget clears what is memoized from the objects: after a change of a
// node (its VTEP, its mode), a network, or a load. A change of a network's
// members forgets that network only (forgetNetwork). The lists forgotten
// are kept until their network's are computed again, to be reused if
// equal. Caller holds mu.
func (p *Planner) forget() {
	for w := range p.vtepMemo {
		p.forgetNetwork(w)
	}
}

// forgetNetwork clears network's memoized lists (memberVTEPs). Caller
// holds mu.
func (p *Planner) forgetNetwork(network string) {
	v, ok := p.vtepMemo[network]
	if !ok {
		return
	}
	delete(p.vtepMemo, network)
	if p.vtepPrev == nil {
		p.vtepPrev = map[string]vteps{}
	}
	v.prev, v.diffAll, v.diffHost = nil, nil, nil // only the last lists are kept
	p.vtepPrev[network] = v
}

// symDiff returns the addresses in one of the sorted lists a and b and
// not in the other.
func symDiff(a, b []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for len(a) > 0 || len(b) > 0 {
		switch {
		case len(b) == 0 || len(a) > 0 && a[0].Less(b[0]):
			out, a = append(out, a[0]), a[1:]
		case len(a) == 0 || b[0].Less(a[0]):
			out, b = append(out, b[0]), b[1:]
		default:
			a, b = a[1:], b[1:]
		}
	}
	return out
}

// sameNetwork reports whether have and want, node's network w as its plan
// holds it and as it should, are equal. When have holds the lists of w
// computed before the current ones and want the current ones (a member
// joined or left), their lists are equal if they differ by the node's
// own VTEP only: a join costs each member one look at the difference, not
// a walk of its flood list. Caller holds mu.
func (p *Planner) sameNetwork(w string, have, want plan.Network) bool {
	v, ok := p.vtepMemo[w]
	prev := ok && v.prev != nil
	switch {
	case have.Own == want.Own && same(have.FloodVTEPs, want.FloodVTEPs) && same(have.HostPortVTEPs, want.HostPortVTEPs):
		// The same lists: Equal sees so at once.
	case prev && have.Own == want.Own &&
		same(have.FloodVTEPs, v.prev.all) && same(want.FloodVTEPs, v.all) &&
		same(have.HostPortVTEPs, v.prev.hostPorts) && same(want.HostPortVTEPs, v.hostPorts):
		onlyOwn := func(d []netip.Addr) bool { return len(d) == 0 || len(d) == 1 && d[0] == want.Own }
		if !onlyOwn(v.diffAll) || !onlyOwn(v.diffHost) {
			return false
		}
		have.FloodVTEPs, have.HostPortVTEPs = want.FloodVTEPs, want.HostPortVTEPs
	default:
		p.walked++ // Equal walks the lists
	}
	if prev && same(have.HostAddrs, v.prev.hostAddrs) && same(want.HostAddrs, v.hostAddrs) && !same(have.HostAddrs, want.HostAddrs) {
		return false // memberVTEPs keeps the list before when equal
	}
	return have.Equal(want)
}

// same reports whether a and b are the same list (not only equal ones).
func same[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

func (p *Planner) wantLocal(node, ep string) (plan.Endpoint, bool) {
	e, ok := p.eps[ep]
	if ok && e.Node == node && p.isHost(node) {
		return p.hostLocal(e), true
	}
	return e, ok && p.dpNode(e.Node) == node
}

func (p *Planner) wantRemote(node, ep string) (plan.Remote, bool) {
	if _, ext := p.ext.vnis[ep]; ext {
		return p.externalRemote(node, ep)
	}
	e, ok := p.eps[ep]
	if !ok || e.Node == node || p.dpNode(e.Node) == node || p.isHost(node) || !p.member(node, e.Network) {
		return plan.Remote{}, false
	}
	return p.sharedRemote(ep)
}

func (p *Planner) memberSet(network string) map[string]bool {
	out := map[string]bool{}
	for n := range p.members[network] {
		out[n] = true
	}
	return out
}
