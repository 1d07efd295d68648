package plan

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// GroupChange changes the members of an address group a plan holds:
// Remove leaves it, then Add joins it. One endpoint joining or leaving a
// group of N members is a change of one address, not an upsert of N.
// Add and Remove are sorted and hold each address once.
type GroupChange struct {
	Name        string
	Add, Remove []netip.Addr
}

// Equal reports whether two group changes are the same.
func (c GroupChange) Equal(o GroupChange) bool {
	return c.Name == o.Name && slices.Equal(c.Add, o.Add) && slices.Equal(c.Remove, o.Remove)
}

// DiffGroup returns the change that turns old's members into cur's (two
// groups of one name, sorted members); false when a whole-group upsert is
// no larger (the change would carry at least as many addresses as cur).
func DiffGroup(old, cur AddressGroup) (GroupChange, bool) {
	c := GroupChange{Name: cur.Name}
	i, j := 0, 0
	for i < len(old.Members) || j < len(cur.Members) {
		if len(c.Add)+len(c.Remove) >= len(cur.Members) {
			return GroupChange{}, false
		}
		switch {
		case j == len(cur.Members) || (i < len(old.Members) && old.Members[i].Less(cur.Members[j])):
			c.Remove = append(c.Remove, old.Members[i])
			i++
		case i == len(old.Members) || cur.Members[j].Less(old.Members[i]):
			c.Add = append(c.Add, cur.Members[j])
			j++
		default:
			i++
			j++
		}
	}
	return c, len(c.Add)+len(c.Remove) < len(cur.Members)
}

// SplitGroups takes from up (group upserts turning have's groups into
// the wanted ones) those better sent as member changes: groups have
// holds whose change is smaller than the whole group. The rest stay
// upserts, in order.
func SplitGroups(have map[string]AddressGroup, up []AddressGroup) ([]AddressGroup, []GroupChange) {
	var cs []GroupChange
	keep := up[:0:0]
	for _, g := range up {
		if o, ok := have[g.Name]; ok {
			if c, ok := DiffGroup(o, g); ok {
				cs = append(cs, c)
				continue
			}
		}
		keep = append(keep, g)
	}
	if len(keep) == 0 {
		keep = nil
	}
	return keep, cs
}

// applyChange returns g changed by c (a new member slice: g's is shared
// with clones of the plan). It fails, naming the field, when c removes a
// member g does not hold or adds one it holds: the sender's idea of the
// group is not the receiver's, and only a snapshot can fix that.
func applyChange(g AddressGroup, c GroupChange) (AddressGroup, error) {
	ms := slices.Clone(g.Members)
	for _, a := range c.Remove {
		i, ok := slices.BinarySearchFunc(ms, a, netip.Addr.Compare)
		if !ok {
			return AddressGroup{}, fmt.Errorf("plan: changeGroups %q: remove: %s is not a member", c.Name, a)
		}
		ms = slices.Delete(ms, i, i+1)
	}
	for _, a := range c.Add {
		i, ok := slices.BinarySearchFunc(ms, a, netip.Addr.Compare)
		if ok {
			return AddressGroup{}, fmt.Errorf("plan: changeGroups %q: add: %s is already a member", c.Name, a)
		}
		ms = slices.Insert(ms, i, a)
	}
	return AddressGroup{Name: g.Name, Members: ms}, nil
}

// changedGroups returns the groups d's member changes make, checking
// them against the plan's groups after d's removes and upserts; it fails
// naming the first change that does not apply.
func changedGroups(groups map[string]AddressGroup, d Delta) ([]AddressGroup, error) {
	if len(d.ChangeGroups) == 0 {
		return nil, nil
	}
	out := make([]AddressGroup, 0, len(d.ChangeGroups))
	seen := map[string]bool{}
	for _, c := range d.ChangeGroups {
		if seen[c.Name] {
			return nil, fmt.Errorf("plan: changeGroups %q: changed twice in one delta", c.Name)
		}
		seen[c.Name] = true
		g, ok := groups[c.Name]
		if slices.Contains(d.RemoveGroups, c.Name) {
			ok = false
		}
		if i := slices.IndexFunc(d.UpsertGroups, func(u AddressGroup) bool { return u.Name == c.Name }); i >= 0 {
			g, ok = d.UpsertGroups[i], true
		}
		if !ok {
			return nil, fmt.Errorf("plan: changeGroups %q: no such group in the plan", c.Name)
		}
		ng, err := applyChange(g, c)
		if err != nil {
			return nil, err
		}
		out = append(out, ng)
	}
	return out, nil
}

// groupMerge folds the group upserts, removes and member changes of
// deltas in order into those of one delta.
type groupMerge struct {
	groups  itemMerge[AddressGroup]
	changes map[string]*changeSet
}

// changeSet is a pending member change: added and removed addresses.
type changeSet struct{ add, remove map[netip.Addr]bool }

func newGroupMerge() groupMerge {
	return groupMerge{groups: itemMerge[AddressGroup]{key: func(g AddressGroup) string { return g.Name }}}
}

func (gm *groupMerge) add(d Delta) error {
	for _, n := range d.RemoveGroups {
		delete(gm.changes, n)
	}
	for _, g := range d.UpsertGroups {
		delete(gm.changes, g.Name)
	}
	gm.groups.add(d.UpsertGroups, d.RemoveGroups)
	for _, c := range d.ChangeGroups {
		if g, ok := gm.groups.get(c.Name); ok {
			ng, err := applyChange(g, c)
			if err != nil {
				return err
			}
			gm.groups.add([]AddressGroup{ng}, nil)
			continue
		}
		if gm.groups.removed(c.Name) {
			return fmt.Errorf("plan: changeGroups %q: no such group in the plan", c.Name)
		}
		if gm.changes == nil {
			gm.changes = map[string]*changeSet{}
		}
		cs := gm.changes[c.Name]
		if cs == nil {
			cs = &changeSet{add: map[netip.Addr]bool{}, remove: map[netip.Addr]bool{}}
			gm.changes[c.Name] = cs
		}
		for _, a := range c.Remove {
			if cs.add[a] {
				delete(cs.add, a) // joined, then left: as before
			} else {
				cs.remove[a] = true
			}
		}
		for _, a := range c.Add {
			if cs.remove[a] {
				delete(cs.remove, a) // left, then joined again: as before
			} else {
				cs.add[a] = true
			}
		}
	}
	return nil
}

// result is the merged upserts, removes and changes, each sorted by name.
func (gm *groupMerge) result() ([]AddressGroup, []string, []GroupChange) {
	up, rm := gm.groups.result()
	var cs []GroupChange
	for _, n := range slices.Sorted(maps.Keys(gm.changes)) {
		s := gm.changes[n]
		if len(s.add)+len(s.remove) == 0 {
			continue
		}
		c := GroupChange{Name: n, Add: sortedAddrs(s.add), Remove: sortedAddrs(s.remove)}
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(a, b GroupChange) int { return strings.Compare(a.Name, b.Name) })
	return up, rm, cs
}

func sortedAddrs(m map[netip.Addr]bool) []netip.Addr {
	if len(m) == 0 {
		return nil
	}
	return slices.SortedFunc(maps.Keys(m), netip.Addr.Compare)
}
