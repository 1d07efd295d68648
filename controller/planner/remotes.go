package planner

import (
	"maps"
	"strings"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// Remote endpoints are shared between plans. A remote endpoint looks the
// same in every plan that holds it, so the planner keeps one record per
// endpoint (remotes) instead of a copy in every node's plan: on a network
// that spans every node, N nodes x E endpoints copies would be N times the
// store. A node's plan holds, of Skiff's own endpoints, exactly the records
// of the networks in its plan that are on other nodes:
//
//	remote(node) = { r in shared[w] : w in plan.Networks, r.Node != node,
//	                 dp(r) != node }, and none for a dpu-host's plan
//
// where dp(r) is the node whose datapath served r's endpoint when its
// record was made (its DPU for a dpu-host's endpoint: local there), and a
// dpu-host's plan is one that holds a DPU status.
// The stored plan's Remote map holds only the external (BGP) remote
// endpoints, which differ per node. The records change only at the end of
// an Update, after every node that holds one has been reconciled against
// the records as they were (what its plan held), so a change shows in a
// node's plan only through that node's delta. view materializes a plan.

// remotes is one record per endpoint, by network, as other nodes' plans
// hold it. Not safe for concurrent use: the planner's mu guards it.
type remotes struct {
	byNet map[string]map[string]plan.Remote // network -> endpoint -> record
	net   map[string]string                 // endpoint -> its network in byNet
	dp    map[string]string                 // endpoint -> its datapath node, with the record
}

func newRemotes() remotes {
	return remotes{byNet: map[string]map[string]plan.Remote{}, net: map[string]string{}, dp: map[string]string{}}
}

// holds reports whether node's plan pl holds record r of endpoint name:
// never a dpu-host's plan, nor the endpoint's own node's or the node
// whose datapath serves it (local there).
func (s remotes) holds(node string, pl *plan.Plan, name string, r plan.Remote) bool {
	return pl.DPU.Node == "" && r.Node != node && s.dp[name] != node
}

func (s remotes) get(name string) (plan.Remote, bool) {
	w, ok := s.net[name]
	if !ok {
		return plan.Remote{}, false
	}
	r, ok := s.byNet[w][name]
	return r, ok
}

// put sets name's record and datapath node (ok) or removes them (!ok).
func (s remotes) put(name string, r plan.Remote, dp string, ok bool) {
	if w, had := s.net[name]; had && (!ok || w != r.Network) {
		delete(s.byNet[w], name)
		if len(s.byNet[w]) == 0 {
			delete(s.byNet, w)
		}
		delete(s.net, name)
	}
	if !ok {
		delete(s.dp, name)
		return
	}
	s.dp[name] = dp
	m := s.byNet[r.Network]
	if m == nil {
		m = map[string]plan.Remote{}
		s.byNet[r.Network] = m
	}
	m[name] = r
	s.net[name] = r.Network
}

func external(name string) bool { return strings.HasPrefix(name, externalPrefix) }

// sharedRemote is endpoint ep's record as every node that should hold it
// holds it (wantRemote without the viewer's conditions): its VTEP is its
// datapath node's (a dpu-host's endpoints are behind its DPU). Caller
// holds mu.
func (p *Planner) sharedRemote(ep string) (plan.Remote, bool) {
	e, ok := p.eps[ep]
	if !ok {
		return plan.Remote{}, false
	}
	if _, ok := p.networks[e.Network]; !ok {
		return plan.Remote{}, false
	}
	vtep, ok := p.registered(p.dpNode(e.Node))
	if !ok {
		return plan.Remote{}, false
	}
	return plan.Remote{Name: e.Name, Network: e.Network, Node: e.Node, VTEP: vtep, MAC: e.MAC, IPs: e.IPs}, true
}

// syncShared brings the records of eps to the current objects. Caller holds
// mu; called after every node touched by the same change was reconciled.
func (p *Planner) syncShared(eps map[string]bool) {
	for ep := range eps {
		if external(ep) {
			continue
		}
		r, ok := p.sharedRemote(ep)
		p.shared.put(ep, r, p.dpNode(r.Node), ok)
	}
}

// hasRemote is remote endpoint ep as node's plan pl holds it. Caller
// holds mu.
func (p *Planner) hasRemote(node string, pl *plan.Plan, ep string) (plan.Remote, bool) {
	if external(ep) {
		r, ok := pl.Remote[ep]
		return r, ok
	}
	r, ok := p.shared.get(ep)
	if !ok || !p.shared.holds(node, pl, ep, r) {
		return plan.Remote{}, false
	}
	_, ok = pl.Networks[r.Network]
	return r, ok
}

// view returns node's whole plan, remote endpoints included, as a plan
// the caller owns (its maps are its own; items are shared values whose
// slices are read-only). Caller holds mu.
func (p *Planner) view(node string, pl *plan.Plan) plan.Plan {
	v := pl.Clone()
	n := len(v.Remote)
	for w := range pl.Networks {
		n += len(p.shared.byNet[w])
	}
	v.Remote = make(map[string]plan.Remote, n)
	maps.Copy(v.Remote, pl.Remote)
	for w := range pl.Networks {
		for name, r := range p.shared.byNet[w] {
			if p.shared.holds(node, pl, name, r) {
				v.Remote[name] = r
			}
		}
	}
	return v
}

// stored is d as the stored plan takes it: of the remote endpoints, only
// the external ones (the others are the shared records).
func stored(d plan.Delta) plan.Delta {
	keep := func(names []string) []string {
		var out []string
		for _, n := range names {
			if external(n) {
				out = append(out, n)
			}
		}
		return out
	}
	s := d
	s.UpsertRemote = nil
	for _, r := range d.UpsertRemote {
		if external(r.Name) {
			s.UpsertRemote = append(s.UpsertRemote, r)
		}
	}
	s.RemoveRemote = keep(d.RemoveRemote)
	return s
}
