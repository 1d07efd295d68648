package flower

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/tc"
	"github.com/skiff-sdn/skiff/internal/plan"
)

// MemberRules returns the policy filters CompilePolicy makes of p (with
// fwd) because the given addresses are members of group: those of the
// policies that refer to the group, compiled with the group holding only
// these members, less those compiled with the group empty. The other
// groups' members are not looked at unless a policy refers to both.
func MemberRules(p plan.Plan, in Input, fwd []Rule, group string, members []netip.Addr) ([]PolicyRule, error) {
	q := p
	q.Policies = map[string]plan.EndpointPolicy{}
	for n, pol := range p.Policies {
		if refers(pol, group) {
			q.Policies[n] = pol
		}
	}
	if len(q.Policies) == 0 || len(members) == 0 {
		return nil, nil
	}
	// CompilePolicy reads fwd only for the devices holding forwarding
	// rules: one rule of each is enough, found once for both compiles.
	fwd = FirstPerDevice(fwd)
	compile := func(ms []netip.Addr) ([]PolicyRule, error) {
		q.Groups = make(map[string]plan.AddressGroup, len(p.Groups))
		for n, g := range p.Groups {
			q.Groups[n] = g
		}
		q.Groups[group] = plan.AddressGroup{Name: group, Members: ms}
		return CompilePolicy(q, in, fwd)
	}
	with, err := compile(members)
	if err != nil {
		return nil, err
	}
	without, err := compile(nil)
	if err != nil {
		return nil, err
	}
	base := make(map[string]bool, len(without))
	for _, r := range without {
		base[r.Dev+" "+r.String()] = true
	}
	out := with[:0]
	for _, r := range with {
		if !base[r.Dev+" "+r.String()] {
			out = append(out, r)
		}
	}
	return out, nil
}

// FirstPerDevice is the first rule of each device of fwd, in order: what
// CompilePolicy and MemberRules read of the forwarding rules (a caller
// that keeps it makes a member change cost nothing per forwarding rule).
func FirstPerDevice(fwd []Rule) []Rule {
	var out []Rule
	seen := map[string]bool{}
	for i := range fwd {
		dev := fwd[i].Dev
		if (i > 0 && dev == fwd[i-1].Dev) || seen[dev] {
			continue
		}
		seen[dev] = true
		out = append(out, fwd[i])
	}
	return out
}

func refers(pol plan.EndpointPolicy, group string) bool {
	for _, rs := range [][]plan.PolicyRule{pol.Ingress, pol.Egress} {
		for _, r := range rs {
			if slices.ContainsFunc(r.Peers, func(p plan.PolicyPeer) bool { return p.Group == group }) {
				return true
			}
		}
	}
	return false
}

// Change installs the policy filters add (a filter in the place of one
// of remove is replaced in place) and then deletes the filters of remove
// whose place no filter of add takes, on devices it knows, without
// reading the kernel. It returns the state of every filter of add (their
// Index set). ErrNotIncremental, before anything is written: a device is
// not known, or a filter of add would take the place of an installed
// filter that is not in remove.
func (p *PolicyProgrammer) Change(devs map[string]Device, remove, add []PolicyRule) ([]PolicyState, error) {
	removing := map[string]PolicyRule{} // by device and place
	for _, r := range remove {
		dev, ok := devs[r.Dev]
		if !ok || p.cache[dev.Index] == nil {
			return nil, ErrNotIncremental
		}
		removing[r.Dev+" "+place(r.Chain, r.Prio, r.Match)] = r
	}
	add = slices.Clone(add)
	byDev := map[string][]int{}
	for i, r := range add {
		dev, ok := devs[r.Dev]
		if !ok || p.cache[dev.Index] == nil {
			return nil, ErrNotIncremental
		}
		k := r.Dev + " " + place(r.Chain, r.Prio, r.Match)
		if _, taken := p.cache[dev.Index].at[place(r.Chain, r.Prio, r.Match)]; taken {
			if _, ok := removing[k]; !ok {
				return nil, ErrNotIncremental
			}
		}
		delete(removing, k)
		add[i].Index = dev.Index
		byDev[r.Dev] = append(byDev[r.Dev], i)
	}
	states := make([]PolicyState, len(add))
	var errs []error
	for _, name := range slicesSortedKeys(devs) {
		if idx := byDev[name]; len(idx) > 0 {
			errs = append(errs, p.installOn(devs[name], add, idx, states, nil)...)
		}
	}
	var stale []PolicyFilter
	for _, r := range removing {
		c := p.cache[devs[r.Dev].Index]
		if f, ok := c.at[place(r.Chain, r.Prio, r.Match)]; ok {
			stale = append(stale, f)
		}
	}
	if err := p.Delete(stale); err != nil {
		errs = append(errs, err)
	}
	for i := range states {
		if states[i].State == "" {
			states[i].Rule = add[i]
		}
	}
	return states, errors.Join(errs...)
}

// installOn writes the rules idx of rules (sorted: chains last to first,
// each in rising priority) on dev as c knows it (read when nil), one
// batch per chain; keep, when not nil, gets the places of all of them.
func (p *PolicyProgrammer) installOn(dev Device, rules []PolicyRule, idx []int, states []PolicyState, keep map[string]bool) []error {
	c, err := p.cached(dev)
	if err != nil {
		return []error{err}
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		ra, rb := rules[a], rules[b]
		if ra.Chain != rb.Chain {
			return int(rb.Chain) - int(ra.Chain)
		}
		return int(ra.Prio) - int(rb.Prio)
	})
	var errs []error
	var cs []change
	var at []int
	flush := func() {
		if len(cs) > 0 {
			errs = append(errs, p.install(dev, c, cs, rules, at, states)...)
		}
		cs, at = nil, nil
	}
	for _, i := range idx {
		rules[i].Index = dev.Index
		r := rules[i]
		if len(cs) > 0 && cs[len(cs)-1].f.Chain != r.Chain {
			flush() // a chain is complete before the one that leads to it
		}
		k := place(r.Chain, r.Prio, r.Match)
		f, ok := c.at[k]
		if keep != nil {
			keep[k] = true
		}
		if ok && string(f.Cookie) == string(PolicyCookie(r)) {
			states[i] = p.state(r, dev, f)
			continue
		}
		if err := r.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		kind, handle := tc.Add, f.Handle
		if ok {
			kind = tc.Replace
		} else {
			c.top++
			handle = c.top
		}
		cs = append(cs, change{kind: kind, f: r.filter(handle, 0), hw: dev.Hardware && r.Match.Mark == 0}) // fw is never offloaded
		at = append(at, i)
	}
	flush()
	return errs
}

// deleteAll deletes fs (sorted) in one batch and forgets them.
func (p *PolicyProgrammer) deleteAll(fs []PolicyFilter) error {
	ops := make([]tc.Op, len(fs))
	for i, f := range fs {
		ops[i] = tc.Op{Kind: tc.Delete, Filter: deleteFilter(f)}
	}
	res, err := p.w.do(ops)
	if err != nil {
		p.InvalidateAll()
		return fmt.Errorf("flower: deleting policy filters: %w", err)
	}
	var errs []error
	for i, f := range fs {
		if e := res[i]; e != nil && !errors.Is(e, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("flower: deleting filter %#x prio %d chain %d of ifindex %d: %w", f.Handle, f.Rule.Prio, f.Rule.Chain, f.Rule.Index, e))
			continue
		}
		c, ok := p.cache[f.Rule.Index]
		if !ok {
			continue
		}
		k := place(f.Rule.Chain, f.Rule.Prio, f.Rule.Match)
		if cur, ok := c.at[k]; ok && cur.Handle == f.Handle {
			delete(c.at, k)
		}
		c.extra = slices.DeleteFunc(c.extra, func(x PolicyFilter) bool { return filterID(x) == filterID(f) })
	}
	return errors.Join(errs...)
}
