package planner

import (
	"time"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// DPU placement. A node in mode dpu-host names its DPU node; the DPU's
// agent owns the datapath of both. An endpoint of the host is placed in
// the DPU's plan as a local endpoint (with its PF and VF index: the DPU
// attaches the VF's representor), its VTEP is the DPU's, and its policy
// is compiled into the DPU's plan. The host's own plan holds only its
// endpoints (with what the DPU reports of each), their networks without
// flood lists, and its DPU's status; no remote endpoints, no rules.

// NodeStatus is whether a node's agent holds a plan stream, and since
// when it connected, or went away (zero: not seen since the load).
type NodeStatus struct {
	Node      string
	Connected bool
	Since     time.Time
}

// EndpointReady is what a DPU's agent reports of one of its host's
// endpoints.
type EndpointReady struct {
	Endpoint      string
	Ready         bool
	Reason, Error string
}

// hostDPU is the DPU of a node in mode dpu-host ("" for any other node).
func hostDPU(n plan.Node) string {
	if n.Mode != plan.ModeDPUHost {
		return ""
	}
	return n.DPU
}

// dpNode is the node whose datapath serves the endpoints of node: its
// DPU for a dpu-host node, else itself. Caller holds mu.
func (p *Planner) dpNode(node string) string {
	if d := hostDPU(p.nodes[node]); d != "" {
		return d
	}
	return node
}

// isHost reports whether node is a dpu-host whose datapath is its DPU's.
// Caller holds mu.
func (p *Planner) isHost(node string) bool { return hostDPU(p.nodes[node]) != "" }

// dpuStatus is the DPU status a host's plan holds (zero for other
// nodes). Caller holds mu.
func (p *Planner) dpuStatus(node string) plan.DPUStatus {
	d := hostDPU(p.nodes[node])
	if d == "" {
		return plan.DPUStatus{}
	}
	_, reg := p.nodes[d]
	st := p.status[d]
	return plan.DPUStatus{Node: d, Registered: reg, Connected: st.Connected, Since: st.Since}
}

// hostLocal is endpoint e as its host's plan holds it: with its DPU's
// report. Caller holds mu.
func (p *Planner) hostLocal(e plan.Endpoint) plan.Endpoint {
	r := p.ready[e.Name]
	e.DPUReady, e.DPUReason, e.DPUError = r.Ready, r.Reason, r.Error
	return e
}

// hostMember reports whether host has an endpoint on network. Caller
// holds mu.
func (p *Planner) hostMember(host, network string) bool {
	for name := range p.byHost[host] {
		if p.eps[name].Network == network {
			return true
		}
	}
	return false
}

// applyStatus records a node's agent coming or going and marks the
// hosts whose DPU it is. Caller holds mu.
func (p *Planner) applyStatus(s NodeStatus, t touchSet) {
	p.status[s.Node] = s
	p.touchHostsOf(s.Node, t)
}

// touchHostsOf marks the header of the hosts whose DPU is node. Caller
// holds mu.
func (p *Planner) touchHostsOf(node string, t touchSet) {
	for name := range p.hostsOf[node] {
		p.planOf(name)
		t.node(name).header = true
	}
}

// setNode records node n (deleted: the zero Node of that name), keeping
// the index of hosts by DPU. Caller holds mu.
func (p *Planner) setNode(name string, n plan.Node, deleted bool) {
	if d := hostDPU(p.nodes[name]); d != "" {
		delete(p.hostsOf[d], name)
		if len(p.hostsOf[d]) == 0 {
			delete(p.hostsOf, d)
		}
	}
	if deleted {
		delete(p.nodes, name)
		return
	}
	p.nodes[name] = n
	if d := hostDPU(n); d != "" {
		if p.hostsOf[d] == nil {
			p.hostsOf[d] = map[string]struct{}{}
		}
		p.hostsOf[d][name] = struct{}{}
	}
}

// applyReady records a DPU's report on an endpoint (Delete: it has
// none) and marks the endpoint in its host's plan. Caller holds mu.
func (p *Planner) applyReady(r EndpointReady, del bool, t touchSet) {
	if del {
		delete(p.ready, r.Endpoint)
	} else {
		p.ready[r.Endpoint] = r
	}
	if e, ok := p.eps[r.Endpoint]; ok && p.isHost(e.Node) {
		t.node(e.Node).eps.add(r.Endpoint)
	}
}

// endpointsOf lists the endpoints whose node is node. Caller holds mu.
func (p *Planner) endpointsOf(node string) []plan.Endpoint {
	var out []plan.Endpoint
	for _, set := range []map[string]struct{}{p.byNode[node], p.byHost[node]} {
		for name := range set {
			if e := p.eps[name]; e.Node == node {
				out = append(out, e)
			}
		}
	}
	return out
}

// netNodes are the nodes whose plans hold network w: its members and
// the dpu-hosts with an endpoint on it. Caller holds mu.
func (p *Planner) netNodes(w string) map[string]bool {
	out := p.memberSet(w)
	for ep := range p.byNet[w] {
		if n := p.eps[ep].Node; p.isHost(n) {
			out[n] = true
		}
	}
	return out
}
