package planner

import (
	"maps"
	"slices"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// Incremental updates: which keys of which nodes a change may affect, the
// deltas that bring them to what they should be, and the per-node delta log.

// touched collects, per node, the keys a change may have affected.
type touched struct {
	header   bool
	policy   bool
	networks names
	eps      names // local and remote keys
	// remote are keys the node holds, or should hold, as remote
	// endpoints only, never as local ones (members of a network that do
	// not own a changed endpoint of it: most of a wide network's
	// nodes); reconcile skips the node's local endpoints for them.
	remote names
}

// keys returns the sorted keys of eps and remote, each once (a key in
// both counts as eps), and whether the key at each index is in eps: local
// (nil when all or none are: all).
func (x *touched) keys() (keys []string, local []bool, all bool) {
	eps, remote := x.eps.sorted(), x.remote.sorted()
	switch {
	case len(remote) == 0:
		return eps, nil, true
	case len(eps) == 0:
		return remote, nil, false
	}
	keys, local = make([]string, 0, len(eps)+len(remote)), make([]bool, 0, len(eps)+len(remote))
	for len(eps) > 0 || len(remote) > 0 {
		switch {
		case len(remote) == 0 || len(eps) > 0 && eps[0] <= remote[0]:
			if len(remote) > 0 && eps[0] == remote[0] {
				remote = remote[1:]
			}
			keys, local = append(keys, eps[0]), append(local, true)
			eps = eps[1:]
		default:
			keys, local = append(keys, remote[0]), append(local, false)
			remote = remote[1:]
		}
	}
	return keys, local, false
}

// names is a set of names, most often of one or two: added to, then sorted
// and deduplicated when read (cheaper than a map per node and change).
type names []string

func (n *names) add(name string) { *n = append(*n, name) }

// sorted returns the names, sorted, each once.
func (n *names) sorted() []string {
	slices.Sort(*n)
	*n = slices.Compact(*n)
	return *n
}

type touchSet map[string]*touched

func (t touchSet) node(n string) *touched {
	x := t[n]
	if x == nil {
		x = &touched{}
		t[n] = x
	}
	return x
}

// Update applies the changes made at store revision rev (greater than the
// current one) and returns one delta for every node whose plan changed.
// Subscribers of those nodes are notified. An Update with no changes only
// advances the revision.
func (p *Planner) Update(rev int64, changes []Change) []plan.Delta {
	var out []plan.Delta
	p.update(rev, changes, func(d plan.Delta) { out = append(out, d) })
	return out
}

// Advance is Update for a caller that needs no deltas (the subscribers get
// theirs): it returns the number of nodes whose plan changed.
func (p *Planner) Advance(rev int64, changes []Change) int {
	n := 0
	p.update(rev, changes, func(plan.Delta) { n++ })
	return n
}

// update is Update; changed is called with each node's delta.
func (p *Planner) update(rev int64, changes []Change, changed func(plan.Delta)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rev <= p.rev {
		p.log.Warn("planner: stale update ignored", "revision", rev, "current", p.rev)
		return
	}
	t := p.touch
	clear(t) // keeps the room of the updates before
	clear(p.one.up)
	clear(p.one.rm)
	policyRelevant, endpointsOnly := false, true
	for _, c := range changes {
		p.apply(c, t)
		policyRelevant = policyRelevant || c.Policy != nil || c.Namespace != nil || c.Endpoint != nil || c.Node != nil
		endpointsOnly = endpointsOnly && c.Endpoint != nil
	}
	p.applyExternal(t)
	if policyRelevant {
		p.syncPolicy(t)
	}
	if !endpointsOnly {
		// The objects changed; an endpoint changes a network's members
		// only, and its index forgets that network (putEndpoint,
		// dropEndpoint).
		p.forget()
	}
	eps := map[string]bool{}
	for _, node := range slices.Sorted(maps.Keys(t)) {
		if d, ok := p.reconcile(node, t[node], rev); ok {
			changed(d)
		}
		for _, ep := range t[node].eps {
			eps[ep] = true
		}
		for _, ep := range t[node].remote {
			eps[ep] = true
		}
	}
	// Every node holding a record that changed was reconciled against the
	// record as it was; now the records follow the objects.
	p.syncShared(eps)
	for w := range p.vtepPrev {
		if _, ok := p.networks[w]; !ok {
			delete(p.vtepPrev, w) // a network deleted: nothing reuses its lists
		}
	}
	p.setRev(rev)
}

func (p *Planner) apply(c Change, t touchSet) {
	switch {
	case c.Status != nil:
		p.applyStatus(*c.Status, t)
	case c.DPUReady != nil:
		p.applyReady(*c.DPUReady, c.Delete, t)
	case c.Policy != nil:
		if c.Delete {
			p.pidx.DeletePolicy(c.Policy.Key())
		} else {
			p.setPolicy(*c.Policy)
		}
	case c.Namespace != nil:
		if c.Delete {
			p.pidx.SetNamespace(c.Namespace.Name, nil)
		} else {
			p.pidx.SetNamespace(c.Namespace.Name, c.Namespace.Labels)
		}
	case c.Endpoint != nil:
		name := c.Endpoint.Name
		old, hadOld := p.eps[name]
		nets := map[string]bool{c.Endpoint.Network: true}
		owners := map[string]bool{}
		if !c.Delete {
			owners[c.Endpoint.Node] = true
		}
		if hadOld {
			nets[old.Network] = true
			owners[old.Node] = true
		} else if c.Delete {
			return
		}
		// A dpu-host's endpoint makes its DPU a member of its network.
		for o := range maps.Clone(owners) {
			owners[p.dpNode(o)] = true
		}
		// Membership of the owners before: only theirs can change.
		// (And whether they had endpoints there: a host member's first
		// endpoint puts it on the network's flood lists.)
		was := map[string]map[string]bool{}
		hadLocal := map[string]map[string]bool{}
		for w := range nets {
			was[w], hadLocal[w] = map[string]bool{}, map[string]bool{}
			for o := range owners {
				was[w][o] = p.member(o, w)
				hadLocal[w][o] = p.localCount(o, w) > 0
			}
		}
		if hadOld {
			p.dropEndpoint(old, !c.Delete)
		}
		if !c.Delete {
			p.putEndpoint(*c.Endpoint)
		}
		for o := range owners {
			for _, n := range []string{o, p.dpNode(o)} {
				p.planOf(n)
				x := t.node(n)
				x.eps.add(name)
				for w := range nets {
					x.networks.add(w)
				}
			}
		}
		for w := range nets {
			joined := map[string]bool{} // owners whose membership changed
			flood := false              // the network's flood lists changed
			for o := range owners {
				if was[w][o] != p.member(o, w) {
					joined[o] = true
				}
				if hadLocal[w][o] != (p.localCount(o, w) > 0) {
					flood = true
				}
			}
			// Every member before or after holds the endpoint or not; the
			// network items (flood lists) change only with the members.
			touch := func(n string) {
				x := t.node(n)
				if owners[n] {
					x.eps.add(name)
				} else {
					x.remote.add(name) // not its endpoint: never local here
				}
				if len(joined) > 0 || flood {
					x.networks.add(w)
				}
				if joined[n] {
					p.touchNetworkItems(n, w, x)
				}
			}
			for n := range p.members[w] {
				touch(n)
			}
			for o := range owners {
				if was[w][o] && !p.member(o, w) {
					touch(o)
				}
			}
		}
	case c.Network != nil:
		w := c.Network.Name
		if c.Delete {
			delete(p.networks, w)
		} else {
			n := *c.Network
			n.Subnets, n.FloodVTEPs = nil, nil
			p.networks[w] = n
		}
		for node := range p.nodes {
			if p.syncHostMember(node, w) {
				p.touchHostMember(node, w, t)
			}
		}
		for n := range p.netNodes(w) {
			x := t.node(n)
			x.networks.add(w)
			for ep := range p.byNet[w] {
				x.eps.add(ep)
			}
			for ep := range p.shared.byNet[w] {
				x.eps.add(ep)
			}
		}
	case c.Subnet != nil:
		w := c.Subnet.Network
		if c.Delete {
			delete(p.subnets[w], c.Subnet.Name)
		} else {
			p.putSubnet(*c.Subnet)
		}
		for n := range p.netNodes(w) {
			t.node(n).networks.add(w)
		}
	case c.Node != nil:
		name := c.Node.Name
		after := plan.Node{Name: name}
		if !c.Delete {
			after = *c.Node
		}
		var moved []plan.Endpoint
		wasHost := p.isHost(name)
		if hostDPU(p.nodes[name]) != hostDPU(after) {
			// Its DPU pairing changed: its endpoints move to the
			// new datapath node.
			moved = p.endpointsOf(name)
			for _, e := range moved {
				p.apply(Change{Delete: true, Endpoint: &e}, t)
			}
		}
		p.setNode(name, after, c.Delete)
		for _, e := range moved {
			p.apply(Change{Endpoint: &e}, t)
		}
		p.planOf(name)
		t.node(name).header = true
		p.touchHostsOf(name, t)
		for w := range p.networks {
			if p.syncHostMember(name, w) {
				p.touchHostMember(name, w, t)
			}
		}
		for w, m := range p.members {
			if m[name] == 0 {
				continue
			}
			for n := range m {
				x := t.node(n)
				x.networks.add(w)
				if n == name {
					if len(moved) > 0 || wasHost != p.isHost(name) {
						// Whether it is a host decides which of
						// the network's endpoints it holds.
						for ep := range p.byNet[w] {
							x.eps.add(ep)
						}
					}
					continue
				}
				for ep := range p.byNet[w] {
					if p.dpNode(p.eps[ep].Node) == name {
						x.eps.add(ep)
					}
				}
			}
		}
	}
}

// touchNetworkItems marks every remote endpoint of network w that node
// should or does hold: node joined or left w. Caller holds mu.
func (p *Planner) touchNetworkItems(node, w string, x *touched) {
	for ep := range p.byNet[w] {
		x.eps.add(ep)
	}
	// Items of the network that were removed from the index.
	for ep := range p.shared.byNet[w] {
		x.eps.add(ep)
	}
	for ep, r := range p.planOf(node).Remote {
		if r.Network == w {
			x.eps.add(ep)
		}
	}
}

// reconcile brings the touched keys of node's plan to what they should be
// and returns the delta, if any. Caller holds mu.
func (p *Planner) reconcile(node string, x *touched, rev int64) (plan.Delta, bool) {
	pl := p.planOf(node)
	d := plan.Delta{Node: node, From: pl.Revision, Revision: rev}
	if x.header {
		want := p.nodes[node].UnderlayIP // zero when not registered
		if want != pl.UnderlayIP {
			d.UnderlayIP = &want
		}
		if st := p.dpuStatus(node); !st.Equal(pl.DPU) {
			d.DPU = &st
		}
	}
	for _, w := range x.networks.sorted() {
		want, ok := p.wantNetwork(node, w)
		have, had := pl.Networks[w]
		switch {
		case ok && (!had || !p.sameNetwork(w, have, want)):
			d.UpsertNetworks = append(d.UpsertNetworks, want)
		case !ok && had:
			d.RemoveNetworks = append(d.RemoveNetworks, w)
		}
	}
	keys, local, all := x.keys()
	for i, ep := range keys {
		if all || local != nil && local[i] {
			wl, okL := p.wantLocal(node, ep)
			hl, hadL := pl.Local[ep]
			switch {
			case okL && (!hadL || !hl.Equal(wl)):
				d.UpsertLocal = append(d.UpsertLocal, wl)
			case !okL && hadL:
				d.RemoveLocal = append(d.RemoveLocal, ep)
			}
		}
		wr, okR := p.wantRemote(node, ep)
		hr, hadR := p.hasRemote(node, pl, ep)
		switch {
		case okR && (!hadR || !hr.Equal(wr)):
			d.UpsertRemote = p.appendRemote(d.UpsertRemote, wr)
		case !okR && hadR:
			d.RemoveRemote = p.appendRemoved(d.RemoveRemote, ep)
		}
	}
	if x.policy {
		p.policyDelta(node, pl, &d)
	}
	if d.Empty() {
		return plan.Delta{}, false
	}
	if err := pl.Apply(stored(d)); err != nil {
		p.log.Error("planner: internal delta did not apply", "node", node, "err", err)
		return plan.Delta{}, false
	}
	p.record(d)
	return d, true
}

// oneItem holds, for one Update, the one-item lists of remote endpoints
// that the deltas of many nodes share: a change to an endpoint of a network
// of 1,000 nodes is then one list, not 1,000 copies. Deltas are read-only
// once made, and a shared list is full (length and capacity 1), so that
// appending to it copies.
type oneItem struct {
	up map[string][]plan.Remote
	rm map[string][]string
}

// appendRemote appends r to up, sharing the list when r is its only item.
// Caller holds mu.
func (p *Planner) appendRemote(up []plan.Remote, r plan.Remote) []plan.Remote {
	if len(up) > 0 || external(r.Name) {
		return append(up, r)
	}
	if one, ok := p.one.up[r.Name]; ok && one[0].Equal(r) {
		return one
	}
	one := []plan.Remote{r}
	p.one.up[r.Name] = one
	return one
}

// appendRemoved is appendRemote for removals. Caller holds mu.
func (p *Planner) appendRemoved(rm []string, name string) []string {
	if len(rm) > 0 || external(name) {
		return append(rm, name)
	}
	if one, ok := p.one.rm[name]; ok {
		return one
	}
	one := []string{name}
	p.one.rm[name] = one
	return one
}

// fromLog merges the logged deltas from have to the current revision of
// node. Caller holds mu.
func (p *Planner) fromLog(node string, have int64) (plan.Delta, bool) {
	l := p.dlog[node].deltas()
	i := slices.IndexFunc(l, func(d plan.Delta) bool { return d.From == have })
	if i < 0 {
		return plan.Delta{}, false
	}
	m, err := plan.MergeAll(l[i:]...)
	if err != nil {
		return plan.Delta{}, false
	}
	return m, true
}
