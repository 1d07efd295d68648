package planner

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// The remote endpoints are one shared record per endpoint (remotes.go):
// what a caller does with one node's plan, and what one node's delta
// carries, must never show in another node's plan.
func TestSharedRemotesStayPerNode(t *testing.T) {
	p := newPlanner()
	p.Load(1, base())
	n1, n2 := p.Plan("n1"), p.Plan("n2")
	if got := summary(n1); got != "ul=192.0.2.1 nets=[blue[192.0.2.2]] local=[b1] remote=[b2@192.0.2.2]" {
		t.Fatalf("n1: %s", got)
	}

	// A caller's copy is its own: changing it changes no plan.
	n1.Remote["b1"] = plan.Remote{Name: "b1", Network: "blue", Node: "n1"}
	delete(n1.Remote, "b2")
	r := n2.Remote["b1"]
	r.VTEP = netip.MustParseAddr("203.0.113.9")
	n2.Remote["b1"] = r
	for _, n := range []string{"n1", "n2", "n3"} {
		if cur, want := p.Plan(n), Build(base(), n); !cur.Equal(want) {
			t.Fatalf("%s changed by a caller's copy:\n%s\nwant\n%s", n, summary(cur), summary(want))
		}
	}

	// An endpoint of n2 on blue: n1 (a member) gets it as remote, n2 as
	// local only, n3 (not on blue) nothing.
	e := ep("b5", "blue", "n2", 9)
	s := applyState(base(), []Change{{Endpoint: &e}})
	ds := p.Update(2, []Change{{Endpoint: &e}})
	got := map[string]plan.Delta{}
	for _, d := range ds {
		got[d.Node] = d
	}
	if d := got["n1"]; len(d.UpsertRemote) != 1 || d.UpsertRemote[0].Name != "b5" || len(d.UpsertLocal) != 0 {
		t.Fatalf("n1's delta: %+v", d)
	}
	if d := got["n2"]; len(d.UpsertLocal) != 1 || len(d.UpsertRemote) != 0 {
		t.Fatalf("n2's delta: %+v", d)
	}
	if _, ok := got["n3"]; ok {
		t.Fatalf("n3 got a delta: %+v", got["n3"])
	}
	// Changing a delta a consumer received changes no plan either (its
	// items' slices are shared and read-only, as plan.Clone says).
	got["n1"].UpsertRemote[0].VTEP = netip.MustParseAddr("203.0.113.9")
	for _, n := range []string{"n1", "n2", "n3"} {
		if cur, want := p.Plan(n), Build(s, n); !cur.Equal(want) {
			t.Fatalf("%s after the change:\n%s\nwant\n%s", n, summary(cur), summary(want))
		}
	}
	if _, ok := p.Plan("n2").Remote["b5"]; ok {
		t.Fatal("n2 holds its own endpoint as remote")
	}
}

// Several changes in one revision (a store transaction), endpoints moving
// between networks and nodes, nodes and networks deleted and made again:
// every plan, and every plan rebuilt from its deltas, equals a full build.
func TestRandomBatchesMatchFullBuild(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	nodes := []string{"a", "b", "c", "d"}
	nets := []string{"x", "y"}
	state := State{Networks: []plan.Network{{Name: "x", VNI: 1}, {Name: "y", VNI: 2}}}
	p := newPlanner()
	p.Load(1, state)
	held := map[string]plan.Plan{}
	for _, n := range nodes {
		held[n] = p.Plan(n)
	}
	for i := range 2000 {
		var batch []Change
		for range 1 + r.IntN(4) {
			var c Change
			switch k := r.IntN(10); {
			case k < 7:
				// Few names, so that the same endpoint changes network or
				// node, twice in a batch at times.
				e := ep(fmt.Sprintf("e%d", r.IntN(8)), nets[r.IntN(2)], nodes[r.IntN(4)], byte(r.IntN(200)))
				c = Change{Endpoint: &e, Delete: r.IntN(4) == 0}
			case k < 9:
				n := node(nodes[r.IntN(4)], byte(r.IntN(3)+1))
				c = Change{Node: &n, Delete: r.IntN(3) == 0}
			default:
				n := plan.Network{Name: nets[r.IntN(2)], VNI: uint32(r.IntN(3) + 1)}
				c = Change{Network: &n, Delete: r.IntN(3) == 0}
			}
			batch = append(batch, c)
		}
		for _, d := range p.Update(int64(i+2), batch) {
			h := held[d.Node].Clone()
			if err := h.Apply(d); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			held[d.Node] = h
		}
		state = applyState(state, batch)
		for _, n := range nodes {
			want := Build(state, n)
			if cur := p.Plan(n); !cur.Equal(want) {
				t.Fatalf("step %d: %s incremental\n%s\nwant\n%s", i, n, summary(cur), summary(want))
			}
			if !held[n].Equal(want) {
				t.Fatalf("step %d: %s rebuilt from deltas\n%s\nwant\n%s", i, n, summary(held[n]), summary(want))
			}
		}
	}
}
