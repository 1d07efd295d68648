package offload

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
)

func TestClassifyRemotes(t *testing.T) {
	p := plan.New("n1")
	p.Networks["blue"] = plan.Network{Name: "blue", VNI: 100}
	p.Remote["r1"] = plan.Remote{Name: "r1", Network: "blue", VTEP: netip.MustParseAddr("192.0.2.2"), MAC: "02:00:00:00:00:01"}
	p.Remote["r2"] = plan.Remote{Name: "r2", Network: "blue", VTEP: netip.MustParseAddr("192.0.2.2"), MAC: "02:00:00:00:00:02"}
	if c := classify(p, p.Clone()); !c.same || len(c.remotes) != 0 {
		t.Errorf("an unchanged plan: %+v", c)
	}
	q := p.Clone()
	delete(q.Remote, "r1")
	q.Remote["r3"] = plan.Remote{Name: "r3", Network: "blue", VTEP: netip.MustParseAddr("192.0.2.3"), MAC: "02:00:00:00:00:03"}
	r2 := q.Remote["r2"]
	r2.VTEP = netip.MustParseAddr("192.0.2.4")
	q.Remote["r2"] = r2
	if c := classify(p, q); c.same || !slices.Equal(c.remotes, []string{"r1", "r2", "r3"}) {
		t.Errorf("classify = %+v; want remotes r1 r2 r3", c)
	}
	q.Local["a"] = plan.Endpoint{Name: "a", Network: "blue", VFIndex: -1}
	if c := classify(p, q); c.same || len(c.remotes) != 0 || c.group != "" {
		t.Errorf("a local endpoint's change is a remote change only: %+v", c)
	}
}

// A network whose flood list alone changed (a VTEP joining or leaving
// it) is a change of its flood list, with or without remote endpoints;
// with anything else of the network changed, it is none of the kinds.
func TestClassifyFloods(t *testing.T) {
	a := netip.MustParseAddr
	p := plan.New("n1")
	p.Networks["blue"] = plan.Network{Name: "blue", VNI: 100, FloodVTEPs: []netip.Addr{a("192.0.2.2")}}
	p.Networks["red"] = plan.Network{Name: "red", VNI: 200, FloodVTEPs: []netip.Addr{a("192.0.2.2")}}
	grown := p.Clone()
	grown.Networks["blue"] = plan.Network{Name: "blue", VNI: 100, FloodVTEPs: []netip.Addr{a("192.0.2.2"), a("192.0.2.3")}}
	if c := classify(p, grown); c.same || !slices.Equal(c.floods, []string{"blue"}) || len(c.remotes) != 0 {
		t.Errorf("flood list grown: %+v", c)
	}
	joined := grown.Clone()
	joined.Remote["r3"] = plan.Remote{Name: "r3", Network: "blue", VTEP: a("192.0.2.3"), MAC: "02:00:00:00:00:03"}
	if c := classify(p, joined); c.same || !slices.Equal(c.floods, []string{"blue"}) || !slices.Equal(c.remotes, []string{"r3"}) {
		t.Errorf("VTEP joined with its endpoint: %+v", c)
	}
	if c := classify(joined, p); c.same || !slices.Equal(c.floods, []string{"blue"}) || !slices.Equal(c.remotes, []string{"r3"}) {
		t.Errorf("VTEP left with its endpoint: %+v", c)
	}
	// The node's own VTEP in the list (Own) is no change of it.
	own := p.Clone()
	own.Networks["red"] = plan.Network{Name: "red", VNI: 200, FloodVTEPs: []netip.Addr{a("192.0.2.1"), a("192.0.2.2")}, Own: a("192.0.2.1")}
	if c := classify(p, own); !c.same {
		t.Errorf("own VTEP listed: %+v", c)
	}
	mtu := grown.Clone()
	mtu.Networks["blue"] = plan.Network{Name: "blue", VNI: 100, MTU: 1400, FloodVTEPs: []netip.Addr{a("192.0.2.2"), a("192.0.2.3")}}
	if c := classify(p, mtu); c.same || len(c.floods)+len(c.remotes) != 0 || c.group != "" {
		t.Errorf("flood list and MTU changed: %+v", c)
	}
}

func TestClassifyGroup(t *testing.T) {
	a := netip.MustParseAddr
	p := plan.New("n1")
	p.Groups["g"] = plan.AddressGroup{Name: "g", Members: []netip.Addr{a("192.0.2.1"), a("192.0.2.2")}}
	p.Groups["h"] = plan.AddressGroup{Name: "h", Members: []netip.Addr{a("192.0.2.9")}}
	q := p.Clone()
	q.Groups["g"] = plan.AddressGroup{Name: "g", Members: []netip.Addr{a("192.0.2.2"), a("192.0.2.3")}}
	c := classify(p, q)
	g, joined, left := c.group, c.joined, c.left
	if g != "g" || !slices.Equal(joined, []netip.Addr{a("192.0.2.3")}) || !slices.Equal(left, []netip.Addr{a("192.0.2.1")}) {
		t.Errorf("classify = %+v", c)
	}
	q.Groups["h"] = plan.AddressGroup{Name: "h"}
	if c := classify(p, q); c.group != "" || c.same {
		t.Errorf("two groups changed (one emptied): %+v", c)
	}
	q = p.Clone()
	q.Groups["g"] = plan.AddressGroup{Name: "g", Members: []netip.Addr{a("192.0.2.1")}}
	q.Remote["r"] = plan.Remote{Name: "r"}
	if c := classify(p, q); c.group != "" || len(c.remotes) != 0 || c.same {
		t.Errorf("a group and a remote endpoint changed: %+v", c)
	}
}

func TestMemberDiff(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	addr := func() netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(rnd.IntN(40))}) }
	sortAddrs := func(as []netip.Addr) []netip.Addr { return slices.SortedFunc(slices.Values(as), netip.Addr.Compare) }
	for range 2000 {
		var old []netip.Addr
		for range rnd.IntN(30) {
			old = append(old, addr())
		}
		cur := slices.Clone(old)
		for range rnd.IntN(4) { // joins at the end or anywhere, leaves from anywhere
			switch i := rnd.IntN(len(cur) + 1); rnd.IntN(3) {
			case 0:
				cur = append(cur, addr())
			case 1:
				cur = slices.Insert(cur, i, addr())
			default:
				if i < len(cur) {
					cur = slices.Delete(cur, i, i+1)
				}
			}
		}
		j, l := memberDiff(old, cur)
		wj, wl := setDiff(old, cur)
		if !slices.Equal(sortAddrs(j), sortAddrs(wj)) || !slices.Equal(sortAddrs(l), sortAddrs(wl)) {
			t.Fatalf("memberDiff(%v, %v) = %v, %v; want %v, %v", old, cur, j, l, wj, wl)
		}
	}
}

// A plan made by plan.Follow is classified by its deltas: the same
// answers as comparing whole plans.
func TestClassifyDeltas(t *testing.T) {
	a := netip.MustParseAddr
	p := plan.New("n1")
	p.Revision = 10
	p.Networks["blue"] = plan.Network{Name: "blue", VNI: 100}
	p.Remote["r1"] = plan.Remote{Name: "r1", Network: "blue", VTEP: a("192.0.2.2"), MAC: "02:00:00:00:00:01"}
	p.Groups["g"] = plan.AddressGroup{Name: "g", Members: []netip.Addr{a("192.0.2.1"), a("192.0.2.2")}}
	follow := func(p plan.Plan, d plan.Delta) plan.Plan {
		t.Helper()
		q := p.Clone()
		d.Node, d.From, d.Revision = "n1", p.Revision, p.Revision+1
		if err := q.Follow(d); err != nil {
			t.Fatal(err)
		}
		return q
	}
	r2 := plan.Remote{Name: "r2", Network: "blue", VTEP: a("192.0.2.3"), MAC: "02:00:00:00:00:02"}
	for _, tc := range []struct {
		name string
		cur  plan.Plan
	}{
		{"unchanged", p},
		{"remote added", follow(p, plan.Delta{UpsertRemote: []plan.Remote{r2}})},
		{"remote upserted as it was", follow(p, plan.Delta{UpsertRemote: []plan.Remote{p.Remote["r1"]}})},
		{"remote removed, then one added", follow(follow(p, plan.Delta{RemoveRemote: []string{"r1"}}), plan.Delta{UpsertRemote: []plan.Remote{r2}})},
		{"member joined", follow(p, plan.Delta{UpsertGroups: []plan.AddressGroup{{Name: "g", Members: []netip.Addr{a("192.0.2.1"), a("192.0.2.2"), a("192.0.2.9")}}}})},
		{"member left", follow(p, plan.Delta{UpsertGroups: []plan.AddressGroup{{Name: "g", Members: []netip.Addr{a("192.0.2.2")}}}})},
		{"member joined by a member change", follow(p, plan.Delta{ChangeGroups: []plan.GroupChange{{Name: "g", Add: []netip.Addr{a("192.0.2.9")}}}})},
		{"member left by a member change", follow(p, plan.Delta{ChangeGroups: []plan.GroupChange{{Name: "g", Remove: []netip.Addr{a("192.0.2.1")}}}})},
		{"member changes folded", follow(follow(follow(p,
			plan.Delta{ChangeGroups: []plan.GroupChange{{Name: "g", Add: []netip.Addr{a("192.0.2.8"), a("192.0.2.9")}}}}),
			plan.Delta{ChangeGroups: []plan.GroupChange{{Name: "g", Remove: []netip.Addr{a("192.0.2.1"), a("192.0.2.9")}}}}),
			plan.Delta{ChangeGroups: []plan.GroupChange{{Name: "g", Add: []netip.Addr{a("192.0.2.7")}}}})},
		{"member joined and left", follow(follow(p,
			plan.Delta{ChangeGroups: []plan.GroupChange{{Name: "g", Add: []netip.Addr{a("192.0.2.9")}}}}),
			plan.Delta{ChangeGroups: []plan.GroupChange{{Name: "g", Remove: []netip.Addr{a("192.0.2.9")}}}})},
		{"group upserted, then changed", follow(follow(p,
			plan.Delta{UpsertGroups: []plan.AddressGroup{{Name: "g", Members: []netip.Addr{a("192.0.2.5")}}}}),
			plan.Delta{ChangeGroups: []plan.GroupChange{{Name: "g", Add: []netip.Addr{a("192.0.2.6")}}}})},
		{"member change and remote", follow(p, plan.Delta{UpsertRemote: []plan.Remote{r2}, ChangeGroups: []plan.GroupChange{{Name: "g", Add: []netip.Addr{a("192.0.2.9")}}}})},
		{"group emptied", follow(p, plan.Delta{UpsertGroups: []plan.AddressGroup{{Name: "g"}}})},
		{"group and remote", follow(p, plan.Delta{UpsertRemote: []plan.Remote{r2}, UpsertGroups: []plan.AddressGroup{{Name: "g"}}})},
		{"network", follow(p, plan.Delta{UpsertNetworks: []plan.Network{{Name: "blue", VNI: 101}}})},
		{"network upserted as it was", follow(p, plan.Delta{UpsertNetworks: []plan.Network{p.Networks["blue"]}})},
		{"flood list grown", follow(p, plan.Delta{UpsertNetworks: []plan.Network{{Name: "blue", VNI: 100, FloodVTEPs: []netip.Addr{a("192.0.2.3")}}}})},
		{"VTEP joined with its endpoint", follow(p, plan.Delta{UpsertNetworks: []plan.Network{{Name: "blue", VNI: 100, FloodVTEPs: []netip.Addr{a("192.0.2.3")}}},
			UpsertRemote: []plan.Remote{r2}})},
		{"flood list and VNI", follow(p, plan.Delta{UpsertNetworks: []plan.Network{{Name: "blue", VNI: 101, FloodVTEPs: []netip.Addr{a("192.0.2.3")}}}})},
		{"flood list and group", follow(p, plan.Delta{UpsertNetworks: []plan.Network{{Name: "blue", VNI: 100, FloodVTEPs: []netip.Addr{a("192.0.2.3")}}},
			ChangeGroups: []plan.GroupChange{{Name: "g", Add: []netip.Addr{a("192.0.2.9")}}}})},
		{"new network", follow(p, plan.Delta{UpsertNetworks: []plan.Network{{Name: "red", VNI: 200}}})},
		{"local", follow(p, plan.Delta{UpsertLocal: []plan.Endpoint{{Name: "x", Network: "blue", VFIndex: -1}}})},
	} {
		got, want := classify(p, tc.cur), compare(p, tc.cur)
		if got.same != want.same || got.group != want.group || !slices.Equal(got.remotes, want.remotes) || !slices.Equal(got.floods, want.floods) ||
			!slices.Equal(got.joined, want.joined) || !slices.Equal(got.left, want.left) {
			t.Errorf("%s: classify = %+v, compare = %+v", tc.name, got, want)
		}
	}
}

// swapRules changes the lists in place as taking gone out and appending
// add would, whatever the order it leaves.
func TestSwapRules(t *testing.T) {
	type r struct{ k, v int }
	key := func(x r) int { return x.k }
	rnd := rand.New(rand.NewPCG(3, 4))
	var rules []r
	var states []string
	var at map[int]int
	want := map[int]int{}
	for i := range 50 {
		rules, states = append(rules, r{i, i}), append(states, fmt.Sprint(i))
		want[i] = i
	}
	for range 200 {
		var gone, add []r
		var addStates []string
		for range rnd.IntN(4) {
			k := rnd.IntN(60)
			gone = append(gone, r{k, -1})
			delete(want, k)
		}
		for range rnd.IntN(4) {
			k, v := rnd.IntN(60), rnd.IntN(1000)
			add, addStates = append(add, r{k, v}), append(addStates, fmt.Sprint(v))
			want[k] = v
		}
		swapRules(&rules, &states, &at, key, gone, add, addStates)
		got := map[int]int{}
		for i, x := range rules {
			if states[i] != fmt.Sprint(x.v) || at[x.k] != i {
				t.Fatalf("rule %v at %d: state %q, place %d", x, i, states[i], at[x.k])
			}
			got[x.k] = x.v
		}
		if !maps.Equal(got, want) || len(at) != len(rules) {
			t.Fatalf("rules %v, want %v", got, want)
		}
	}
}
