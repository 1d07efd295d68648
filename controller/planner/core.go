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
	"time"

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
	// Connected: the nodes whose agent holds a plan stream, with the
	// time it connected. Away: nodes whose agent's last stream ended,
	// with the time it did (ignored for a connected node). DPUReady:
	// DPUs' reports on their hosts' endpoints.
	Connected map[string]time.Time
	Away      map[string]time.Time
	DPUReady  []EndpointReady
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
	Status    *NodeStatus      // a node's agent came or went
	DPUReady  *EndpointReady   // on Delete, Endpoint is used
}

// Options configure a planner.
type Options struct {
	// History returns a node's plan at an earlier store revision, to resume
	// a stream the delta log no longer covers. Optional.
	History func(ctx context.Context, node string, rev int64) (plan.Plan, error)
	// LogDeltas and LogItems bound each node's delta log (defaults 64 and
	// 20000).
	LogDeltas, LogItems int
	// Interval is the least time between two deltas of one subscription
	// (0: none): the changes made meanwhile go out as one delta, so that a
	// busy stream sends one message per interval rather than one per
	// change. A stream idle for Interval sends its next change at once.
	Interval time.Duration
	// After is time.After (tests pace subscriptions with their own).
	After func(time.Duration) <-chan time.Time
}

func (o Options) after(d time.Duration) <-chan time.Time {
	if o.After != nil {
		return o.After(d)
	}
	return time.After(d)
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
	members  map[string]map[string]int      // network -> node -> local endpoint count (+1 for a host member)
	hostNets map[string]map[string]bool     // network -> its host members (hostmember.go)
	byNode   map[string]map[string]struct{} // datapath node -> endpoint names (a host's are its DPU's)
	byHost   map[string]map[string]struct{} // dpu-host node -> its endpoint names
	hostsOf  map[string]map[string]struct{} // DPU node -> the hosts naming it
	status   map[string]NodeStatus          // node -> its agent's session
	ready    map[string]EndpointReady       // endpoint -> its DPU's report
	plans    map[string]*plan.Plan          // Remote: external only (remotes.go)
	shared   remotes                        // remote endpoints, one record each
	vtepMemo map[string]vteps               // network -> members' VTEPs (memberVTEPs)
	vtepPrev map[string]vteps               // network -> its lists forgotten, to reuse if equal
	dlog     map[string]*deltaLog
	touch    touchSet // Update's, reused
	one      oneItem  // Update's shared one-item lists
	// Policies by "namespace/name", namespace labels, and the last
	// successful compilation split by node.
	pidx       *policy.Index
	compiled   map[string]nodePolicy                     // node -> what its plan holds
	epNode     map[string]string                         // isolated endpoint -> node whose plan holds its rules
	groupNodes map[string]map[string]map[string]struct{} // group -> network -> nodes holding it narrowed to that network
	netGroups  map[string]map[string][]netip.Addr        // group -> network -> members' addresses (cache)
	recompiled int                                       // nodePolicyOf calls (tests)
	walked     int                                       // sameNetwork's comparisons of whole VTEP lists (tests)
	subs       map[string][]*Subscription                // node -> its open streams (a slice: most often one)
	ext        externals                                 // learned over BGP (external.go)
	extStaged  *[]External                               // applied by the next Update
	// After a Load, from SetRecent (resume.go): node -> last revision of
	// a change its plan depends on, counted from recentFloor.
	quiet       map[string]int64
	recentFloor int64
}

// New returns an empty planner at revision 0.
func New(log *slog.Logger, opts Options) *Planner {
	if opts.LogDeltas == 0 {
		opts.LogDeltas = 64
	}
	if opts.LogItems == 0 {
		opts.LogItems = 20000
	}
	p := &Planner{log: log, opts: opts, revWake: make(chan struct{}), subs: map[string][]*Subscription{}}
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
	p.hostNets = map[string]map[string]bool{}
	p.byNode = map[string]map[string]struct{}{}
	p.byHost = map[string]map[string]struct{}{}
	p.status = map[string]NodeStatus{}
	p.hostsOf = map[string]map[string]struct{}{}
	p.ready = map[string]EndpointReady{}
	p.plans = map[string]*plan.Plan{}
	p.shared = newRemotes()
	p.dlog = map[string]*deltaLog{}
	p.touch = touchSet{}
	p.one = oneItem{up: map[string][]plan.Remote{}, rm: map[string][]string{}}
	p.pidx = policy.NewIndex()
	p.compiled = map[string]nodePolicy{}
	p.epNode = map[string]string{}
	p.groupNodes = map[string]map[string]map[string]struct{}{}
	p.netGroups = map[string]map[string][]netip.Addr{}
	p.quiet, p.recentFloor = nil, 0
	p.vtepMemo, p.vtepPrev = nil, nil
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

// Plan returns a copy of node's current plan, its networks' VTEP lists
// its own (plan.Network.Resolved: no Own). A node the planner does not
// know gets an empty plan.
func (p *Planner) Plan(node string) plan.Plan {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pl := p.plans[node]; pl != nil {
		v := p.view(node, pl)
		for w, n := range v.Networks {
			v.Networks[w] = n.Resolved() // lists of its own, without Own
		}
		return v
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
	// The plans of open streams as they were, to send the difference.
	old := map[string]plan.Plan{}
	for name, subs := range p.subs {
		if pl := p.plans[name]; pl != nil && len(subs) > 0 {
			old[name] = p.view(name, pl)
		}
	}
	p.reset()
	for _, n := range s.Networks {
		n.Subnets, n.FloodVTEPs = nil, nil
		p.networks[n.Name] = n
	}
	for _, sn := range s.Subnets {
		p.putSubnet(sn)
	}
	for _, n := range s.Nodes {
		p.setNode(n.Name, n, false)
	}
	for w, n := range p.networks {
		if n.Egress == "" || n.Egress == plan.EgressNone {
			continue // no host members: skip the nodes
		}
		for node := range p.nodes {
			p.syncHostMember(node, w)
		}
	}
	for n, since := range s.Away {
		p.status[n] = NodeStatus{Node: n, Since: since}
	}
	for n, since := range s.Connected {
		p.status[n] = NodeStatus{Node: n, Connected: true, Since: since}
	}
	for _, r := range s.DPUReady {
		p.ready[r.Endpoint] = r
	}
	for _, e := range s.Endpoints {
		p.putEndpoint(e)
	}
	all := make(map[string]bool, len(p.eps))
	for name := range p.eps {
		all[name] = true
	}
	p.syncShared(all)
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
		p.planOf(p.dpNode(e.Node))
	}
	for name, pl := range p.plans {
		p.fill(name, pl)
		pl.Revision = rev
	}
	for name, subs := range p.subs {
		if len(subs) == 0 {
			continue
		}
		prev, ok := old[name]
		if !ok {
			prev = plan.New(name)
		}
		d := plan.Diff(prev, p.view(name, p.planOf(name)))
		d.From = prev.Revision
		for _, s := range subs {
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
	pl.DPU = p.dpuStatus(node)
	for name := range p.byHost[node] {
		e := p.eps[name]
		pl.Local[name] = p.hostLocal(e)
		if n, ok := p.wantNetwork(node, e.Network); ok {
			pl.Networks[e.Network] = n
		}
	}
	for netName, m := range p.members {
		if m[node] == 0 {
			continue
		}
		if n, ok := p.wantNetwork(node, netName); ok {
			pl.Networks[netName] = n
		}
		// Skiff's own remote endpoints are the shared records (remotes.go).
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
