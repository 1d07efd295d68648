package planner

import "github.com/skiff-sdn/skiff/internal/plan"

// Resuming after a Load. A planner that has just loaded (a controller that
// restarted) has no delta log: every plan is at the load revision, and an
// agent holding the plan of an earlier revision would need its plan at that
// revision rebuilt from the store (Options.History, the whole store read
// and planned once per agent). Recent tells the planner what changed in the
// store's history before the load, so that a node whose plan depends on
// nothing that changed since the agent's revision resumes with an empty
// delta, and one whose plan changed only after the load resumes from the
// delta log.

// Recent summarizes the store's changes between Floor and a load revision:
// for each object a plan depends on, the revision of its last change. Fill
// it with Add, oldest revision first.
type Recent struct {
	// Floor: every change after Floor is counted (0: the whole history).
	Floor    int64
	networks map[string]int64 // a network, its subnets, endpoints on it
	nodes    map[string]int64 // a node record, endpoints on the node
	endpoint int64            // any endpoint (address groups of policies)
	policy   int64            // any policy or namespace
}

// Add records the changes of store revision rev. A change of an existing
// object must be given as the deletion of its previous version and the
// creation of the new one, so that both count.
func (r *Recent) Add(rev int64, changes []Change) {
	if r.networks == nil {
		r.networks, r.nodes = map[string]int64{}, map[string]int64{}
	}
	for _, c := range changes {
		switch {
		case c.Endpoint != nil:
			r.networks[c.Endpoint.Network] = rev
			r.nodes[c.Endpoint.Node] = rev
			r.endpoint = rev
		case c.Network != nil:
			r.networks[c.Network.Name] = rev
		case c.Subnet != nil:
			r.networks[c.Subnet.Network] = rev
		case c.Node != nil:
			r.nodes[c.Node.Name] = rev
		case c.Policy != nil, c.Namespace != nil:
			r.policy = rev
		}
	}
}

// SetRecent gives the planner the changes made up to its load revision
// loadRev. It is ignored, and reports false, unless the planner is still at
// loadRev (no Update since the Load): the summary is read against the
// plans and memberships of that revision.
func (p *Planner) SetRecent(loadRev int64, r Recent) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rev != loadRev || p.loadRev != loadRev {
		return false
	}
	p.recentFloor = r.Floor
	p.quiet = make(map[string]int64, len(p.plans))
	for node, pl := range p.plans {
		p.quiet[node] = p.lastChange(&r, node, pl)
	}
	return true
}

// lastChange is the last revision in r of a change that node's plan pl
// depends on: the node, its networks (their subnets and endpoints), the
// other nodes on them (remote VTEPs), policies and namespaces, and when the
// plan holds policies, any endpoint. Caller holds mu.
func (p *Planner) lastChange(r *Recent, node string, pl *plan.Plan) int64 {
	if p.isHost(node) {
		// A host's plan also follows its DPU's sessions and reports,
		// which Recent does not count: never quiet.
		return p.loadRev
	}
	last := max(r.Floor, r.nodes[node], r.policy)
	for name := range p.hostsOf[node] {
		last = max(last, r.nodes[name]) // its host's pairing
	}
	if len(pl.Policies) > 0 || len(pl.Groups) > 0 {
		last = max(last, r.endpoint)
	}
	nets := map[string]bool{}
	for name := range p.byNode[node] {
		nets[p.eps[name].Network] = true
	}
	for w := range nets {
		last = max(last, r.networks[w])
		for other := range p.members[w] {
			last = max(last, r.nodes[other])
		}
	}
	return last
}

// resumeFrom returns the revision a consumer holding node's plan of
// revision have may resume from: the load revision when nothing the plan
// depends on changed between have and the load, else have. Caller holds mu.
func (p *Planner) resumeFrom(node string, have int64) int64 {
	if p.quiet == nil || have <= 0 || have >= p.loadRev || have < p.recentFloor {
		return have
	}
	if q, ok := p.quiet[node]; ok && q <= have {
		return p.loadRev
	}
	return have
}
