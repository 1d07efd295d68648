// Package planner computes every node's plan from Skiff's objects, and
// keeps the plans current incrementally: a change touches only the nodes
// for which it is relevant, and within them only the items it can affect.
// It also serves plan streams (see Subscribe) with resume and coalescing.
//
//	p := planner.New(log, planner.Options{})
//	p.Load(rev, state)                    // full build
//	deltas := p.Update(rev2, changes)     // one delta per node whose plan changed
//	sub, _ := p.Subscribe(ctx, "node1", 0)
//	u, _ := sub.Next(ctx)                 // snapshot, then deltas
//
// Relevance (ARCHITECTURE.md, "The plan"): a node's plan holds the networks
// on which it has a local endpoint, its local endpoints, the endpoints of
// other registered nodes on those networks, and per network the VTEPs of
// the other registered nodes that have endpoints there (flood list).
package planner

import (
	"context"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"

	"github.com/skiff-sdn/skiff/controller/policy"
	"github.com/skiff-sdn/skiff/internal/plan"
)

// State is the planner's whole input. Networks carry no subnets or flood
// list: the planner fills them.
type State struct {
	Networks   []plan.Network
	Subnets    []plan.Subnet
	Endpoints  []plan.Endpoint
	Nodes      []plan.Node
	Policies   []policy.Policy
	Namespaces []NamespaceLabels
}

// Change is one object change. Exactly one object is set; on Delete only its
// Name (and, for subnets, Network) is used.
type Change struct {
	Delete    bool
	Network   *plan.Network
	Subnet    *plan.Subnet
	Endpoint  *plan.Endpoint
	Node      *plan.Node
	Policy    *policy.Policy   // on Delete, Namespace and Name are used
	Namespace *NamespaceLabels // on Delete, Name is used
}

// Options configure a planner.
type Options struct {
	// History returns a node's plan at an earlier store revision, to resume
	// a stream the delta log no longer covers. Optional.
	History func(ctx context.Context, node string, rev int64) (plan.Plan, error)
	// LogDeltas and LogItems bound each node's delta log (defaults 64 and
	// 20000).
	LogDeltas, LogItems int
}

// Planner holds the objects, their indexes and every node's plan. It is safe
// for concurrent use.
type Planner struct {
	log  *slog.Logger
	opts Options

	mu       sync.Mutex
	rev      int64
	loadRev  int64
	revWake  chan struct{} // closed when rev advances
	networks map[string]plan.Network
	subnets  map[string]map[string]plan.Subnet // network -> name -> subnet
	eps      map[string]plan.Endpoint
	nodes    map[string]plan.Node
	byNet    map[string]map[string]struct{} // network -> endpoint names
	members  map[string]map[string]int      // network -> node -> local endpoint count
	byNode   map[string]map[string]struct{} // node -> endpoint names
	plans    map[string]*plan.Plan
	dlog     map[string][]plan.Delta
	// Policies by "namespace/name", namespace labels, and the last
	// successful compilation split by node.
	pidx       *policy.Index
	compiled   map[string]nodePolicy              // node -> what its plan holds
	epNode     map[string]string                  // isolated endpoint -> node whose plan holds its rules
	groupNodes map[string]map[string]struct{}     // group -> nodes holding it
	netGroups  map[string]map[string][]netip.Addr // group -> network -> members' addresses (cache)
	subs       map[string]map[*Subscription]struct{}
	ext        externals   // learned over BGP (external.go)
	extStaged  *[]External // applied by the next Update
}

// New returns an empty planner at revision 0.
func New(log *slog.Logger, opts Options) *Planner {
	if opts.LogDeltas == 0 {
		opts.LogDeltas = 64
	}
	if opts.LogItems == 0 {
		opts.LogItems = 20000
	}
	p := &Planner{log: log, opts: opts, revWake: make(chan struct{}), subs: map[string]map[*Subscription]struct{}{}}
	p.reset()
	return p
}

func (p *Planner) reset() {
	p.networks = map[string]plan.Network{}
	p.subnets = map[string]map[string]plan.Subnet{}
	p.eps = map[string]plan.Endpoint{}
	p.nodes = map[string]plan.Node{}
	p.byNet = map[string]map[string]struct{}{}
	p.members = map[string]map[string]int{}
	p.byNode = map[string]map[string]struct{}{}
	p.plans = map[string]*plan.Plan{}
	p.dlog = map[string][]plan.Delta{}
	p.pidx = policy.NewIndex()
	p.compiled = map[string]nodePolicy{}
	p.epNode = map[string]string{}
	p.groupNodes = map[string]map[string]struct{}{}
	p.netGroups = map[string]map[string][]netip.Addr{}
}

// Revision returns the store revision the planner has applied.
func (p *Planner) Revision() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rev
}

// Nodes returns the names of the nodes that have a plan, sorted.
func (p *Planner) Nodes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Sorted(maps.Keys(p.plans))
}

// Plan returns a copy of node's current plan. A node the planner does not
// know gets an empty plan.
func (p *Planner) Plan(node string) plan.Plan {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pl := p.plans[node]; pl != nil {
		return pl.Clone()
	}
	np := plan.New(node)
	np.Revision = p.loadRev
	return np
}

// planOf returns node's plan, creating an empty one (unchanged since the
// load) when it has none. Caller holds mu.
func (p *Planner) planOf(node string) *plan.Plan {
	pl := p.plans[node]
	if pl == nil {
		np := plan.New(node)
		np.Revision = p.loadRev
		pl = &np
		p.plans[node] = pl
	}
	return pl
}

// Build returns the plan of node for state s: the same plan the incremental
// path computes, at revision 0.
func Build(s State, node string) plan.Plan {
	b := New(slog.New(slog.DiscardHandler), Options{})
	b.Load(0, s)
	return b.Plan(node)
}

// Load replaces the whole state by s at revision rev and rebuilds every
// plan. Open subscriptions receive the difference from their last plan.
func (p *Planner) Load(rev int64, s State) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.plans
	p.reset()
	for _, n := range s.Networks {
		n.Subnets, n.FloodVTEPs = nil, nil
		p.networks[n.Name] = n
	}
	for _, sn := range s.Subnets {
		p.putSubnet(sn)
	}
	for _, n := range s.Nodes {
		p.nodes[n.Name] = n
	}
	for _, e := range s.Endpoints {
		p.putEndpoint(e)
	}
	p.pidx.Batch(func() {
		for _, n := range s.Namespaces {
			p.pidx.SetNamespace(n.Name, n.Labels)
		}
		for _, pol := range s.Policies {
			p.setPolicy(pol)
		}
	})
	p.syncPolicy(touchSet{})
	p.loadRev = rev
	for name := range p.nodes {
		p.planOf(name)
	}
	for _, e := range p.eps {
		p.planOf(e.Node)
	}
	for name, pl := range p.plans {
		p.fill(name, pl)
		pl.Revision = rev
	}
	for name, subs := range p.subs {
		if len(subs) == 0 {
			continue
		}
		prev := old[name]
		cur := p.planOf(name)
		if prev == nil {
			e := plan.New(name)
			prev = &e
		}
		d := plan.Diff(*prev, *cur)
		d.From = prev.Revision
		for s := range subs {
			s.push(d)
		}
	}
	p.setRev(rev)
}

// fill computes the whole plan of node from the indexes. Caller holds mu.
func (p *Planner) fill(node string, pl *plan.Plan) {
	if n, ok := p.nodes[node]; ok {
		pl.UnderlayIP = n.UnderlayIP
	}
	for netName, m := range p.members {
		if m[node] == 0 {
			continue
		}
		if n, ok := p.wantNetwork(node, netName); ok {
			pl.Networks[netName] = n
		}
		for ep := range p.byNet[netName] {
			if r, ok := p.wantRemote(node, ep); ok {
				pl.Remote[ep] = r
			}
		}
		p.fillExternal(node, netName, pl)
	}
	for name := range p.byNode[node] {
		pl.Local[name] = p.eps[name]
	}
	np := p.compiled[node]
	maps.Copy(pl.Policies, np.policies)
	maps.Copy(pl.Groups, np.groups)
}

func (p *Planner) setRev(rev int64) {
	p.rev = rev
	close(p.revWake)
	p.revWake = make(chan struct{})
}

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
	p.members[e.Network][e.Node]++
	if p.byNode[e.Node] == nil {
		p.byNode[e.Node] = map[string]struct{}{}
	}
	p.byNode[e.Node][e.Name] = struct{}{}
}

func (p *Planner) dropEndpoint(e plan.Endpoint) {
	delete(p.eps, e.Name)
	p.pidx.DeleteEndpoint(e.Name)
	delete(p.byNode[e.Node], e.Name)
	if len(p.byNode[e.Node]) == 0 {
		delete(p.byNode, e.Node)
	}
	delete(p.byNet[e.Network], e.Name)
	if len(p.byNet[e.Network]) == 0 {
		delete(p.byNet, e.Network)
	}
	if m := p.members[e.Network]; m != nil {
		if m[e.Node]--; m[e.Node] <= 0 {
			delete(m, e.Node)
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
	if !ok || !p.member(node, network) {
		return plan.Network{}, false
	}
	n := base
	n.Subnets = nil
	for _, name := range slices.Sorted(maps.Keys(p.subnets[network])) {
		n.Subnets = append(n.Subnets, p.subnets[network][name])
	}
	own, _ := p.registered(node)
	seen := map[netip.Addr]bool{}
	n.FloodVTEPs = nil
	for other := range p.members[network] {
		if other == node {
			continue
		}
		if ip, ok := p.registered(other); ok && ip != own && !seen[ip] {
			seen[ip] = true
			n.FloodVTEPs = append(n.FloodVTEPs, ip)
		}
	}
	p.externalFlood(node, &n)
	slices.SortFunc(n.FloodVTEPs, func(a, b netip.Addr) int { return a.Compare(b) })
	return n, true
}

func (p *Planner) wantLocal(node, ep string) (plan.Endpoint, bool) {
	e, ok := p.eps[ep]
	return e, ok && e.Node == node
}

func (p *Planner) wantRemote(node, ep string) (plan.Remote, bool) {
	if _, ext := p.ext.vnis[ep]; ext {
		return p.externalRemote(node, ep)
	}
	e, ok := p.eps[ep]
	if !ok || e.Node == node || !p.member(node, e.Network) {
		return plan.Remote{}, false
	}
	if _, ok := p.networks[e.Network]; !ok {
		return plan.Remote{}, false
	}
	vtep, ok := p.registered(e.Node)
	if !ok {
		return plan.Remote{}, false
	}
	return plan.Remote{Name: e.Name, Network: e.Network, Node: e.Node, VTEP: vtep, MAC: e.MAC, IPs: e.IPs}, true
}

// touched collects, per node, the keys a change may have affected.
type touched struct {
	header   bool
	policy   bool
	networks map[string]bool
	eps      map[string]bool // local and remote keys
}

type touchSet map[string]*touched

func (t touchSet) node(n string) *touched {
	x := t[n]
	if x == nil {
		x = &touched{networks: map[string]bool{}, eps: map[string]bool{}}
		t[n] = x
	}
	return x
}

func (p *Planner) memberSet(network string) map[string]bool {
	out := map[string]bool{}
	for n := range p.members[network] {
		out[n] = true
	}
	return out
}

// Update applies the changes made at store revision rev (greater than the
// current one) and returns one delta for every node whose plan changed.
// Subscribers of those nodes are notified. An Update with no changes only
// advances the revision.
func (p *Planner) Update(rev int64, changes []Change) []plan.Delta {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rev <= p.rev {
		p.log.Warn("planner: stale update ignored", "revision", rev, "current", p.rev)
		return nil
	}
	t := touchSet{}
	policyRelevant := false
	for _, c := range changes {
		p.apply(c, t)
		policyRelevant = policyRelevant || c.Policy != nil || c.Namespace != nil || c.Endpoint != nil
	}
	p.applyExternal(t)
	if policyRelevant {
		p.syncPolicy(t)
	}
	var out []plan.Delta
	for _, node := range slices.Sorted(maps.Keys(t)) {
		if d, ok := p.reconcile(node, t[node], rev); ok {
			out = append(out, d)
		}
	}
	p.setRev(rev)
	return out
}

func (p *Planner) apply(c Change, t touchSet) {
	switch {
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
		before := map[string]map[string]bool{}
		for w := range nets {
			before[w] = p.memberSet(w)
		}
		if hadOld {
			p.dropEndpoint(old)
		}
		if !c.Delete {
			p.putEndpoint(*c.Endpoint)
		}
		for o := range owners {
			p.planOf(o)
			x := t.node(o)
			x.eps[name] = true
		}
		for w := range nets {
			after := p.memberSet(w)
			for n := range union(before[w], after) {
				x := t.node(n)
				x.eps[name] = true
				x.networks[w] = true
				if before[w][n] != after[n] {
					for ep := range p.byNet[w] {
						x.eps[ep] = true
					}
					// Items of the network that were removed from the index.
					for ep, r := range p.planOf(n).Remote {
						if r.Network == w {
							x.eps[ep] = true
						}
					}
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
		for n := range p.members[w] {
			x := t.node(n)
			x.networks[w] = true
			for ep := range p.byNet[w] {
				x.eps[ep] = true
			}
		}
	case c.Subnet != nil:
		w := c.Subnet.Network
		if c.Delete {
			delete(p.subnets[w], c.Subnet.Name)
		} else {
			p.putSubnet(*c.Subnet)
		}
		for n := range p.members[w] {
			t.node(n).networks[w] = true
		}
	case c.Node != nil:
		name := c.Node.Name
		if c.Delete {
			delete(p.nodes, name)
		} else {
			p.nodes[name] = *c.Node
		}
		p.planOf(name)
		t.node(name).header = true
		for w, m := range p.members {
			if m[name] == 0 {
				continue
			}
			for n := range m {
				x := t.node(n)
				x.networks[w] = true
				if n == name {
					continue
				}
				for ep := range p.byNet[w] {
					if p.eps[ep].Node == name {
						x.eps[ep] = true
					}
				}
			}
		}
	}
}

func union(a, b map[string]bool) map[string]bool {
	out := maps.Clone(a)
	if out == nil {
		out = map[string]bool{}
	}
	for k := range b {
		out[k] = true
	}
	return out
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
	}
	for _, w := range slices.Sorted(maps.Keys(x.networks)) {
		want, ok := p.wantNetwork(node, w)
		have, had := pl.Networks[w]
		switch {
		case ok && (!had || !have.Equal(want)):
			d.UpsertNetworks = append(d.UpsertNetworks, want)
		case !ok && had:
			d.RemoveNetworks = append(d.RemoveNetworks, w)
		}
	}
	for _, ep := range slices.Sorted(maps.Keys(x.eps)) {
		wl, okL := p.wantLocal(node, ep)
		hl, hadL := pl.Local[ep]
		switch {
		case okL && (!hadL || !hl.Equal(wl)):
			d.UpsertLocal = append(d.UpsertLocal, wl)
		case !okL && hadL:
			d.RemoveLocal = append(d.RemoveLocal, ep)
		}
		wr, okR := p.wantRemote(node, ep)
		hr, hadR := pl.Remote[ep]
		switch {
		case okR && (!hadR || !hr.Equal(wr)):
			d.UpsertRemote = append(d.UpsertRemote, wr)
		case !okR && hadR:
			d.RemoveRemote = append(d.RemoveRemote, ep)
		}
	}
	if x.policy {
		p.policyDelta(node, pl, &d)
	}
	if d.Empty() {
		return plan.Delta{}, false
	}
	if err := pl.Apply(d); err != nil {
		p.log.Error("planner: internal delta did not apply", "node", node, "err", err)
		return plan.Delta{}, false
	}
	p.record(d)
	return d, true
}

// record appends d to its node's bounded log and wakes the node's
// subscribers. Caller holds mu.
func (p *Planner) record(d plan.Delta) {
	l := append(p.dlog[d.Node], d)
	items := 0
	for _, x := range l {
		items += x.Size()
	}
	for len(l) > 0 && (len(l) > p.opts.LogDeltas || items > p.opts.LogItems) {
		items -= l[0].Size()
		l = l[1:]
	}
	p.dlog[d.Node] = l
	for s := range p.subs[d.Node] {
		s.push(d)
	}
}

// fromLog merges the logged deltas from have to the current revision of
// node. Caller holds mu.
func (p *Planner) fromLog(node string, have int64) (plan.Delta, bool) {
	l := p.dlog[node]
	i := slices.IndexFunc(l, func(d plan.Delta) bool { return d.From == have })
	if i < 0 {
		return plan.Delta{}, false
	}
	m := l[i]
	for _, d := range l[i+1:] {
		var err error
		if m, err = plan.Merge(m, d); err != nil {
			return plan.Delta{}, false
		}
	}
	return m, true
}
