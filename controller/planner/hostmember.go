package planner

import "github.com/skiff-sdn/skiff/internal/plan"

// Host members. A node's own stack (kubelet, API server, kube-proxy,
// anything with hostNetwork) must reach the pods of a network whose
// egress routes out (snat, routed) on every node, also from a node with
// no endpoint on it (a control-plane node calling a webhook). Such a
// node is a member of the network without local endpoints: its plan
// holds the network and its remote endpoints (its datapath gives it a
// host port), and the others list it in HostPortVTEPs. It counts once in
// members (hostNets records that it does) and is left out of flood
// lists: nothing is flooded to a node without endpoints.

// hostMemberWanted reports whether node should be a host member of
// network w. Caller holds mu.
func (p *Planner) hostMemberWanted(node, w string) bool {
	n, ok := p.networks[w]
	if !ok || n.Egress == "" || n.Egress == plan.EgressNone {
		return false
	}
	nd, ok := p.nodes[node]
	return ok && nd.UnderlayIP.IsValid() && hasHostPorts(nd)
}

// syncHostMember makes node's host membership of w what it should be
// and reports whether it changed. Caller holds mu.
func (p *Planner) syncHostMember(node, w string) bool {
	want, have := p.hostMemberWanted(node, w), p.hostNets[w][node]
	if want == have {
		return false
	}
	if want {
		if p.hostNets[w] == nil {
			p.hostNets[w] = map[string]bool{}
		}
		p.hostNets[w][node] = true
		if p.members[w] == nil {
			p.members[w] = map[string]int{}
		}
		p.members[w][node]++
	} else {
		delete(p.hostNets[w], node)
		if len(p.hostNets[w]) == 0 {
			delete(p.hostNets, w)
		}
		if m := p.members[w]; m != nil {
			if m[node]--; m[node] <= 0 {
				delete(m, node)
			}
			if len(m) == 0 {
				delete(p.members, w)
			}
		}
	}
	p.forgetNetwork(w)
	return true
}

// localCount is the number of node's endpoints on w (members less its
// host membership). Caller holds mu.
func (p *Planner) localCount(node, w string) int {
	c := p.members[w][node]
	if p.hostNets[w][node] {
		c--
	}
	return c
}

// touchHostMember marks what changes when node joined or left w as a
// host member: its own network item and remote endpoints, and the
// network item (HostPortVTEPs) of every member. Caller holds mu.
func (p *Planner) touchHostMember(node, w string, t touchSet) {
	x := t.node(node)
	x.networks.add(w)
	p.touchNetworkItems(node, w, x)
	for n := range p.members[w] {
		t.node(n).networks.add(w)
	}
}
