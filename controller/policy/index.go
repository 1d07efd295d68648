package policy

import (
	"maps"
	"net/netip"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Index is the incremental form of Compile: it holds the policies,
// endpoints and namespace labels of a cluster and keeps their compiled
// rules current as they change one at a time, at a cost that follows the
// change, not the cluster:
//
//   - an endpoint change re-evaluates only the policies of its own
//     namespace (for its rules) and each group's selector on that one
//     endpoint (for memberships);
//   - a namespace label change re-evaluates only the groups with a
//     namespaceSelector, on that namespace's endpoints;
//   - a policy change re-evaluates only the endpoints of its namespace,
//     and evaluates a group only when no other policy already uses it.
//
// Every change marks what it changed: the endpoints whose rules changed
// and the groups whose members changed (Take returns and clears them).
// Rules(name) and Group(id) then give exactly what Compile would. An Index
// is not safe for concurrent use.
type Index struct {
	pols       map[string]*ipolicy            // by key
	polsByNS   map[string]map[string]*ipolicy // namespace -> key -> policy
	polsSorted map[string][]*ipolicy          // namespace -> policies by key; rebuilt when missing
	eps        map[string]Endpoint
	epsByNS    map[string]map[string]struct{}
	nsLabels   map[string]map[string]string
	groups     map[string]*igroup
	groupsByNS map[string]map[string]*igroup // groups of one namespace's pods, by namespace
	nsGroups   map[string]*igroup            // groups with a namespaceSelector
	rules      map[string]EndpointRules      // selected endpoints only
	dirtyEps   map[string]bool
	dirtyGroup map[string]bool
	// batch, while Batch runs: namespaces whose endpoints are reselected
	// once at its end instead of on every policy change.
	batch map[string]bool
}

type ipolicy struct {
	p        Policy
	sel      labels.Selector
	in, out  bool
	ingress  []Rule
	egress   []Rule
	groupIDs []string
}

type igroup struct {
	g       Group
	ns      string          // the policy's namespace, when sel is nil
	pods    labels.Selector // never nil
	nss     labels.Selector // nil: the policy's namespace only
	members map[string]struct{}
	refs    int // policies that refer to it
	// sorted caches the members' addresses; valid is false after any
	// change of members.
	sorted []netip.Addr
	valid  bool
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{pols: map[string]*ipolicy{}, polsByNS: map[string]map[string]*ipolicy{}, polsSorted: map[string][]*ipolicy{}, eps: map[string]Endpoint{},
		epsByNS: map[string]map[string]struct{}{}, nsLabels: map[string]map[string]string{}, groups: map[string]*igroup{},
		groupsByNS: map[string]map[string]*igroup{}, nsGroups: map[string]*igroup{}, rules: map[string]EndpointRules{}, dirtyEps: map[string]bool{}, dirtyGroup: map[string]bool{}}
}

// SetEndpoint adds or replaces an endpoint.
func (x *Index) SetEndpoint(e Endpoint) {
	if old, ok := x.eps[e.Name]; ok {
		same := old.Namespace == e.Namespace && old.Network == e.Network && slices.Equal(old.IPs, e.IPs)
		if same && maps.Equal(old.Labels, e.Labels) {
			if old.Node != e.Node {
				x.eps[e.Name] = e
				x.dirtyEps[e.Name] = true // its rules move with it
			}
			return
		}
		if same {
			x.relabel(old, e)
			return
		}
		x.DeleteEndpoint(e.Name)
	}
	x.eps[e.Name] = e
	add(x.epsByNS, e.Namespace, e.Name)
	for id, g := range x.candidateGroups(e.Namespace) {
		if x.inGroup(g, e) {
			g.members[e.Name] = struct{}{}
			g.valid = false
			if len(e.IPs) > 0 {
				x.dirtyGroup[id] = true
			}
		}
	}
	x.reselect(e.Name)
}

// relabel replaces an endpoint whose labels (and perhaps node) changed,
// nothing else: only the groups it joins or leaves, and its rules if
// they differ, are marked changed.
func (x *Index) relabel(old, e Endpoint) {
	x.eps[e.Name] = e
	for id, g := range x.candidateGroups(e.Namespace) {
		_, had := g.members[e.Name]
		if has := x.inGroup(g, e); has == had {
			continue
		} else if has {
			g.members[e.Name] = struct{}{}
		} else {
			delete(g.members, e.Name)
		}
		g.valid = false
		if len(e.IPs) > 0 {
			x.dirtyGroup[id] = true
		}
	}
	x.reselect(e.Name)
	if _, ok := x.rules[e.Name]; ok && old.Node != e.Node {
		x.dirtyEps[e.Name] = true // its rules move with it
	}
}

// DeleteEndpoint removes an endpoint; an unknown name is ignored.
func (x *Index) DeleteEndpoint(name string) {
	e, ok := x.eps[name]
	if !ok {
		return
	}
	for id, g := range x.candidateGroups(e.Namespace) {
		if _, ok := g.members[name]; ok {
			delete(g.members, name)
			g.valid = false
			if len(e.IPs) > 0 {
				x.dirtyGroup[id] = true
			}
		}
	}
	delete(x.eps, name)
	del(x.epsByNS, e.Namespace, name)
	if _, ok := x.rules[name]; ok {
		delete(x.rules, name)
		x.dirtyEps[name] = true
	}
}

// SetNamespace sets a namespace's labels (nil: none).
func (x *Index) SetNamespace(name string, l map[string]string) {
	if maps.Equal(x.nsLabels[name], l) {
		return
	}
	if len(l) == 0 {
		delete(x.nsLabels, name)
	} else {
		x.nsLabels[name] = maps.Clone(l)
	}
	for id, g := range x.nsGroups {
		for ep := range x.epsByNS[name] {
			_, had := g.members[ep]
			has := x.inGroup(g, x.eps[ep])
			if has == had {
				continue
			}
			if has {
				g.members[ep] = struct{}{}
			} else {
				delete(g.members, ep)
			}
			g.valid = false
			if len(x.eps[ep].IPs) > 0 {
				x.dirtyGroup[id] = true
			}
		}
	}
}

// SetPolicy adds or replaces a valid policy. The error is Compile's for
// the same policy; on error the index is unchanged.
func (x *Index) SetPolicy(p Policy) error {
	c := &compiler{res: Result{Groups: map[string]Group{}}}
	sel, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
	if err != nil {
		return err
	}
	ip := &ipolicy{p: p, sel: sel}
	ip.in, ip.out = types(p)
	// Compile's rule builder with an empty endpoint list gives the rules
	// and the definitions of their groups; members are the index's job.
	if ip.in {
		for _, r := range p.Spec.Ingress {
			rule, err := c.rule(p.Namespace, r.From, r.Ports)
			if err != nil {
				return err
			}
			ip.ingress = append(ip.ingress, rule)
		}
	}
	if ip.out {
		for _, r := range p.Spec.Egress {
			rule, err := c.rule(p.Namespace, r.To, r.Ports)
			if err != nil {
				return err
			}
			ip.egress = append(ip.egress, rule)
		}
	}
	defs := map[string]*igroup{}
	for _, r := range slices.Concat(ip.ingress, ip.egress) {
		for _, peer := range r.Peers {
			if peer.Group == "" || defs[peer.Group] != nil {
				continue
			}
			g, err := groupDef(p, peer.Group, c.res.Groups[peer.Group])
			if err != nil {
				return err
			}
			defs[peer.Group] = g
		}
	}
	ip.groupIDs = slices.Sorted(maps.Keys(defs))
	x.deletePolicy(p.Key())
	for _, id := range ip.groupIDs {
		g, ok := x.groups[id]
		if !ok {
			g = defs[id]
			g.members = map[string]struct{}{}
			for ns, eps := range x.epsByNS {
				if g.nss == nil && ns != g.ns || g.nss != nil && (ns == "" || !g.nss.Matches(nsLabelSet(x.nsLabels, ns))) {
					continue
				}
				for name := range eps {
					if g.pods.Matches(labels.Set(x.eps[name].Labels)) {
						g.members[name] = struct{}{}
					}
				}
			}
			x.groups[id] = g
			x.dirtyGroup[id] = true // a new incarnation of an ID: caches of it are stale
			if g.nss != nil {
				x.nsGroups[id] = g
			} else {
				if x.groupsByNS[g.ns] == nil {
					x.groupsByNS[g.ns] = map[string]*igroup{}
				}
				x.groupsByNS[g.ns][id] = g
			}
		}
		g.refs++
	}
	x.pols[p.Key()] = ip
	if x.polsByNS[p.Namespace] == nil {
		x.polsByNS[p.Namespace] = map[string]*ipolicy{}
	}
	x.polsByNS[p.Namespace][p.Key()] = ip
	delete(x.polsSorted, p.Namespace)
	x.reselectFor(p.Namespace, p.Key(), sel)
	return nil
}

// DeletePolicy removes a policy by "namespace/name"; unknown keys are
// ignored.
func (x *Index) DeletePolicy(key string) {
	p, ok := x.pols[key]
	if !ok {
		return
	}
	x.deletePolicy(key)
	x.reselectFor(p.p.Namespace, key, p.sel)
}

// Batch runs f, which makes changes to x, and reselects the endpoints of
// the namespaces whose policies f changed once at the end: loading many
// policies costs one pass over their endpoints, not one per policy.
func (x *Index) Batch(f func()) {
	x.batch = map[string]bool{}
	f()
	nss := x.batch
	x.batch = nil
	for ns := range nss {
		for name := range x.epsByNS[ns] {
			x.reselect(name)
		}
	}
}

// reselectFor recomputes the rules of the endpoints of ns that a policy
// selects now or selected before.
func (x *Index) reselectFor(ns, key string, sel labels.Selector) {
	if x.batch != nil {
		x.batch[ns] = true
		return
	}
	for name := range x.epsByNS[ns] {
		if sel.Matches(labels.Set(x.eps[name].Labels)) || slices.Contains(x.rules[name].Policies, key) {
			x.reselect(name)
		}
	}
}

func (x *Index) deletePolicy(key string) {
	p, ok := x.pols[key]
	if !ok {
		return
	}
	delete(x.pols, key)
	delete(x.polsByNS[p.p.Namespace], key)
	delete(x.polsSorted, p.p.Namespace)
	for _, id := range p.groupIDs {
		if g := x.groups[id]; g != nil {
			if g.refs--; g.refs == 0 {
				delete(x.groups, id)
				x.dirtyGroup[id] = true
				delete(x.nsGroups, id)
				delete(x.groupsByNS[g.ns], id)
				if len(x.groupsByNS[g.ns]) == 0 {
					delete(x.groupsByNS, g.ns)
				}
			}
		}
	}
}

// groupDef rebuilds the selectors of a group Compile's rule builder named.
func groupDef(p Policy, id string, g Group) (*igroup, error) {
	var peers []networkingv1.NetworkPolicyPeer
	for _, r := range p.Spec.Ingress {
		peers = append(peers, r.From...)
	}
	for _, r := range p.Spec.Egress {
		peers = append(peers, r.To...)
	}
	for _, peer := range peers {
		if ig, ok, err := matchDef(p.Namespace, id, peer.PodSelector, peer.NamespaceSelector, peer.IPBlock != nil); ok || err != nil {
			return ig, err
		}
	}
	return &igroup{g: g, ns: p.Namespace, pods: labels.Nothing()}, nil
}

func matchDef(ns, id string, podSel, nsSel *metav1.LabelSelector, ipBlock bool) (*igroup, bool, error) {
	if ipBlock {
		return nil, false, nil
	}
	c := &compiler{res: Result{Groups: map[string]Group{}}}
	gid, err := c.group(ns, podSel, nsSel)
	if err != nil || gid != id {
		return nil, false, err
	}
	g := &igroup{g: Group{ID: id, Selector: c.res.Groups[id].Selector}, ns: ns, pods: labels.Everything()}
	if podSel != nil {
		if g.pods, err = metav1.LabelSelectorAsSelector(podSel); err != nil {
			return nil, false, err
		}
	}
	if nsSel != nil {
		if g.nss, err = metav1.LabelSelectorAsSelector(nsSel); err != nil {
			return nil, false, err
		}
	}
	return g, true, nil
}

// candidateGroups are the groups an endpoint of namespace ns may be in:
// those of ns's pods and those with a namespaceSelector.
func (x *Index) candidateGroups(ns string) func(func(string, *igroup) bool) {
	return func(yield func(string, *igroup) bool) {
		for id, g := range x.groupsByNS[ns] {
			if !yield(id, g) {
				return
			}
		}
		for id, g := range x.nsGroups {
			if !yield(id, g) {
				return
			}
		}
	}
}

func (x *Index) inGroup(g *igroup, e Endpoint) bool {
	inNS := e.Namespace == g.ns
	if g.nss != nil {
		inNS = e.Namespace != "" && g.nss.Matches(nsLabelSet(x.nsLabels, e.Namespace))
	}
	return inNS && g.pods.Matches(labels.Set(e.Labels))
}

// reselect recomputes one endpoint's rules from the policies of its
// namespace, in Compile's order, and marks it when they changed.
func (x *Index) reselect(name string) {
	e := x.eps[name]
	var er EndpointRules
	selected := false
	sorted, ok := x.polsSorted[e.Namespace]
	if !ok {
		for _, key := range slices.Sorted(maps.Keys(x.polsByNS[e.Namespace])) {
			sorted = append(sorted, x.polsByNS[e.Namespace][key])
		}
		x.polsSorted[e.Namespace] = sorted
	}
	for _, p := range sorted {
		key := p.p.Key()
		if !p.sel.Matches(labels.Set(e.Labels)) {
			continue
		}
		selected = true
		er.Policies = append(er.Policies, key)
		if p.in {
			er.IngressIsolated = true
			er.Ingress = append(er.Ingress, p.ingress...)
		}
		if p.out {
			er.EgressIsolated = true
			er.Egress = append(er.Egress, p.egress...)
		}
	}
	old, had := x.rules[name]
	switch {
	case !selected && had:
		delete(x.rules, name)
		x.dirtyEps[name] = true
	case selected && (!had || !rulesEqual(old, er)):
		x.rules[name] = er
		x.dirtyEps[name] = true
	}
}

func rulesEqual(a, b EndpointRules) bool {
	eq := func(r, s Rule) bool {
		return slices.Equal(r.Ports, s.Ports) && slices.EqualFunc(r.Peers, s.Peers, func(p, q Peer) bool {
			return p.Group == q.Group && p.CIDR == q.CIDR && slices.Equal(p.Except, q.Except)
		})
	}
	return a.IngressIsolated == b.IngressIsolated && a.EgressIsolated == b.EgressIsolated && slices.Equal(a.Policies, b.Policies) &&
		slices.EqualFunc(a.Ingress, b.Ingress, eq) && slices.EqualFunc(a.Egress, b.Egress, eq)
}

// Rules returns an endpoint's compiled rules; ok is false when no policy
// selects it.
func (x *Index) Rules(name string) (EndpointRules, bool) {
	r, ok := x.rules[name]
	return r, ok
}

// Group returns a group with its members' addresses, sorted.
func (x *Index) Group(id string) (Group, bool) {
	g, ok := x.groups[id]
	if !ok {
		return Group{}, false
	}
	if !g.valid {
		var m []netip.Addr
		for name := range g.members {
			m = append(m, x.eps[name].IPs...)
		}
		slices.SortFunc(m, netip.Addr.Compare)
		g.sorted, g.valid = slices.Compact(m), true
	}
	// Callers share the cached slice: it is replaced, never changed.
	return Group{ID: g.g.ID, Selector: g.g.Selector, Members: g.sorted}, true
}

// GroupMembers returns the endpoints a group selects (nil for an unknown
// group), in no order. Callers must not keep or change the map.
func (x *Index) GroupMembers(id string) map[string]struct{} {
	if g, ok := x.groups[id]; ok {
		return g.members
	}
	return nil
}

// Endpoint returns an endpoint the index holds.
func (x *Index) Endpoint(name string) (Endpoint, bool) {
	e, ok := x.eps[name]
	return e, ok
}

// Take returns the endpoints whose rules and the groups whose members
// changed since the last Take, sorted, and forgets them.
func (x *Index) Take() (endpoints, groups []string) {
	endpoints = slices.Sorted(maps.Keys(x.dirtyEps))
	groups = slices.Sorted(maps.Keys(x.dirtyGroup))
	// New sets, not cleared ones: a Go map keeps the size it grew to, and
	// ranging or clearing it visits every slot. After a load marked every
	// endpoint, each later Take walked 150,000 slots twice for the few a
	// change marks (9% of the controller's CPU under the scale harness's
	// load with 10,000 policies).
	if len(x.dirtyEps) > 0 {
		x.dirtyEps = map[string]bool{}
	}
	if len(x.dirtyGroup) > 0 {
		x.dirtyGroup = map[string]bool{}
	}
	return endpoints, groups
}

// Result returns the whole compiled state, as Compile would.
func (x *Index) Result() Result {
	res := Result{Endpoints: maps.Clone(x.rules), Groups: map[string]Group{}}
	for _, er := range x.rules {
		for _, r := range slices.Concat(er.Ingress, er.Egress) {
			for _, p := range r.Peers {
				if p.Group != "" {
					res.Groups[p.Group], _ = x.Group(p.Group)
				}
			}
		}
	}
	return res
}

func nsLabelSet(all map[string]map[string]string, ns string) labels.Set {
	out := labels.Set{NamespaceNameLabel: ns}
	for k, v := range all[ns] {
		if k != NamespaceNameLabel {
			out[k] = v
		}
	}
	return out
}

func add(m map[string]map[string]struct{}, k, v string) {
	if m[k] == nil {
		m[k] = map[string]struct{}{}
	}
	m[k][v] = struct{}{}
}

func del(m map[string]map[string]struct{}, k, v string) {
	delete(m[k], v)
	if len(m[k]) == 0 {
		delete(m, k)
	}
}
