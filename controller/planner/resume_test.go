package planner

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// asStored returns change c as the store's history gives it: the stored
// version of the object, deleted, then the new one (nothing for the
// deletion of an object that does not exist).
func asStored(s State, c Change) []Change {
	var out []Change
	switch {
	case c.Endpoint != nil:
		for _, e := range s.Endpoints {
			if e.Name == c.Endpoint.Name {
				out = append(out, Change{Endpoint: &e, Delete: true})
			}
		}
	case c.Node != nil:
		for _, n := range s.Nodes {
			if n.Name == c.Node.Name {
				out = append(out, Change{Node: &n, Delete: true})
			}
		}
	case c.Subnet != nil:
		for _, n := range s.Subnets {
			if n.Name == c.Subnet.Name {
				out = append(out, Change{Subnet: &n, Delete: true})
			}
		}
	case c.Network != nil:
		out = append(out, Change{Network: c.Network, Delete: true})
	default:
		return []Change{c}
	}
	if !c.Delete {
		out = append(out, c)
	}
	return out
}

// randomChange makes a change of an endpoint (mostly), a node, a network or
// a subnet; a policy or namespace one with policies set.
func randomChange(r *rand.Rand, nodes, nets []string, policies bool) Change {
	switch k := r.IntN(100); {
	case policies && k == 0:
		pol := randomPolicies[r.IntN(len(randomPolicies))]
		return Change{Policy: &pol, Delete: r.IntN(3) == 0}
	case k < 94:
		// Mostly local: network i on nodes 2i and 2i+1.
		i := r.IntN(len(nets))
		n := nodes[(2*i+r.IntN(2))%len(nodes)]
		if r.IntN(20) == 0 {
			n = nodes[r.IntN(len(nodes))]
		}
		e := ep(fmt.Sprintf("e%d", r.IntN(100)), nets[i], n, byte(r.IntN(200)))
		e.Namespace, e.Labels = []string{"p", "q"}[r.IntN(2)], map[string]string{"app": []string{"web", "db"}[r.IntN(2)]}
		return Change{Endpoint: &e, Delete: r.IntN(3) == 0}
	case k < 96:
		n := node(nodes[r.IntN(len(nodes))], byte(r.IntN(30)+1))
		return Change{Node: &n}
	case k < 98:
		n := plan.Network{Name: nets[r.IntN(len(nets))], VNI: uint32(r.IntN(5) + 1), MTU: uint32(1400 + r.IntN(3))}
		return Change{Network: &n}
	default:
		w := nets[r.IntN(len(nets))]
		s := plan.Subnet{Name: fmt.Sprintf("%s-s%d", w, r.IntN(2)), Network: w, CIDR: netip.MustParsePrefix("198.51.100.0/24")}
		return Change{Subnet: &s, Delete: r.IntN(2) == 0}
	}
}

// TestResumeAfterLoad checks that an agent holding the plan of any
// revision since the history's floor resumes, after the planner loads, to
// exactly its current plan; that nodes with nothing changed since their
// revision do so without the history rebuild (empty delta, or the delta
// log from the load), and that the others still get the rebuild.
func TestResumeAfterLoad(t *testing.T) {
	for _, policies := range []bool{false, true} {
		t.Run(fmt.Sprintf("policies=%v", policies), func(t *testing.T) {
			fast, slow := resumeAfterLoad(t, policies)
			t.Logf("resumes without a rebuild: %d, with: %d", fast, slow)
			if !policies && (fast < 50 || slow == 0) {
				t.Errorf("resumes without a rebuild: %d, with: %d; want both", fast, slow)
			}
		})
	}
}

// resumeAfterLoad plays random changes, loads a planner in the middle with
// what changed since a floor, and resumes every node from revisions around
// the floor and the load.
func resumeAfterLoad(t *testing.T, policies bool) (fast, slow int) {
	r := rand.New(rand.NewPCG(3, 5))
	var nodes, nets []string
	for i := range 24 {
		nodes = append(nodes, fmt.Sprintf("n%d", i))
	}
	for i := range 12 {
		nets = append(nets, fmt.Sprintf("net%d", i))
	}
	var state State
	for i, w := range nets {
		state.Networks = append(state.Networks, plan.Network{Name: w, VNI: uint32(i + 1)})
	}
	states := map[int64]State{1: state}
	const floor, load, after = 50, 400, 410
	var rec Recent
	rec.Floor = floor
	for rev := int64(2); rev <= after; rev++ {
		// Policies early only, so that later revisions can be quiet.
		c := randomChange(r, nodes, nets, policies && rev < 200)
		if rev > floor && rev <= load {
			rec.Add(rev, asStored(state, c))
		}
		state = applyState(state, []Change{c})
		states[rev] = state
	}
	historyCalls := 0
	p := New(slog.New(slog.DiscardHandler), Options{History: func(_ context.Context, n string, rev int64) (plan.Plan, error) {
		historyCalls++
		return Build(states[rev], n), nil
	}})
	p.Load(load, states[load])
	if !p.SetRecent(load, rec) {
		t.Fatal("SetRecent refused right after the load")
	}
	for rev := int64(load + 1); rev <= after; rev++ {
		prev, cur := states[rev-1], states[rev]
		p.Update(rev, diffStates(prev, cur))
	}
	if p.SetRecent(load, rec) {
		t.Error("SetRecent taken after updates")
	}
	for _, n := range nodes {
		haves := []int64{floor - 3, floor - 1, floor, floor + 1, floor + 2}
		for have := int64(load - 60); have <= after; have++ {
			haves = append(haves, have)
		}
		for _, have := range haves {
			held := Build(states[have], n)
			held.Revision = have
			calls := historyCalls
			s, err := p.Subscribe(context.Background(), n, have)
			if err != nil {
				t.Fatal(err)
			}
			u := next(t, s)
			s.Close()
			if u.Delta == nil {
				t.Fatalf("%s from %d: a snapshot", n, have)
			}
			if err := held.Apply(*u.Delta); err != nil {
				t.Fatalf("%s from %d: %v", n, have, err)
			}
			if want := p.Plan(n); !held.Equal(want) || held.Revision != want.Revision {
				t.Fatalf("%s from %d: resumed to\n%s (rev %d)\nwant\n%s (rev %d)", n, have, summary(held), held.Revision, summary(want), want.Revision)
			}
			if historyCalls == calls {
				fast++
				if have < floor {
					t.Errorf("%s from %d: resumed without the history below the floor", n, have)
				}
			} else {
				slow++
			}
		}
	}
	return fast, slow
}

// diffStates returns changes that turn a into b (endpoints, nodes,
// networks, subnets; policies are not changed after the load here).
func diffStates(a, b State) []Change {
	var out []Change
	for _, e := range b.Endpoints {
		out = append(out, Change{Endpoint: &e})
	}
	for _, e := range a.Endpoints {
		if !hasEndpoint(b, e.Name) {
			out = append(out, Change{Endpoint: &e, Delete: true})
		}
	}
	for _, n := range b.Nodes {
		out = append(out, Change{Node: &n})
	}
	for _, n := range b.Networks {
		out = append(out, Change{Network: &n})
	}
	for _, s := range b.Subnets {
		out = append(out, Change{Subnet: &s})
	}
	for _, s := range a.Subnets {
		found := false
		for _, x := range b.Subnets {
			found = found || x.Name == s.Name
		}
		if !found {
			out = append(out, Change{Subnet: &s, Delete: true})
		}
	}
	return out
}

func hasEndpoint(s State, name string) bool {
	for _, e := range s.Endpoints {
		if e.Name == name {
			return true
		}
	}
	return false
}

// TestResumeAfterLoadRules checks each dependency SetRecent counts: after a
// change of it between the agent's revision (7) and the load (10), the
// resume needs the rebuild; nodes that do not depend on it resume at once.
func TestResumeAfterLoadRules(t *testing.T) {
	b1 := ep("b1", "blue", "n1", 1)
	b1.Namespace, b1.Labels = "p", map[string]string{"app": "db"}
	r9 := ep("r9", "red", "n3", 9)
	n3 := node("n3", 33)
	pol := randomPolicies[0]
	cases := []struct {
		name     string
		floor    int64
		change   *Change // at revision 8
		policies bool
		rebuild  []string // nodes resuming from 7 that need the rebuild
	}{
		{name: "nothing changed", floor: 5},
		{name: "below the floor", floor: 8, rebuild: []string{"n1", "n2", "n3"}},
		{name: "endpoint on red", floor: 5, change: &Change{Endpoint: &r9}, rebuild: []string{"n2", "n3"}},
		{name: "red's subnet", floor: 5, change: &Change{Subnet: &plan.Subnet{Name: "red-v4", Network: "red"}}, rebuild: []string{"n2", "n3"}},
		{name: "network blue", floor: 5, change: &Change{Network: &plan.Network{Name: "blue"}}, rebuild: []string{"n1", "n2"}},
		{name: "node n3 (a VTEP on red)", floor: 5, change: &Change{Node: &n3}, rebuild: []string{"n2", "n3"}},
		{name: "a policy", floor: 5, change: &Change{Policy: &pol}, rebuild: []string{"n1", "n2", "n3"}},
		{name: "a namespace", floor: 5, change: &Change{Namespace: &NamespaceLabels{Name: "p"}}, rebuild: []string{"n1", "n2", "n3"}},
		{name: "endpoint on red, n1 holds policies", floor: 5, policies: true, change: &Change{Endpoint: &r9}, rebuild: []string{"n1", "n2", "n3"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := base()
			if c.policies {
				st.Endpoints[0] = b1
				st.Policies = randomPolicies
			}
			calls := 0
			p := New(slog.New(slog.DiscardHandler), Options{History: func(_ context.Context, n string, _ int64) (plan.Plan, error) {
				calls++
				return Build(st, n), nil
			}})
			p.Load(10, st)
			if c.policies && len(p.Plan("n1").Policies) == 0 {
				t.Fatal("n1's plan holds no policy")
			}
			rec := Recent{Floor: c.floor}
			if c.change != nil {
				rec.Add(8, []Change{*c.change})
			}
			p.SetRecent(10, rec)
			for _, n := range []string{"n1", "n2", "n3"} {
				before := calls
				s, err := p.Subscribe(context.Background(), n, 7)
				if err != nil {
					t.Fatal(err)
				}
				u := next(t, s)
				s.Close()
				if u.Delta == nil || u.Delta.From != 7 || u.Delta.Revision != 10 {
					t.Fatalf("%s: first update %+v, want a delta 7->10", n, u)
				}
				if rebuilt, want := calls > before, slices.Contains(c.rebuild, n); rebuilt != want {
					t.Errorf("%s: rebuilt %v, want %v", n, rebuilt, want)
				}
			}
		})
	}
}
