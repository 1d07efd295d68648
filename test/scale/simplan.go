package scale

import (
	"fmt"
	"hash/fnv"
	"slices"
	"unique"

	"google.golang.org/protobuf/proto"

	"github.com/skiff-sdn/skiff/internal/planpb"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// Item kinds of a plan, in the order of the protobuf messages.
const (
	kindNetwork = iota
	kindLocal
	kindRemote
	kindPolicy
	kindGroup
	kinds
)

var kindNames = [kinds]string{"network", "local endpoint", "remote endpoint", "policy", "group"}

// digestPlan is what a simulated agent holds of its plan: for every item,
// its name and a digest of its protobuf encoding (deterministic), so that
// thousands of agents whose plans each hold every endpoint of a
// cluster-wide network fit in memory. Names are interned: every agent of a
// network shares one copy. Two digest plans are equal exactly when the
// plans are (up to 64-bit hash collisions).
type digestPlan struct {
	node     string
	revision int64
	underlay string
	items    [kinds]map[unique.Handle[string]]uint64
}

func newDigestPlan(node string) *digestPlan {
	p := &digestPlan{node: node}
	for i := range p.items {
		p.items[i] = map[unique.Handle[string]]uint64{}
	}
	return p
}

func digest(m proto.Message) uint64 {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("digest %T: %v", m, err)) // cannot happen for a decoded message
	}
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// fromPlan builds the digest plan of a protobuf plan (a snapshot, or what
// GetPlan returns). The plan is checked as the agent checks it.
func fromPlan(p *skiffv1.Plan) (*digestPlan, error) {
	if _, err := planpb.Plan(p); err != nil {
		return nil, err
	}
	d := newDigestPlan(p.GetNode())
	d.revision, d.underlay = p.GetRevision(), p.GetUnderlayIp()
	d.upsert(p.GetNetworks(), p.GetLocalEndpoints(), p.GetRemoteEndpoints(), p.GetPolicies(), p.GetGroups())
	return d, nil
}

func (p *digestPlan) upsert(nets []*skiffv1.PlanNetwork, local []*skiffv1.Endpoint, remote []*skiffv1.RemoteEndpoint,
	pols []*skiffv1.EndpointPolicy, groups []*skiffv1.AddressGroup) {
	for _, n := range nets {
		p.items[kindNetwork][unique.Make(n.GetName())] = digest(n)
	}
	for _, e := range local {
		p.items[kindLocal][unique.Make(e.GetName())] = digest(e)
	}
	for _, r := range remote {
		p.items[kindRemote][unique.Make(r.GetName())] = digest(r)
	}
	for _, e := range pols {
		p.items[kindPolicy][unique.Make(e.GetEndpoint())] = digest(e)
	}
	for _, g := range groups {
		p.items[kindGroup][unique.Make(g.GetName())] = groupDigest(g)
	}
}

// groupDigest is a group's digest: its name's hash plus the sum of its
// members' hashes, so that a member change updates it by one address
// (changeGroup) instead of hashing the whole group again, as the agent
// changes one member of its plan's group.
func groupDigest(g *skiffv1.AddressGroup) uint64 {
	d := strHash(g.GetName())
	for _, m := range g.GetMembers() {
		d += strHash(m)
	}
	return d
}

func strHash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// changeGroup applies a member change to the digest of a group the plan
// holds: it fails when there is none (the agent's plan.Apply fails too;
// that a removed member is in the group the digest cannot tell).
func (p *digestPlan) changeGroup(c *skiffv1.GroupChange) error {
	k := unique.Make(c.GetName())
	d, ok := p.items[kindGroup][k]
	if !ok {
		return fmt.Errorf("changeGroups %q: no such group in the plan", c.GetName())
	}
	for _, m := range c.GetRemove() {
		d -= strHash(m)
	}
	for _, m := range c.GetAdd() {
		d += strHash(m)
	}
	p.items[kindGroup][k] = d
	return nil
}

// apply applies a delta as plan.Plan.Apply does: it must be for this node
// and start at the revision held; removes before upserts.
func (p *digestPlan) apply(d *skiffv1.PlanDelta) error {
	if _, err := planpb.Delta(d); err != nil {
		return err
	}
	if d.GetNode() != p.node {
		return fmt.Errorf("delta for node %q applied to plan of node %q", d.GetNode(), p.node)
	}
	if d.GetFromRevision() != p.revision {
		return fmt.Errorf("delta from revision %d applied to plan at revision %d", d.GetFromRevision(), p.revision)
	}
	if d.UnderlayIp != nil {
		p.underlay = d.GetUnderlayIp()
	}
	for k, names := range [kinds][]string{d.GetRemoveNetworks(), d.GetRemoveLocal(), d.GetRemoveRemote(), d.GetRemovePolicies(), d.GetRemoveGroups()} {
		for _, n := range names {
			delete(p.items[k], unique.Make(n))
		}
	}
	p.upsert(d.GetUpsertNetworks(), d.GetUpsertLocal(), d.GetUpsertRemote(), d.GetUpsertPolicies(), d.GetUpsertGroups())
	for _, c := range d.GetChangeGroups() {
		if err := p.changeGroup(c); err != nil {
			return err
		}
	}
	p.revision = d.GetRevision()
	return nil
}

// has reports whether the plan holds an item of kind named name.
func (p *digestPlan) has(kind int, name string) bool {
	_, ok := p.items[kind][unique.Make(name)]
	return ok
}

// size is the number of items.
func (p *digestPlan) size() int {
	n := 0
	for _, m := range p.items {
		n += len(m)
	}
	return n
}

// diff describes how p differs from want (empty when equal; revisions are
// not compared).
func (p *digestPlan) diff(want *digestPlan) string {
	if p.node != want.node || p.underlay != want.underlay {
		return fmt.Sprintf("node/underlay %s/%s, want %s/%s", p.node, p.underlay, want.node, want.underlay)
	}
	for k := range p.items {
		var missing, extra, changed []string
		for n, d := range want.items[k] {
			if h, ok := p.items[k][n]; !ok {
				missing = append(missing, n.Value())
			} else if h != d {
				changed = append(changed, n.Value())
			}
		}
		for n := range p.items[k] {
			if _, ok := want.items[k][n]; !ok {
				extra = append(extra, n.Value())
			}
		}
		if len(missing)+len(extra)+len(changed) > 0 {
			return fmt.Sprintf("%ss: %d missing %v, %d extra %v, %d different %v", kindNames[k],
				len(missing), first(missing), len(extra), first(extra), len(changed), first(changed))
		}
	}
	return ""
}

func first(s []string) []string {
	slices.Sort(s)
	if len(s) > 3 {
		return s[:3]
	}
	return s
}
