package offload

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
)

// change is how a plan differs from the last one: not at all (same),
// in remote endpoints and networks' flood lists only (a VTEP joining or
// leaving a network), in one address group's members only (with
// members before and after), or otherwise (none of these).
type change struct {
	same         bool
	remotes      []string
	floods       []string // networks whose flood lists alone changed
	group        string
	joined, left []netip.Addr
}

// floodsOnly reports whether cur differs from old in its flood list
// alone (compared without the node's own VTEP).
func floodsOnly(old, cur plan.Network) bool {
	o, c := old.Resolved(), cur.Resolved()
	c.FloodVTEPs = o.FloodVTEPs
	return o.Equal(c)
}

// classify says how cur differs from old, the plan the last Apply
// applied: by the deltas that made cur from old's revision when cur
// keeps them (plan.Follow), looking only at what they name; else by
// comparing each map once.
func classify(old, cur plan.Plan) change {
	if ds, ok := cur.Since(old.Revision); ok && old.Node == cur.Node {
		if c, ok := classifyDeltas(old, cur, ds); ok {
			return c
		}
	}
	return compare(old, cur)
}

// classifyDeltas is classify by the deltas ds; false when they change
// more than remote endpoints and groups (compare decides).
func classifyDeltas(old, cur plan.Plan, ds []plan.Delta) (change, bool) {
	remotes, groups, nets := map[string]bool{}, map[string]bool{}, map[string]bool{}
	whole := map[string]bool{} // groups upserted or removed: their change is not in ds alone
	for _, d := range ds {
		if d.UnderlayIP != nil || len(d.RemoveNetworks)+len(d.UpsertLocal)+len(d.RemoveLocal)+
			len(d.UpsertPolicies)+len(d.RemovePolicies) > 0 {
			return change{}, false
		}
		for _, n := range d.UpsertNetworks {
			nets[n.Name] = true
		}
		for _, r := range d.UpsertRemote {
			remotes[r.Name] = true
		}
		for _, n := range d.RemoveRemote {
			remotes[n] = true
		}
		for _, g := range d.UpsertGroups {
			groups[g.Name], whole[g.Name] = true, true
		}
		for _, n := range d.RemoveGroups {
			groups[n], whole[n] = true, true
		}
		for _, c := range d.ChangeGroups {
			groups[c.Name] = true
		}
	}
	var c change
	for n := range nets {
		o, was := old.Networks[n]
		cn, is := cur.Networks[n]
		switch {
		case was && is && o.Equal(cn):
		case !was || !is || !floodsOnly(o, cn):
			return change{}, false
		default:
			c.floods = append(c.floods, n)
		}
	}
	slices.Sort(c.floods)
	for n := range remotes {
		o, was := old.Remote[n]
		r, is := cur.Remote[n]
		if was != is || (is && !o.Equal(r)) {
			c.remotes = append(c.remotes, n)
		}
	}
	slices.Sort(c.remotes)
	var changed []string
	for n := range groups {
		o, was := old.Groups[n]
		g, is := cur.Groups[n]
		if was != is || (is && !o.Equal(g)) {
			changed = append(changed, n)
		}
	}
	switch {
	case len(changed) == 0:
		c.same = len(c.remotes) == 0 && len(c.floods) == 0
	case len(c.remotes) > 0 || len(c.floods) > 0:
		return change{}, true // both: no incremental way
	case len(changed) == 1:
		o, was := old.Groups[changed[0]]
		g, is := cur.Groups[changed[0]]
		if was && is && len(o.Members) > 0 && len(g.Members) > 0 {
			c.group = changed[0]
			c.joined, c.left = deltaMembers(ds, c.group, whole[c.group], o.Members, g.Members)
		}
	}
	return c, true
}

// compare is classify by comparing old and cur, each map once.
func compare(old, cur plan.Plan) change {
	var c change
	if old.Node != cur.Node || old.UnderlayIP != cur.UnderlayIP || len(old.Networks) != len(cur.Networks) ||
		!maps.EqualFunc(old.Local, cur.Local, plan.Endpoint.Equal) ||
		!maps.EqualFunc(old.Policies, cur.Policies, plan.EndpointPolicy.Equal) {
		return c
	}
	for n, cn := range cur.Networks {
		o, ok := old.Networks[n]
		switch {
		case ok && o.Equal(cn):
		case !ok || !floodsOnly(o, cn):
			return change{}
		default:
			c.floods = append(c.floods, n)
		}
	}
	slices.Sort(c.floods)
	for n, r := range cur.Remote {
		if o, ok := old.Remote[n]; !ok || !o.Equal(r) {
			c.remotes = append(c.remotes, n)
		}
	}
	if len(old.Remote)+len(c.remotes) != len(cur.Remote) {
		for n := range old.Remote {
			if _, ok := cur.Remote[n]; !ok {
				c.remotes = append(c.remotes, n)
			}
		}
	}
	slices.Sort(c.remotes)
	groupsSame := maps.EqualFunc(old.Groups, cur.Groups, plan.AddressGroup.Equal)
	switch {
	case groupsSame:
		c.same = len(c.remotes) == 0 && len(c.floods) == 0
	case len(c.remotes) > 0 || len(c.floods) > 0:
		return change{} // both: no incremental way
	default:
		c.group, c.joined, c.left = groupChange(old.Groups, cur.Groups)
	}
	return c
}

// errDevices: an incremental change changed which devices hold rules;
// the whole plan must be applied (and is, at once).
var errDevices = errors.New("offload datapath: devices with rules changed")

// fwdPlace and polPlace are where a rule sits: its device and match
// (two rules of one place cannot both be installed).
type fwdPlace struct {
	dev       string
	prio, eth uint16
	m         flower.Match
}

type polPlace struct {
	dev   string
	chain uint32
	prio  uint16
	m     flower.PolicyMatch
}

func fwdAt(r flower.Rule) fwdPlace { return fwdPlace{r.Dev, r.Prio, r.EthType, r.Match} }

func polAt(r flower.PolicyRule) polPlace { return polPlace{r.Dev, r.Chain, r.Prio, r.Match} }

// positions maps each rule's place to its position in rules. The whole
// Apply makes them (it is O(rules) anyway), so that the first change
// after it costs what later ones do.
func positions[K comparable, R any](rules []R, key func(R) K) map[K]int {
	m := make(map[K]int, len(rules))
	for i, r := range rules {
		m[key(r)] = i
	}
	return m
}

// roomy is s with room for changes in place to add to it (an eighth
// more) without copying it then.
func roomy[S any](s []S) []S { return slices.Grow(s, len(s)/8+16) }

// swapRules takes the rules at the places of gone out of *rules (and
// their states out of *states) and puts add (with addStates) in, in
// place: the cost follows the change, not the lists. at maps each place
// to its position, made from *rules when nil. Callers hold d.mu and d.op
// (readers that copied the lists hold d.op).
func swapRules[K comparable, R, S any](rules *[]R, states *[]S, at *map[K]int, key func(R) K, gone, add []R, addStates []S) {
	if *at == nil {
		*at = positions(*rules, key)
	}
	m, rs, ss := *at, *rules, *states
	for _, g := range gone {
		k := key(g)
		i, ok := m[k]
		if !ok {
			continue
		}
		last := len(rs) - 1
		if i != last {
			rs[i], ss[i] = rs[last], ss[last]
			m[key(rs[i])] = i
		}
		delete(m, k)
		rs, ss = rs[:last], ss[:last]
	}
	for j, r := range add {
		if i, ok := m[key(r)]; ok {
			rs[i], ss[i] = r, addStates[j]
			continue
		}
		m[key(r)] = len(rs)
		rs, ss = append(rs, r), append(ss, addStates[j])
	}
	*rules, *states = rs, ss
}

// applyRemotes makes the change of the named remote endpoints, the only
// difference between the last Apply's plan and p, by their own rules
// alone: the rest of the last Apply (links, devices, the policy, which
// no remote endpoint changes) stands. flower.ErrNotIncremental: nothing
// was written, the whole plan must be applied.
func (d *Datapath) applyRemotes(p plan.Plan, names []string) error {
	in := d.last.in
	old, err := flower.RemoteRules(d.last.plan, in, names)
	if err != nil {
		return fmt.Errorf("offload datapath: %w", err)
	}
	cur, err := flower.RemoteRules(p, in, names)
	if err != nil {
		return fmt.Errorf("offload datapath: %w", err)
	}
	d.clock.mark("compile")
	d.mu.Lock()
	devs, rules := d.devs, d.rules
	d.mu.Unlock()
	if len(cur) > 0 && len(rules) == 0 {
		return flower.ErrNotIncremental // the VXLAN device may be missing
	}
	touched := map[string]int{} // rules of each device the change touches, before
	for _, r := range append(slices.Clone(old), cur...) {
		touched[r.Dev] = d.prog.Installed(devs[r.Dev].Index)
	}
	w0 := d.prog.WriteTime()
	now, err := d.prog.Change(devs, old, cur)
	d.clock.mark("change")
	d.clock.part("change.netlink", d.prog.WriteTime()-w0)
	if err != nil {
		return err
	}
	// The rule list of the last Apply, with the old rules of these
	// remote endpoints out and their new ones in.
	d.mu.Lock()
	swapRules(&d.rules, &d.states, &d.fwdAt, fwdAt, old, cur, now)
	d.mu.Unlock()
	d.clock.mark("swap")
	for dev, n := range touched {
		if (n == 0) != (d.prog.Installed(devs[dev].Index) == 0) {
			// A device gained its first rules or lost its last: the
			// policy pipeline's way into forwarding changes with it.
			return errDevices
		}
	}
	// The bridge's answers for their addresses (suppress.go).
	if err := d.suppressRemotes(d.last.plan, p, names); err != nil {
		return err
	}
	d.clock.mark("suppress")
	// The underlay next hops of VTEPs new to the node (no user before
	// this change); the others were resolved when they got their first.
	want := map[netip.Addr]bool{}
	for _, n := range names {
		if r, ok := p.Remote[n]; ok {
			if v, ok := remoteVTEP(p, r); ok && d.vteps[v] == 0 {
				want[v] = true
			}
		}
	}
	if d.learn != nil && d.learn.remotes(d.last.plan, p, names) {
		if err := d.learn.save(); err != nil {
			return err
		}
	}
	if d.vteps == nil {
		d.vteps = map[netip.Addr]int{}
	}
	for _, n := range names {
		if r, ok := d.last.plan.Remote[n]; ok {
			if v, ok := remoteVTEP(d.last.plan, r); ok {
				if d.vteps[v]--; d.vteps[v] <= 0 {
					delete(d.vteps, v)
				}
			}
		}
		if r, ok := p.Remote[n]; ok {
			if v, ok := remoteVTEP(p, r); ok {
				d.vteps[v]++
			}
			d.last.plan.Remote[n] = r
		} else {
			delete(d.last.plan.Remote, n)
		}
	}
	d.last.plan.Revision = p.Revision
	d.clock.mark("vteps")
	err = d.resolve(want)
	d.clock.mark("resolve")
	return err
}

// deltaMembers returns the members that joined and left group: from the
// member changes of ds alone (no look at the N members) when ds only
// changed its members, else by comparing old and cur.
func deltaMembers(ds []plan.Delta, group string, whole bool, old, cur []netip.Addr) (joined, left []netip.Addr) {
	if whole {
		return memberDiff(old, cur)
	}
	var cs []plan.Delta
	for _, d := range ds {
		for _, c := range d.ChangeGroups {
			if c.Name == group {
				cs = append(cs, plan.Delta{Node: d.Node, From: d.From, Revision: d.Revision, ChangeGroups: []plan.GroupChange{c}})
			}
		}
	}
	if len(cs) == 1 {
		return cs[0].ChangeGroups[0].Add, cs[0].ChangeGroups[0].Remove
	}
	for i := range cs { // contiguous for MergeAll: only this group's changes are folded
		cs[i].From, cs[i].Revision = int64(i), int64(i+1)
	}
	m, err := plan.MergeAll(cs...)
	if err != nil || len(m.ChangeGroups) != 1 {
		return memberDiff(old, cur)
	}
	return m.ChangeGroups[0].Add, m.ChangeGroups[0].Remove
}

// groupChange returns the members that joined and left the one address
// group that differs between old and cur ("" when more than one does,
// or the group has no members before or after).
func groupChange(old, cur map[string]plan.AddressGroup) (group string, joined, left []netip.Addr) {
	if len(old) != len(cur) {
		return "", nil, nil
	}
	for n, g := range cur {
		o, found := old[n]
		if !found {
			return "", nil, nil
		}
		if o.Equal(g) {
			continue
		}
		if group != "" || len(o.Members) == 0 || len(g.Members) == 0 {
			return "", nil, nil
		}
		group = n
		joined, left = memberDiff(o.Members, g.Members)
	}
	return group, joined, left
}

// memberDiff returns the members of cur not in old (joined) and of old
// not in cur (left), each once. The lists' common head and tail are
// skipped first (a member joins at the end, or leaves from anywhere):
// only what lies between is looked up in the whole lists.
func memberDiff(old, cur []netip.Addr) (joined, left []netip.Addr) {
	head := 0
	for head < len(old) && head < len(cur) && old[head] == cur[head] {
		head++
	}
	tail := 0
	for tail < len(old)-head && tail < len(cur)-head && old[len(old)-1-tail] == cur[len(cur)-1-tail] {
		tail++
	}
	om, cm := old[head:len(old)-tail], cur[head:len(cur)-tail]
	if len(om)+len(cm) > 64 {
		return setDiff(old, cur)
	}
	for _, m := range cm {
		if !slices.Contains(old, m) && !slices.Contains(joined, m) {
			joined = append(joined, m)
		}
	}
	for _, m := range om {
		if !slices.Contains(cur, m) && !slices.Contains(left, m) {
			left = append(left, m)
		}
	}
	return joined, left
}

// setDiff is memberDiff by sets.
func setDiff(old, cur []netip.Addr) (joined, left []netip.Addr) {
	was := make(map[netip.Addr]bool, len(old))
	for _, m := range old {
		was[m] = true
	}
	is := make(map[netip.Addr]bool, len(cur))
	for _, m := range cur {
		if !is[m] && !was[m] {
			joined = append(joined, m)
		}
		is[m] = true
	}
	for _, m := range old {
		if !is[m] {
			left = append(left, m)
			is[m] = true // once
		}
	}
	return joined, left
}

// applyGroup makes the change of one address group's members, the only
// difference between the last Apply's plan and p, by the policy filters
// of those members alone. flower.ErrNotIncremental: nothing was
// written, the whole plan must be applied.
func (d *Datapath) applyGroup(p plan.Plan, group string, joined, left []netip.Addr) error {
	in := d.last.in
	d.mu.Lock()
	devs, fwd := d.devs, d.fwdDevs
	d.mu.Unlock()
	add, err := flower.MemberRules(p, in, fwd, group, joined)
	if err != nil {
		return fmt.Errorf("offload datapath: policy: %w", err)
	}
	remove, err := flower.MemberRules(d.last.plan, in, fwd, group, left)
	if err != nil {
		return fmt.Errorf("offload datapath: policy: %w", err)
	}
	d.clock.mark("compile")
	// The node's stack first: a member's routed traffic (a Service's
	// backend) is checked there.
	if err := d.nodePolicyGroup(p, in, group); err != nil {
		return err
	}
	if err := d.changePolicy(devs, remove, add); err != nil {
		return err
	}
	d.last.plan.Groups[group] = p.Groups[group]
	d.last.plan.Revision = p.Revision
	d.clock.mark("swap")
	return nil
}

// changePolicy writes the policy filters add and deletes those of
// remove whose place add does not take (PolicyProgrammer.Change), and
// puts add in the rule list of the last Apply in place of remove.
// Callers hold d.op.
func (d *Datapath) changePolicy(devs map[string]flower.Device, remove, add []flower.PolicyRule) error {
	w0 := d.pol.WriteTime()
	now, err := d.pol.Change(devs, remove, add)
	d.clock.mark("change")
	d.clock.part("change.netlink", d.pol.WriteTime()-w0)
	if err != nil {
		return err
	}
	added := make([]flower.PolicyRule, len(now))
	for i, s := range now {
		added[i] = s.Rule
	}
	d.mu.Lock()
	swapRules(&d.polRules, &d.polStates, &d.polAt, polAt, remove, added, now)
	d.mu.Unlock()
	return nil
}
