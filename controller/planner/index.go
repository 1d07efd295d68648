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
		delete(p.vtepMemo, e.Network) // a member joined, or a host member got an endpoint
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
			delete(p.vtepMemo, e.Network) // a member left, or has no endpoint left
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

// wantNetwork is network as node should have it.
func (p *Planner) wantNetwork(node, network string) (plan.Network, bool) {
	base, ok := p.networks[network]
	if ok && p.isHost(node) {
		// A host's network: what its pods need (subnets, MTU), no
		// flood list (its DPU's VTEP floods).
		if !p.hostMember(node, network) {
			return plan.Network{}, false
		}
		n := base
		n.Subnets = nil
		for _, name := range slices.Sorted(maps.Keys(p.subnets[network])) {
			n.Subnets = append(n.Subnets, p.subnets[network][name])
		}
		return n, true
	}
	if !ok || !p.member(node, network) {
		return plan.Network{}, false
	}
	n := base
	n.Subnets = nil
	for _, name := range slices.Sorted(maps.Keys(p.subnets[network])) {
		n.Subnets = append(n.Subnets, p.subnets[network][name])
	}
	own, _ := p.registered(node)
	n.FloodVTEPs, n.HostPortVTEPs = nil, nil
	v := p.memberVTEPs(network)
	for _, ip := range v.all {
		if ip != own {
			n.FloodVTEPs = append(n.FloodVTEPs, ip)
		}
	}
	for _, ip := range v.hostPorts {
		if ip != own {
			n.HostPortVTEPs = append(n.HostPortVTEPs, ip)
		}
	}
	n.HostAddrs = v.hostAddrs // shared, read-only
	if len(p.ext.flood[n.VNI]) > 0 {
		p.externalFlood(node, &n)
		slices.SortFunc(n.FloodVTEPs, func(a, b netip.Addr) int { return a.Compare(b) })
	}
	return n, true
}

// vteps are the registered members' VTEPs of a network, sorted: all of
// them, and those of members whose datapath gives the network host ports
// (the software and offload datapaths': modes software, offload and dpu),
// and those members' host addresses.
type vteps struct {
	all, hostPorts []netip.Addr
	hostAddrs      []plan.HostAddr
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
		return slices.SortedFunc(maps.Keys(m), func(a, b netip.Addr) int { return a.Compare(b) })
	}
	v := vteps{all: sorted(all), hostPorts: sorted(host), hostAddrs: addrs}
	if p.vtepMemo == nil {
		p.vtepMemo = map[string]vteps{}
	}
	p.vtepMemo[network] = v
	return v
}

// forget clears what is memoized from the objects: after a change of a
// node (its VTEP, its mode), a network, or a load. A change of a network's
// members forgets that network only (putEndpoint, dropEndpoint). Caller
// holds mu.
func (p *Planner) forget() { p.vtepMemo = nil }

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
