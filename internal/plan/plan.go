package plan

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Endpoint kinds.
const (
	KindVeth = "veth"
	KindVF   = "vf"
	KindTap  = "tap"
	KindVFIO = "vfio"
)

// DefaultMTU is the MTU of a network that does not set one: a 1500-byte
// underlay minus the 50 bytes of VXLAN over IPv4.
const DefaultMTU = 1450

// Subnet is an IP prefix of a network.
type Subnet struct {
	Name    string
	Network string
	CIDR    netip.Prefix
	Gateway netip.Addr
	// DNS servers the agent hands to VM ports by DHCP.
	DNS []netip.Addr
}

// A network's egress (Network.Egress).
const (
	EgressNone   = "none"   // nothing leaves the overlay (the default)
	EgressSNAT   = "snat"   // leaves masqueraded to the node's address
	EgressRouted = "routed" // leaves with the endpoint's own address
)

// ValidEgress reports whether e is an egress a network may have.
func ValidEgress(e string) bool { return e == EgressNone || e == EgressSNAT || e == EgressRouted }

// Endpoint is one interface of a pod or VM.
type Endpoint struct {
	Name      string
	Network   string
	Node      string
	Kind      string
	MAC       string // canonical lower-case colon form
	IPs       []netip.Prefix
	Labels    map[string]string
	Owner     string
	Namespace string
	PF        string
	VFIndex   int // -1 when not a VF
	// In a dpu-host node's plan only: what its DPU's agent reports of
	// the endpoint (ready; else why not, or why it cannot be).
	DPUReady  bool
	DPUReason string
	DPUError  string
}

// Remote is an endpoint on another node, as a node needs it.
type Remote struct {
	Name    string
	Network string
	Node    string
	VTEP    netip.Addr
	MAC     string
	IPs     []netip.Prefix
}

// Node is a worker as the planner sees it.
type Node struct {
	Name       string
	UnderlayIP netip.Addr
	// HostIP is the node's own address of the other family than
	// UnderlayIP (a dual-stack node's), or zero.
	HostIP netip.Addr
	Mode   string
	// DPU is, for a node in mode dpu-host, the node whose agent plumbs
	// its VFs' representors.
	DPU string
}

// Agent modes.
const (
	ModeSoftware = "software"
	ModeOffload  = "offload"
	ModeDPU      = "dpu"
	ModeDPUHost  = "dpu-host"
)

// DPUStatus is, in a dpu-host node's plan, its DPU's agent as the
// controller sees it. The zero value: the node is not a dpu-host.
type DPUStatus struct {
	Node       string
	Registered bool
	Connected  bool
	// Since when connected or away; zero when never seen.
	Since time.Time
}

// Equal reports whether two DPU statuses are the same.
func (d DPUStatus) Equal(o DPUStatus) bool {
	return d.Node == o.Node && d.Registered == o.Registered && d.Connected == o.Connected && d.Since.Equal(o.Since)
}

// Plan is the desired state of one node at a revision.
type Plan struct {
	Node       string
	Revision   int64
	UnderlayIP netip.Addr
	Networks   map[string]Network
	Local      map[string]Endpoint
	Remote     map[string]Remote
	// Policies of local endpoints, by endpoint name, and the address
	// groups their rules refer to, by name.
	Policies map[string]EndpointPolicy
	Groups   map[string]AddressGroup
	// DPU is a dpu-host node's DPU (zero on other nodes).
	DPU DPUStatus
	// Recent are the deltas that made this plan, oldest first, the last
	// ending at Revision (Follow appends; at most MaxRecent): a datapath
	// finds in them what changed since the revision it applied last
	// without comparing whole plans. Not part of the state (Equal, Diff
	// and the wire ignore them); empty when the plan was made otherwise.
	Recent []Delta
}

// MaxRecent is how many deltas a plan keeps in Recent.
const MaxRecent = 8

// Follow is Apply that also records d in Recent (a new slice: clones
// of p keep theirs).
func (p *Plan) Follow(d Delta) error {
	if err := p.Apply(d); err != nil {
		return err
	}
	keep := p.Recent[max(0, len(p.Recent)-(MaxRecent-1)):]
	p.Recent = append(slices.Clip(slices.Clone(keep)), d)
	return nil
}

// Since returns the deltas of Recent that lead from the plan at
// revision rev to p, oldest first; false when Recent does not reach back
// to rev without a gap (empty and true when p is at rev and rev is not
// 0, unless the last delta changed p without changing its revision:
// then the plans at rev are not one).
func (p Plan) Since(rev int64) ([]Delta, bool) {
	if rev == 0 {
		return nil, false
	}
	if n := len(p.Recent); n > 0 && p.Recent[n-1].From == p.Recent[n-1].Revision && !p.Recent[n-1].Empty() {
		return nil, false
	}
	if p.Revision == rev {
		return nil, true
	}
	for i := len(p.Recent) - 1; i >= 0; i-- {
		d := p.Recent[i]
		if d.Node != p.Node || (i == len(p.Recent)-1 && d.Revision != p.Revision) || (i < len(p.Recent)-1 && d.Revision != p.Recent[i+1].From) {
			return nil, false
		}
		if d.From == rev {
			return p.Recent[i:], true
		}
	}
	return nil, false
}

// Delta turns the plan at From into the plan at Revision.
type Delta struct {
	Node       string
	From       int64
	Revision   int64
	UnderlayIP *netip.Addr // nil: unchanged
	DPU        *DPUStatus  // nil: unchanged

	UpsertNetworks []Network
	RemoveNetworks []string
	UpsertLocal    []Endpoint
	RemoveLocal    []string
	UpsertRemote   []Remote
	RemoveRemote   []string
	UpsertPolicies []EndpointPolicy
	RemovePolicies []string
	UpsertGroups   []AddressGroup
	RemoveGroups   []string
	// ChangeGroups change the members of groups the plan holds after the
	// removes and upserts (applied last).
	ChangeGroups []GroupChange
}

// New returns an empty plan for node.
func New(node string) Plan {
	return Plan{Node: node, Networks: map[string]Network{}, Local: map[string]Endpoint{}, Remote: map[string]Remote{},
		Policies: map[string]EndpointPolicy{}, Groups: map[string]AddressGroup{}}
}

// Equal reports whether two subnets are the same.
func (s Subnet) Equal(o Subnet) bool {
	return s.Name == o.Name && s.Network == o.Network && s.CIDR == o.CIDR && s.Gateway == o.Gateway && slices.Equal(s.DNS, o.DNS)
}

// Equal reports whether two endpoints are the same.
func (e Endpoint) Equal(o Endpoint) bool {
	return e.Name == o.Name && e.Network == o.Network && e.Node == o.Node && e.Kind == o.Kind &&
		e.MAC == o.MAC && slices.Equal(e.IPs, o.IPs) && maps.Equal(e.Labels, o.Labels) &&
		e.Owner == o.Owner && e.Namespace == o.Namespace && e.PF == o.PF && e.VFIndex == o.VFIndex &&
		e.DPUReady == o.DPUReady && e.DPUReason == o.DPUReason && e.DPUError == o.DPUError
}

// Equal reports whether two remote endpoints are the same.
func (r Remote) Equal(o Remote) bool {
	return r.Name == o.Name && r.Network == o.Network && r.Node == o.Node && r.VTEP == o.VTEP &&
		r.MAC == o.MAC && slices.Equal(r.IPs, o.IPs)
}

// Clone returns a copy of p whose maps may be changed without affecting p.
// Items are values and are shared (their slices must be treated as
// read-only).
func (p Plan) Clone() Plan {
	c := p
	c.Networks = maps.Clone(p.Networks)
	c.Local = maps.Clone(p.Local)
	c.Remote = maps.Clone(p.Remote)
	c.Policies = maps.Clone(p.Policies)
	c.Groups = maps.Clone(p.Groups)
	if c.Policies == nil {
		c.Policies = map[string]EndpointPolicy{}
	}
	if c.Groups == nil {
		c.Groups = map[string]AddressGroup{}
	}
	if c.Networks == nil {
		c.Networks = map[string]Network{}
	}
	if c.Local == nil {
		c.Local = map[string]Endpoint{}
	}
	if c.Remote == nil {
		c.Remote = map[string]Remote{}
	}
	return c
}

// CloneFor returns a copy of p that Apply(d) (or Follow) may change
// without changing p: the maps d changes are copied, the others are
// shared between the two plans, as the maps of any plan are to be read
// only, never written, once other goroutines may hold it (every change
// goes through Clone or CloneFor first). On a plan of many remote
// endpoints, a delta of policies or groups does not copy them.
func (p Plan) CloneFor(d Delta) Plan {
	c := p
	c.Networks = cloneIf(len(d.UpsertNetworks)+len(d.RemoveNetworks) > 0, p.Networks)
	c.Local = cloneIf(len(d.UpsertLocal)+len(d.RemoveLocal) > 0, p.Local)
	c.Remote = cloneIf(len(d.UpsertRemote)+len(d.RemoveRemote) > 0, p.Remote)
	c.Policies = cloneIf(len(d.UpsertPolicies)+len(d.RemovePolicies) > 0, p.Policies)
	c.Groups = cloneIf(len(d.UpsertGroups)+len(d.RemoveGroups)+len(d.ChangeGroups) > 0, p.Groups)
	return c
}

// cloneIf returns a copy of m if changed (an empty map for nil), else m.
func cloneIf[V any](changed bool, m map[string]V) map[string]V {
	switch {
	case m == nil:
		return map[string]V{}
	case changed:
		return maps.Clone(m)
	}
	return m
}

// Equal reports whether two plans hold the same state (revisions ignored).
func (p Plan) Equal(o Plan) bool {
	return p.Node == o.Node && p.UnderlayIP == o.UnderlayIP && p.DPU.Equal(o.DPU) &&
		maps.EqualFunc(p.Networks, o.Networks, Network.Equal) &&
		maps.EqualFunc(p.Local, o.Local, Endpoint.Equal) &&
		maps.EqualFunc(p.Remote, o.Remote, Remote.Equal) &&
		maps.EqualFunc(p.Policies, o.Policies, EndpointPolicy.Equal) &&
		maps.EqualFunc(p.Groups, o.Groups, AddressGroup.Equal)
}

// Empty reports whether d changes nothing.
func (d Delta) Empty() bool {
	return d.UnderlayIP == nil && d.DPU == nil && len(d.UpsertNetworks) == 0 && len(d.RemoveNetworks) == 0 &&
		len(d.UpsertLocal) == 0 && len(d.RemoveLocal) == 0 &&
		len(d.UpsertRemote) == 0 && len(d.RemoveRemote) == 0 &&
		len(d.UpsertPolicies) == 0 && len(d.RemovePolicies) == 0 &&
		len(d.UpsertGroups) == 0 && len(d.RemoveGroups) == 0 && len(d.ChangeGroups) == 0
}

// Size is the number of items d carries.
func (d Delta) Size() int {
	return len(d.UpsertNetworks) + len(d.RemoveNetworks) + len(d.UpsertLocal) +
		len(d.RemoveLocal) + len(d.UpsertRemote) + len(d.RemoveRemote) +
		len(d.UpsertPolicies) + len(d.RemovePolicies) + len(d.UpsertGroups) + len(d.RemoveGroups) + len(d.ChangeGroups)
}

// Apply changes p in place by d. It fails, changing nothing, when d does not
// start at p's revision or is for another node, or a member change of a
// group does not apply (the group is not held, a removed member is not in
// it, an added one is).
func (p *Plan) Apply(d Delta) error {
	if d.Node != p.Node {
		return fmt.Errorf("plan: delta for node %q applied to plan of node %q", d.Node, p.Node)
	}
	if d.From != p.Revision {
		return fmt.Errorf("plan: delta from revision %d applied to plan at revision %d", d.From, p.Revision)
	}
	changed, err := changedGroups(p.Groups, d)
	if err != nil {
		return err
	}
	if p.Networks == nil || p.Local == nil || p.Remote == nil || p.Policies == nil || p.Groups == nil {
		*p = p.Clone()
	}
	if d.UnderlayIP != nil {
		p.UnderlayIP = *d.UnderlayIP
	}
	if d.DPU != nil {
		p.DPU = *d.DPU
	}
	for _, k := range d.RemoveNetworks {
		delete(p.Networks, k)
	}
	for _, n := range d.UpsertNetworks {
		p.Networks[n.Name] = n
	}
	for _, k := range d.RemoveLocal {
		delete(p.Local, k)
	}
	for _, e := range d.UpsertLocal {
		p.Local[e.Name] = e
	}
	for _, k := range d.RemoveRemote {
		delete(p.Remote, k)
	}
	for _, r := range d.UpsertRemote {
		p.Remote[r.Name] = r
	}
	for _, k := range d.RemovePolicies {
		delete(p.Policies, k)
	}
	for _, e := range d.UpsertPolicies {
		p.Policies[e.Endpoint] = e
	}
	for _, k := range d.RemoveGroups {
		delete(p.Groups, k)
	}
	for _, g := range d.UpsertGroups {
		p.Groups[g.Name] = g
	}
	for _, g := range changed {
		p.Groups[g.Name] = g
	}
	p.Revision = d.Revision
	return nil
}

// Merge returns one delta with the effect of a followed by b. b must start
// where a ends. The result's lists are sorted by name.
func Merge(a, b Delta) (Delta, error) {
	return MergeAll(a, b)
}

// MergeAll is Merge over any number of deltas, in one pass: one delta with
// the effect of ds in order. ds must be of one node and contiguous (each
// from the revision the one before ends at); one delta is returned as is.
func MergeAll(ds ...Delta) (Delta, error) {
	switch len(ds) {
	case 0:
		return Delta{}, errors.New("plan: merge of no deltas")
	case 1:
		return ds[0], nil
	}
	first := ds[0]
	m := Delta{Node: first.Node, From: first.From, Revision: first.Revision}
	var (
		nets   = itemMerge[Network]{key: func(n Network) string { return n.Name }}
		local  = itemMerge[Endpoint]{key: func(e Endpoint) string { return e.Name }}
		remote = itemMerge[Remote]{key: func(r Remote) string { return r.Name }}
		pols   = itemMerge[EndpointPolicy]{key: func(e EndpointPolicy) string { return e.Endpoint }}
		groups = newGroupMerge()
	)
	var nn, nl, nr, np, ng int
	for _, d := range ds {
		nn += len(d.UpsertNetworks)
		nl += len(d.UpsertLocal)
		nr += len(d.UpsertRemote)
		np += len(d.UpsertPolicies)
		ng += len(d.UpsertGroups)
	}
	nets.grow(nn)
	local.grow(nl)
	remote.grow(nr)
	pols.grow(np)
	groups.groups.grow(ng)
	for i, d := range ds {
		if d.Node != m.Node {
			return Delta{}, fmt.Errorf("plan: merge of deltas for nodes %q and %q", m.Node, d.Node)
		}
		if i > 0 && d.From != m.Revision {
			return Delta{}, fmt.Errorf("plan: merge of delta ending at %d with delta from %d", m.Revision, d.From)
		}
		m.Revision = d.Revision
		if d.UnderlayIP != nil {
			m.UnderlayIP = d.UnderlayIP
		}
		if d.DPU != nil {
			m.DPU = d.DPU
		}
		nets.add(d.UpsertNetworks, d.RemoveNetworks)
		local.add(d.UpsertLocal, d.RemoveLocal)
		remote.add(d.UpsertRemote, d.RemoveRemote)
		pols.add(d.UpsertPolicies, d.RemovePolicies)
		if err := groups.add(d); err != nil {
			return Delta{}, err
		}
	}
	m.UpsertNetworks, m.RemoveNetworks = nets.result()
	m.UpsertLocal, m.RemoveLocal = local.result()
	m.UpsertRemote, m.RemoveRemote = remote.result()
	m.UpsertPolicies, m.RemovePolicies = pols.result()
	m.UpsertGroups, m.RemoveGroups, m.ChangeGroups = groups.result()
	return m, nil
}

// itemMerge folds one kind of item over deltas in order: the last upsert or
// remove of a name wins. A few items (a stream's deltas of one interval)
// are kept in slices; past smallMerge, in maps.
type itemMerge[V any] struct {
	key   func(V) string
	up    []V
	rm    []string
	upMap map[string]V
	rmMap map[string]bool
}

const smallMerge = 16

// grow makes room for n upserts at once, when they will be kept in a slice.
func (im *itemMerge[V]) grow(n int) {
	if n > 0 && n <= smallMerge {
		im.up = make([]V, 0, n)
	}
}

func (im *itemMerge[V]) add(up []V, rm []string) {
	if len(up)+len(rm) == 0 {
		return
	}
	if im.upMap == nil && len(im.up)+len(im.rm)+len(up)+len(rm) > smallMerge {
		im.upMap, im.rmMap = map[string]V{}, map[string]bool{}
		for _, v := range im.up {
			im.upMap[im.key(v)] = v
		}
		for _, k := range im.rm {
			im.rmMap[k] = true
		}
		im.up, im.rm = nil, nil
	}
	if im.upMap != nil {
		for _, k := range rm {
			delete(im.upMap, k)
			im.rmMap[k] = true
		}
		for _, v := range up {
			k := im.key(v)
			im.upMap[k] = v
			delete(im.rmMap, k)
		}
		return
	}
	for _, k := range rm {
		im.up = slices.DeleteFunc(im.up, func(v V) bool { return im.key(v) == k })
		if !slices.Contains(im.rm, k) {
			im.rm = append(im.rm, k)
		}
	}
	for _, v := range up {
		k := im.key(v)
		if i := slices.IndexFunc(im.up, func(o V) bool { return im.key(o) == k }); i >= 0 {
			im.up[i] = v
		} else {
			im.up = append(im.up, v)
		}
		im.rm = slices.DeleteFunc(im.rm, func(r string) bool { return r == k })
	}
}

// get returns the pending upsert of name.
func (im *itemMerge[V]) get(name string) (V, bool) {
	if im.upMap != nil {
		v, ok := im.upMap[name]
		return v, ok
	}
	if i := slices.IndexFunc(im.up, func(v V) bool { return im.key(v) == name }); i >= 0 {
		return im.up[i], true
	}
	var zero V
	return zero, false
}

// removed reports whether name's last word is a remove.
func (im *itemMerge[V]) removed(name string) bool {
	if im.rmMap != nil {
		return im.rmMap[name]
	}
	return slices.Contains(im.rm, name)
}

// result is the upserts and removes, each sorted by name (nil when none).
func (im *itemMerge[V]) result() ([]V, []string) {
	var (
		up []V
		rm []string
	)
	if im.upMap != nil {
		for _, k := range slices.Sorted(maps.Keys(im.upMap)) {
			up = append(up, im.upMap[k])
		}
		rm = slices.Sorted(maps.Keys(im.rmMap))
	} else {
		up, rm = im.up, im.rm
		slices.SortFunc(up, func(a, b V) int { return strings.Compare(im.key(a), im.key(b)) })
		slices.Sort(rm)
	}
	if len(up) == 0 {
		up = nil
	}
	if len(rm) == 0 {
		rm = nil
	}
	return up, rm
}
