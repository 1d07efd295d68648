package planner

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/skiff-sdn/skiff/controller/policy"
	"github.com/skiff-sdn/skiff/internal/plan"
)

// NamespaceLabels is a namespace's labels, for namespaceSelector.
type NamespaceLabels struct {
	Name   string
	Labels map[string]string
}

// nodePolicy is what one node's plan holds of the compiled policies.
type nodePolicy struct {
	policies map[string]plan.EndpointPolicy
	groups   map[string]plan.AddressGroup // by plan name: "<group>-<network>"
	gnets    map[groupNet]struct{}        // the index's groups behind them, and their networks
}

// groupNet is one of the index's groups narrowed to one network: one
// AddressGroup of the plans, named "<group>-<network>".
type groupNet struct{ gid, network string }

func (g groupNet) name() string { return g.gid + "-" + g.network }

// policyEndpoint is what the policy index needs of an endpoint.
func policyEndpoint(e plan.Endpoint) policy.Endpoint {
	pe := policy.Endpoint{Name: e.Name, Node: e.Node, Network: e.Network, Namespace: e.Namespace, Labels: e.Labels}
	for _, ip := range e.IPs {
		pe.IPs = append(pe.IPs, ip.Addr())
	}
	return pe
}

// setPolicy puts a policy in the index; a policy that does not compile
// is logged and the version the index holds stays (a bad edit must not
// lift isolation). Caller holds mu.
func (p *Planner) setPolicy(pol policy.Policy) {
	if err := p.pidx.SetPolicy(pol); err != nil {
		p.log.Error("planner: policy does not compile; keeping the rules nodes hold", "policy", pol.Key(), "err", err)
	}
}

// nodePolicyOf builds what a node's plan holds of the compiled policies:
// the rules of its local endpoints and the groups they refer to. Networks
// may reuse addresses, so a group is narrowed to the endpoints of the
// isolated endpoint's own network (the only ones whose packets can reach
// it through its bridge) and named after both: "<group>-<network>".
// Caller holds mu.
func (p *Planner) nodePolicyOf(node string) nodePolicy {
	p.recompiled++
	np := nodePolicy{policies: map[string]plan.EndpointPolicy{}, groups: map[string]plan.AddressGroup{}, gnets: map[groupNet]struct{}{}}
	for name := range p.byNode[node] {
		er, ok := p.pidx.Rules(name)
		if !ok {
			continue
		}
		network := p.eps[name].Network
		ep := plan.EndpointPolicy{Endpoint: name, IngressIsolated: er.IngressIsolated, EgressIsolated: er.EgressIsolated,
			Ingress: p.netRules(er.Ingress, network, np), Egress: p.netRules(er.Egress, network, np)}
		np.policies[name] = ep
	}
	return np
}

// netRules converts rules for an endpoint of network, naming each group
// after the network and adding it, narrowed, to groups. Caller holds mu.
func (p *Planner) netRules(rs []policy.Rule, network string, np nodePolicy) []plan.PolicyRule {
	out := rules(rs)
	for i := range out {
		for j := range out[i].Peers {
			peer := &out[i].Peers[j]
			if peer.Group == "" {
				continue
			}
			gn := groupNet{peer.Group, network}
			id := gn.name()
			if _, ok := np.groups[id]; !ok {
				np.groups[id] = plan.AddressGroup{Name: id, Members: p.groupOn(peer.Group, network)}
				np.gnets[gn] = struct{}{}
			}
			peer.Group = id
		}
	}
	return out
}

// groupOn returns the addresses of a group's members on one network,
// sorted, cached until the group changes. Caller holds mu.
func (p *Planner) groupOn(gid, network string) []netip.Addr {
	if m, ok := p.netGroups[gid][network]; ok {
		return m
	}
	var m []netip.Addr
	for name := range p.pidx.GroupMembers(gid) {
		if e, ok := p.pidx.Endpoint(name); ok && e.Network == network {
			m = append(m, e.IPs...)
		}
	}
	slices.SortFunc(m, netip.Addr.Compare)
	m = slices.Compact(m)
	if p.netGroups[gid] == nil {
		p.netGroups[gid] = map[string][]netip.Addr{}
	}
	p.netGroups[gid][network] = m
	return m
}

// setNodePolicy records a node's compiled policy and which groups it
// holds. Caller holds mu.
func (p *Planner) setNodePolicy(node string, np nodePolicy) {
	if old, ok := p.compiled[node]; ok {
		for gn := range old.gnets {
			nets := p.groupNodes[gn.gid]
			delete(nets[gn.network], node)
			if len(nets[gn.network]) == 0 {
				delete(nets, gn.network)
			}
			if len(nets) == 0 {
				delete(p.groupNodes, gn.gid)
			}
		}
	}
	if len(np.policies) == 0 {
		delete(p.compiled, node)
		return
	}
	p.compiled[node] = np
	for gn := range np.gnets {
		nets := p.groupNodes[gn.gid]
		if nets == nil {
			nets = map[string]map[string]struct{}{}
			p.groupNodes[gn.gid] = nets
		}
		if nets[gn.network] == nil {
			nets[gn.network] = map[string]struct{}{}
		}
		nets[gn.network][node] = struct{}{}
	}
}

func rules(rs []policy.Rule) []plan.PolicyRule {
	var out []plan.PolicyRule
	for _, r := range rs {
		pr := plan.PolicyRule{}
		for _, p := range r.Peers {
			pr.Peers = append(pr.Peers, plan.PolicyPeer{Group: p.Group, CIDR: p.CIDR, Except: slices.Clone(p.Except)})
		}
		for _, p := range r.Ports {
			pr.Ports = append(pr.Ports, plan.PolicyPort{Protocol: p.Protocol, Port: p.Port, EndPort: p.EndPort})
		}
		out = append(out, pr)
	}
	return out
}

// syncPolicy takes what the policy index says changed and recomputes the
// compiled policy of only the nodes concerned: those hosting (or, for a
// moved or deleted endpoint, having hosted) an endpoint whose rules
// changed, in full; and those holding a group whose members changed on
// the network they hold it for, only that group (a group's members are
// spread over networks, and a node holds it narrowed to the networks of
// its isolated endpoints: a member added on one network changes no
// other network's plans). It marks in t the nodes whose plans must
// change. Caller holds mu.
func (p *Planner) syncPolicy(t touchSet) {
	eps, groups := p.pidx.Take()
	nodes := map[string]bool{}
	for _, name := range eps {
		if e, ok := p.eps[name]; ok {
			nodes[p.dpNode(e.Node)] = true
		}
		if n, ok := p.epNode[name]; ok {
			nodes[n] = true
		}
	}
	regroup := map[string][]groupNet{} // node -> its narrowed groups whose members changed
	for _, g := range groups {
		old := p.netGroups[g]
		delete(p.netGroups, g)
		for network, holders := range p.groupNodes[g] {
			if was, ok := old[network]; ok && slices.Equal(was, p.groupOn(g, network)) {
				continue
			}
			for n := range holders {
				regroup[n] = append(regroup[n], groupNet{g, network})
			}
		}
	}
	for node := range nodes {
		np := p.nodePolicyOf(node)
		for name := range p.compiled[node].policies {
			if p.epNode[name] == node {
				delete(p.epNode, name)
			}
		}
		for name := range np.policies {
			p.epNode[name] = node
		}
		p.setNodePolicy(node, np)
		pl := p.planOf(node)
		if !maps.EqualFunc(pl.Policies, np.policies, plan.EndpointPolicy.Equal) || !maps.EqualFunc(pl.Groups, np.groups, plan.AddressGroup.Equal) {
			t.node(node).policy = true
		}
	}
	for node, gns := range regroup {
		np, ok := p.compiled[node]
		if nodes[node] || !ok {
			continue // recompiled in full above
		}
		// Its rules and the groups it holds are the same; only these
		// groups' members change. The groups map is the plan's to
		// compare with (policyDelta), so it is replaced, not edited.
		np.groups = maps.Clone(np.groups)
		for _, gn := range gns {
			np.groups[gn.name()] = plan.AddressGroup{Name: gn.name(), Members: p.groupOn(gn.gid, gn.network)}
		}
		p.compiled[node] = np
		if !maps.EqualFunc(p.planOf(node).Groups, np.groups, plan.AddressGroup.Equal) {
			t.node(node).policy = true
		}
	}
}

// policyDelta adds to d what turns pl's policies and groups into the
// compiled ones: a group pl holds whose members changed goes as a member
// change (one endpoint joining a group of N costs one address on the
// wire, not N), unless the change is no smaller than the group. Caller
// holds mu.
func (p *Planner) policyDelta(node string, pl *plan.Plan, d *plan.Delta) {
	np := p.compiled[node]
	up, rm := plan.DiffByName(pl.Policies, np.policies, plan.EndpointPolicy.Equal)
	d.UpsertPolicies, d.RemovePolicies = up, rm
	gup, grm := plan.DiffByName(pl.Groups, np.groups, plan.AddressGroup.Equal)
	d.RemoveGroups = grm
	d.UpsertGroups, d.ChangeGroups = plan.SplitGroups(pl.Groups, gup)
}
