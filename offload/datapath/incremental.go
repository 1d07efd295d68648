package datapath

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
// in remote endpoints only, in one address group's members only (with
// members before and after), or otherwise (none of these).
type change struct {
	same         bool
	remotes      []string
	group        string
	joined, left []netip.Addr
}

// classify compares old and cur, each map once.
func classify(old, cur plan.Plan) change {
	var c change
	if old.Node != cur.Node || old.UnderlayIP != cur.UnderlayIP ||
		!maps.EqualFunc(old.Networks, cur.Networks, plan.Network.Equal) ||
		!maps.EqualFunc(old.Local, cur.Local, plan.Endpoint.Equal) ||
		!maps.EqualFunc(old.Policies, cur.Policies, plan.EndpointPolicy.Equal) {
		return c
	}
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
		c.same = len(c.remotes) == 0
	case len(c.remotes) > 0:
		c.remotes = nil // both: no incremental way
	default:
		c.group, c.joined, c.left = groupChange(old.Groups, cur.Groups)
	}
	return c
}

// errDevices: an incremental change changed which devices hold rules;
// the whole plan must be applied (and is, at once).
var errDevices = errors.New("offload datapath: devices with rules changed")

// without returns rules (and their states) less those same as one of
// gone: a new list when it has any, else the same ones (appending to
// them leaves the slices readers hold as they were).
func without[R, S any](rules []R, states []S, gone []R, same func(a, b R) bool) ([]R, []S) {
	if len(gone) == 0 {
		return rules, states
	}
	nr := make([]R, 0, len(rules))
	ns := make([]S, 0, len(rules))
	for i, r := range rules {
		if !slices.ContainsFunc(gone, func(g R) bool { return same(r, g) }) {
			nr = append(nr, r)
			ns = append(ns, states[i])
		}
	}
	return nr, ns
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
	d.mu.Lock()
	devs, rules, states := d.devs, d.rules, d.states
	d.mu.Unlock()
	if len(cur) > 0 && len(rules) == 0 {
		return flower.ErrNotIncremental // the VXLAN device may be missing
	}
	touched := map[string]int{} // rules of each device the change touches, before
	for _, r := range append(slices.Clone(old), cur...) {
		touched[r.Dev] = d.prog.Installed(devs[r.Dev].Index)
	}
	now, err := d.prog.Change(devs, old, cur)
	if err != nil {
		return err
	}
	// The rule list of the last Apply, with the old rules of these
	// remote endpoints out and their new ones in.
	nr, ns := without(rules, states, old, func(a, b flower.Rule) bool {
		return a.Prio == b.Prio && a.EthType == b.EthType && a.Match == b.Match && a.Dev == b.Dev
	})
	nr, ns = append(nr, cur...), append(ns, now...)
	d.mu.Lock()
	d.rules, d.states = nr, ns
	d.mu.Unlock()
	for dev, n := range touched {
		if (n == 0) != (d.prog.Installed(devs[dev].Index) == 0) {
			// A device gained its first rules or lost its last: the
			// policy pipeline's way into forwarding changes with it.
			return errDevices
		}
	}
	for _, n := range names {
		if r, ok := p.Remote[n]; ok {
			d.last.plan.Remote[n] = r
		} else {
			delete(d.last.plan.Remote, n)
		}
	}
	d.last.plan.Revision = p.Revision
	// The underlay next hops of new VTEPs.
	want := map[netip.Addr]bool{}
	for _, r := range cur {
		for _, a := range r.Actions {
			if a.Kind == flower.TunnelSet {
				want[a.Dst] = true
			}
		}
	}
	return d.resolve(want)
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
		was := make(map[netip.Addr]bool, len(o.Members))
		for _, m := range o.Members {
			was[m] = true
		}
		is := make(map[netip.Addr]bool, len(g.Members))
		for _, m := range g.Members {
			is[m] = true
			if !was[m] {
				joined = append(joined, m)
			}
		}
		for _, m := range o.Members {
			if !is[m] {
				left = append(left, m)
			}
		}
	}
	return group, joined, left
}

// applyGroup makes the change of one address group's members, the only
// difference between the last Apply's plan and p, by the policy filters
// of those members alone. flower.ErrNotIncremental: nothing was
// written, the whole plan must be applied.
func (d *Datapath) applyGroup(p plan.Plan, group string, joined, left []netip.Addr) error {
	in := d.last.in
	d.mu.Lock()
	devs, fwd, rules, states := d.devs, d.rules, d.polRules, d.polStates
	d.mu.Unlock()
	add, err := flower.MemberRules(p, in, fwd, group, joined)
	if err != nil {
		return fmt.Errorf("offload datapath: policy: %w", err)
	}
	remove, err := flower.MemberRules(d.last.plan, in, fwd, group, left)
	if err != nil {
		return fmt.Errorf("offload datapath: policy: %w", err)
	}
	now, err := d.pol.Change(devs, remove, add)
	if err != nil {
		return err
	}
	nr, ns := without(rules, states, remove, func(a, b flower.PolicyRule) bool {
		return a.Prio == b.Prio && a.Chain == b.Chain && a.Match == b.Match && a.Dev == b.Dev
	})
	for _, s := range now {
		nr = append(nr, s.Rule)
		ns = append(ns, s)
	}
	d.mu.Lock()
	d.polRules, d.polStates = nr, ns
	d.mu.Unlock()
	d.last.plan.Groups[group] = p.Groups[group]
	d.last.plan.Revision = p.Revision
	return nil
}
