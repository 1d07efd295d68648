package plan

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// randomPlan returns a plan with items drawn from small name spaces, so
// that two random plans overlap.
func randomPlan(r *rand.Rand, rev int64) Plan {
	p := New("n1")
	p.Revision = rev
	p.UnderlayIP = netip.AddrFrom4([4]byte{192, 0, 2, byte(r.IntN(3))})
	for range r.IntN(5) {
		n := fmt.Sprintf("net%d", r.IntN(5))
		p.Networks[n] = Network{Name: n, VNI: uint32(r.IntN(3) + 1), MTU: 1450}
	}
	for range r.IntN(8) {
		e := fmt.Sprintf("ep%d", r.IntN(10))
		p.Local[e] = Endpoint{Name: e, Network: "net1", Node: "n1", MAC: fmt.Sprintf("02:00:00:00:00:%02x", r.IntN(3)), VFIndex: -1}
	}
	for range r.IntN(8) {
		e := fmt.Sprintf("rp%d", r.IntN(10))
		p.Remote[e] = Remote{Name: e, Network: "net1", Node: "n2", VTEP: netip.AddrFrom4([4]byte{192, 0, 2, byte(r.IntN(3) + 10)})}
	}
	return p
}

func TestDiffApplyMerge(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		a, b, c := randomPlan(r, 1), randomPlan(r, 2), randomPlan(r, 3)
		ab, bc := Diff(a, b), Diff(b, c)
		got := a.Clone()
		if err := got.Apply(ab); err != nil {
			t.Fatal(err)
		}
		if !got.Equal(b) || got.Revision != 2 {
			t.Fatalf("case %d: a+diff(a,b) != b", i)
		}
		m, err := Merge(ab, bc)
		if err != nil {
			t.Fatal(err)
		}
		got = a.Clone()
		if err := got.Apply(m); err != nil {
			t.Fatal(err)
		}
		if !got.Equal(c) || got.Revision != 3 {
			t.Fatalf("case %d: a+merge(diff(a,b),diff(b,c)) != c", i)
		}
		if Diff(c, c).Empty() != true {
			t.Fatalf("case %d: diff of a plan with itself is not empty", i)
		}
	}
}

func TestApplyRefusesWrongRevisionOrNode(t *testing.T) {
	p := New("n1")
	p.Revision = 5
	if err := p.Apply(Delta{Node: "n1", From: 4, Revision: 6}); err == nil {
		t.Fatal("delta from another revision applied")
	}
	if err := p.Apply(Delta{Node: "n2", From: 5, Revision: 6}); err == nil {
		t.Fatal("delta of another node applied")
	}
	if p.Revision != 5 {
		t.Fatalf("refused delta changed the revision to %d", p.Revision)
	}
	if _, err := Merge(Delta{Node: "n1", From: 1, Revision: 2}, Delta{Node: "n1", From: 3, Revision: 4}); err == nil {
		t.Fatal("merge of non-adjacent deltas accepted")
	}
}

// MergeAll of a chain of deltas has their effect, whether it merges in
// slices (few items) or in maps (past smallMerge).
func TestMergeAllChains(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 500 {
		n := 1 + r.IntN(40)
		plans := []Plan{randomPlan(r, 1)}
		var ds []Delta
		for k := range n {
			plans = append(plans, randomPlan(r, int64(k+2)))
			ds = append(ds, Diff(plans[k], plans[k+1]))
		}
		m, err := MergeAll(ds...)
		if err != nil {
			t.Fatal(err)
		}
		got := plans[0].Clone()
		if err := got.Apply(m); err != nil {
			t.Fatal(err)
		}
		if want := plans[n]; !got.Equal(want) || got.Revision != want.Revision {
			t.Fatalf("case %d: merge of %d deltas gives a different plan", i, n)
		}
	}
	if _, err := MergeAll(Delta{Node: "n1", From: 1, Revision: 2}, Delta{Node: "n1", From: 3, Revision: 4}); err == nil {
		t.Fatal("deltas 1->2 and 3->4 merged")
	}
}
