package planner

import (
	"maps"
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
	groups   map[string]plan.AddressGroup
}

// compile compiles every policy against every endpoint and splits the
// result by node. ok is false when compilation failed (the caller keeps
// what plans hold: a bad policy must not lift isolation). Caller holds mu.
func (p *Planner) compile() (map[string]nodePolicy, bool) {
	out := map[string]nodePolicy{}
	if len(p.policies) == 0 {
		return out, true
	}
	eps := make([]policy.Endpoint, 0, len(p.eps))
	for _, e := range p.eps {
		pe := policy.Endpoint{Name: e.Name, Node: e.Node, Namespace: e.Namespace, Labels: e.Labels}
		for _, ip := range e.IPs {
			pe.IPs = append(pe.IPs, ip.Addr())
		}
		eps = append(eps, pe)
	}
	res, err := policy.Compile(slices.Collect(maps.Values(p.policies)), eps, p.namespaces)
	if err != nil {
		p.log.Error("planner: policies do not compile; keeping the rules nodes hold", "err", err)
		return nil, false
	}
	for name, er := range res.Endpoints {
		e := p.eps[name]
		np, ok := out[e.Node]
		if !ok {
			np = nodePolicy{policies: map[string]plan.EndpointPolicy{}, groups: map[string]plan.AddressGroup{}}
			out[e.Node] = np
		}
		ep := plan.EndpointPolicy{Endpoint: name, IngressIsolated: er.IngressIsolated, EgressIsolated: er.EgressIsolated,
			Ingress: rules(er.Ingress), Egress: rules(er.Egress)}
		np.policies[name] = ep
		for _, r := range slices.Concat(er.Ingress, er.Egress) {
			for _, peer := range r.Peers {
				if peer.Group != "" {
					g := res.Groups[peer.Group]
					np.groups[g.ID] = plan.AddressGroup{Name: g.ID, Members: slices.Clone(g.Members)}
				}
			}
		}
	}
	return out, true
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

// syncPolicy recompiles and marks, in t, every node whose policies or
// groups differ from what its plan holds. Caller holds mu.
func (p *Planner) syncPolicy(t touchSet) {
	want, ok := p.compile()
	if !ok {
		return
	}
	p.compiled = want
	for node, pl := range p.plans {
		np := want[node]
		if !maps.EqualFunc(pl.Policies, np.policies, plan.EndpointPolicy.Equal) || !maps.EqualFunc(pl.Groups, np.groups, plan.AddressGroup.Equal) {
			t.node(node).policy = true
		}
	}
	for node := range want {
		if _, ok := p.plans[node]; !ok {
			p.planOf(node)
			t.node(node).policy = true
		}
	}
}

// policyDelta adds to d what turns pl's policies and groups into the
// compiled ones. Caller holds mu.
func (p *Planner) policyDelta(node string, pl *plan.Plan, d *plan.Delta) {
	np := p.compiled[node]
	up, rm := diffItems(pl.Policies, np.policies, plan.EndpointPolicy.Equal)
	d.UpsertPolicies, d.RemovePolicies = up, rm
	gup, grm := diffItems(pl.Groups, np.groups, plan.AddressGroup.Equal)
	d.UpsertGroups, d.RemoveGroups = gup, grm
}

func diffItems[V any](have, want map[string]V, eq func(V, V) bool) (up []V, rm []string) {
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if h, ok := have[k]; !ok || !eq(h, want[k]) {
			up = append(up, want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(have)) {
		if _, ok := want[k]; !ok {
			rm = append(rm, k)
		}
	}
	return up, rm
}
