package plan

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func groupPlan(rev int64, groups ...AddressGroup) Plan {
	p := New("n1")
	p.Revision = rev
	for _, g := range groups {
		p.Groups[g.Name] = g
	}
	return p
}

// TestGroupChangeRoundTrip: for random groups before and after, the delta
// Diff makes carries a member change when it is smaller than the group,
// and applying it gives the plan that applying the whole group gives.
func TestGroupChangeRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pick := func(n int) []netip.Addr {
		set := map[netip.Addr]bool{}
		for range n {
			set[netip.AddrFrom4([4]byte{198, 51, 100, byte(r.IntN(64))})] = true
		}
		var out []netip.Addr
		for a := range set {
			out = append(out, a)
		}
		slices.SortFunc(out, netip.Addr.Compare)
		return out
	}
	changes := 0
	for i := range 500 {
		old := AddressGroup{Name: "g", Members: pick(r.IntN(40))}
		cur := AddressGroup{Name: "g", Members: slices.Clone(old.Members)}
		switch i % 3 {
		case 0: // one joins
			cur.Members = pick(1)
			cur.Members = slices.SortedFunc(slices.Values(slices.Compact(append(cur.Members, old.Members...))), netip.Addr.Compare)
			cur.Members = slices.Compact(cur.Members)
		case 1: // one leaves
			if len(cur.Members) > 0 {
				cur.Members = slices.Delete(cur.Members, 0, 1)
			}
		default: // anything
			cur.Members = pick(r.IntN(40))
		}
		from, to := groupPlan(1, old), groupPlan(2, cur)
		d := Diff(from, to)
		changes += len(d.ChangeGroups)
		got := from.Clone()
		if err := got.Apply(d); err != nil {
			t.Fatalf("%v -> %v: %v", old.Members, cur.Members, err)
		}
		whole := from.Clone()
		if err := whole.Apply(Delta{Node: "n1", From: 1, Revision: 2, UpsertGroups: []AddressGroup{cur}}); err != nil {
			t.Fatal(err)
		}
		if !got.Equal(to) || !got.Equal(whole) {
			t.Fatalf("%v -> %v by %+v: got %v, whole %v", old.Members, cur.Members, d, got.Groups["g"].Members, whole.Groups["g"].Members)
		}
		if len(d.ChangeGroups) == 1 && len(d.ChangeGroups[0].Add)+len(d.ChangeGroups[0].Remove) >= len(cur.Members) {
			t.Fatalf("%v -> %v: a change of %+v is not smaller than the group", old.Members, cur.Members, d.ChangeGroups[0])
		}
		if i%3 != 2 && len(old.Members) > 2 && !old.Equal(cur) && (len(d.ChangeGroups) != 1 || len(d.UpsertGroups) != 0) {
			t.Fatalf("%v -> %v: one member joining or leaving went as %+v, want one member change", old.Members, cur.Members, d)
		}
	}
	if changes < 200 {
		t.Fatalf("only %d of 500 deltas were member changes", changes)
	}
}

// TestGroupChangeOneMember: one member joining a group of 1,000 costs one
// address in the delta.
func TestGroupChangeOneMember(t *testing.T) {
	var ms []netip.Addr
	for i := range 1000 {
		ms = append(ms, netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}))
	}
	old := AddressGroup{Name: "g", Members: ms[1:]}
	cur := AddressGroup{Name: "g", Members: ms}
	d := Diff(groupPlan(1, old), groupPlan(2, cur))
	if len(d.UpsertGroups) != 0 || len(d.ChangeGroups) != 1 || fmt.Sprint(d.ChangeGroups[0].Add, d.ChangeGroups[0].Remove) != "[198.18.0.0] []" {
		t.Fatalf("delta upserts %d groups, changes %+v; want one change adding 198.18.0.0", len(d.UpsertGroups), d.ChangeGroups)
	}
}

// TestMergeGroupChanges: merged deltas with member changes (and upserts
// and removes between them) apply as the deltas one after another.
func TestMergeGroupChanges(t *testing.T) {
	g := func(name string, ms ...string) AddressGroup { return AddressGroup{Name: name, Members: addrs(ms...)} }
	ch := func(name string, add, rm []string) GroupChange {
		return GroupChange{Name: name, Add: addrs(add...), Remove: addrs(rm...)}
	}
	start := groupPlan(1, g("a", "198.51.100.1", "198.51.100.2"), g("b", "198.51.100.3"))
	steps := [][]GroupChange{
		{ch("a", []string{"198.51.100.4"}, nil), ch("b", nil, []string{"198.51.100.3"})},
		{ch("a", nil, []string{"198.51.100.4", "198.51.100.1"})}, // joined then left: gone from the merge
		{ch("a", []string{"198.51.100.1"}, nil), ch("b", []string{"198.51.100.9"}, nil)},
	}
	var ds []Delta
	for i, cs := range steps {
		ds = append(ds, Delta{Node: "n1", From: int64(i + 1), Revision: int64(i + 2), ChangeGroups: cs})
	}
	// An upsert of c, then a change of it: folded into the upsert.
	ds = append(ds, Delta{Node: "n1", From: 4, Revision: 5, UpsertGroups: []AddressGroup{g("c", "203.0.113.1")}},
		Delta{Node: "n1", From: 5, Revision: 6, ChangeGroups: []GroupChange{ch("c", []string{"203.0.113.2"}, nil)}})
	want := start.Clone()
	for _, d := range ds {
		if err := want.Apply(d); err != nil {
			t.Fatal(err)
		}
	}
	m, err := MergeAll(ds...)
	if err != nil {
		t.Fatal(err)
	}
	got := start.Clone()
	if err := got.Apply(m); err != nil {
		t.Fatalf("merged %+v: %v", m, err)
	}
	if !got.Equal(want) {
		t.Fatalf("merged deltas give %v, one by one %v", got.Groups, want.Groups)
	}
	if fmt.Sprint(m.ChangeGroups) != "[{b [198.51.100.9] [198.51.100.3]}]" || len(m.UpsertGroups) != 1 {
		t.Fatalf("merged: changes %v, upserts %v; want b's change alone (a's cancel out) and c upserted whole", m.ChangeGroups, m.UpsertGroups)
	}
}

// TestGroupChangeRefused: a member change that does not fit the plan is
// refused, naming the group and the field, and changes nothing.
func TestGroupChangeRefused(t *testing.T) {
	base := groupPlan(1, AddressGroup{Name: "g", Members: addrs("198.51.100.1", "198.51.100.2")})
	for _, tc := range []struct {
		name string
		d    Delta
		want string
	}{
		{"remove of a member not present", Delta{ChangeGroups: []GroupChange{{Name: "g", Remove: addrs("198.51.100.7")}}},
			`changeGroups "g": remove: 198.51.100.7 is not a member`},
		{"add of a member present", Delta{ChangeGroups: []GroupChange{{Name: "g", Add: addrs("198.51.100.2")}}},
			`changeGroups "g": add: 198.51.100.2 is already a member`},
		{"unknown group", Delta{ChangeGroups: []GroupChange{{Name: "h", Add: addrs("198.51.100.3")}}},
			`changeGroups "h": no such group in the plan`},
		{"group removed in the same delta", Delta{RemoveGroups: []string{"g"}, ChangeGroups: []GroupChange{{Name: "g", Add: addrs("198.51.100.3")}}},
			`changeGroups "g": no such group in the plan`},
		{"group changed twice", Delta{ChangeGroups: []GroupChange{{Name: "g", Add: addrs("198.51.100.3")}, {Name: "g", Add: addrs("198.51.100.4")}}},
			`changeGroups "g": changed twice in one delta`},
		{"a good change then a bad one", Delta{UpsertGroups: []AddressGroup{{Name: "k", Members: addrs("203.0.113.1")}},
			ChangeGroups: []GroupChange{{Name: "g", Add: addrs("198.51.100.3")}, {Name: "k", Remove: addrs("203.0.113.2")}}},
			`changeGroups "k": remove: 203.0.113.2 is not a member`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := base.Clone()
			d := tc.d
			d.Node, d.From, d.Revision = "n1", 1, 2
			err := p.Apply(d)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Apply: %v, want an error with %q", err, tc.want)
			}
			if !p.Equal(base) || p.Revision != 1 {
				t.Fatalf("a refused delta changed the plan: %v at %d", p.Groups, p.Revision)
			}
		})
	}
}
