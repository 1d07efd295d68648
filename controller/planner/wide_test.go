package planner

import (
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// joinWide registers n nodes, then has each join one network ("pods")
// with one endpoint, one Update per endpoint as the controller's watch
// applies them when the endpoints are created one by one. It returns the
// planner and the heap it holds (after a GC).
func joinWide(tb testing.TB, n int) (*Planner, uint64) {
	tb.Helper()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	s := State{Networks: []plan.Network{{Name: "pods", VNI: 1, MTU: 1450}},
		Subnets: []plan.Subnet{{Name: "pods-v4", Network: "pods", CIDR: netip.MustParsePrefix("198.19.0.0/16")}}}
	for i := range n {
		s.Nodes = append(s.Nodes, plan.Node{Name: fmt.Sprintf("node-%d", i), Mode: plan.ModeSoftware,
			UnderlayIP: netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})})
	}
	p := newPlanner()
	p.Load(1, s)
	for i := range n {
		e := plan.Endpoint{Name: fmt.Sprintf("ep-%d", i), Network: "pods", Node: fmt.Sprintf("node-%d", i), Kind: plan.KindVeth,
			MAC: fmt.Sprintf("02:00:00:00:%02x:%02x", i>>8, i&0xff), VFIndex: -1,
			IPs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}), 16)}}
		if got := p.Advance(int64(i+2), []Change{{Endpoint: &e}}); got != i+1 {
			tb.Fatalf("endpoint %d: %d deltas, want %d", i, got, i+1)
		}
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(p)
	return p, after.HeapAlloc - before.HeapAlloc
}

// TestWideNetworkSharesLists: on a network every node has joined, every
// node's stored plan and its last delta hold the network's one VTEP list
// (its own VTEP marked, not left out of a copy), and the plan as served
// has the list without the node's own.
func TestWideNetworkSharesLists(t *testing.T) {
	const n = 40
	p, _ := joinWide(t, n)
	first := p.plans["node-0"].Networks["pods"]
	if len(first.FloodVTEPs) != n || len(first.HostPortVTEPs) != n || len(first.Subnets) != 1 {
		t.Fatalf("node-0's network: %+v", first)
	}
	for i := range n {
		name := fmt.Sprintf("node-%d", i)
		w := p.plans[name].Networks["pods"]
		if &w.FloodVTEPs[0] != &first.FloodVTEPs[0] || &w.HostPortVTEPs[0] != &first.HostPortVTEPs[0] || &w.Subnets[0] != &first.Subnets[0] {
			t.Fatalf("%s's network holds lists of its own", name)
		}
		l := p.dlog[name].deltas()
		if last := l[len(l)-1]; len(last.UpsertNetworks) != 1 || &last.UpsertNetworks[0].FloodVTEPs[0] != &first.FloodVTEPs[0] {
			t.Fatalf("%s's last delta %+v does not share the network's list", name, last)
		}
		served := p.Plan(name).Networks["pods"]
		own := netip.AddrFrom4([4]byte{198, 18, 0, byte(i)})
		if served.Own.IsValid() || len(served.FloodVTEPs) != n-1 || slices.Contains(served.FloodVTEPs, own) ||
			len(served.HostPortVTEPs) != n-1 || slices.Contains(served.HostPortVTEPs, own) {
			t.Fatalf("%s's plan: flood %v, host ports %v, own %v", name, served.FloodVTEPs, served.HostPortVTEPs, served.Own)
		}
	}
}

// TestWideNetworkMemoryLinear: the planner's heap per node of a network
// every node joins one by one does not grow with the node count (it did
// when every node's plan and delta log held a flood list of its own, one
// per join: N deltas of N VTEPs per node).
func TestWideNetworkMemoryLinear(t *testing.T) {
	_, small := joinWide(t, 300)
	_, large := joinWide(t, 600)
	perSmall, perLarge := float64(small)/300, float64(large)/600
	t.Logf("heap per node: %.0f bytes at 300 nodes, %.0f at 600", perSmall, perLarge)
	if perLarge > 1.5*perSmall {
		t.Fatalf("heap per node grows with the nodes: %.0f bytes at 300 nodes, %.0f at 600", perSmall, perLarge)
	}
}

// BenchmarkWideJoins is TestWideNetworkMemoryLinear's joins at 1,000 and
// 2,000 nodes: the planner's heap per node, and the time of the joins.
func BenchmarkWideJoins(b *testing.B) {
	for _, n := range []int{1000, 2000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var heap uint64
			for b.Loop() {
				_, heap = joinWide(b, n)
			}
			b.ReportMetric(float64(heap)/float64(n), "heap-bytes/node")
		})
	}
}

// TestWideJoinsCompareByDifference: nodes registered, then a network and
// its subnet, then one endpoint per node, each its own Update (as the
// controller applies them from the store): every member's network is
// compared with the new lists by their difference (sameNetwork), never
// by a walk of its flood list, and every plan equals a full build.
func TestWideJoinsCompareByDifference(t *testing.T) {
	const n = 100
	p := newPlanner()
	var s State
	p.Load(1, s)
	rev := int64(1)
	advance := func(c Change) {
		rev++
		p.Advance(rev, []Change{c})
		s = applyState(s, []Change{c})
	}
	for i := range n {
		advance(Change{Node: &plan.Node{Name: fmt.Sprintf("node-%d", i), Mode: plan.ModeSoftware,
			UnderlayIP: netip.AddrFrom4([4]byte{198, 18, 0, byte(i)})}})
	}
	advance(Change{Network: &plan.Network{Name: "pods", VNI: 1, MTU: 1450}})
	advance(Change{Subnet: &plan.Subnet{Name: "pods-v4", Network: "pods", CIDR: netip.MustParsePrefix("198.19.0.0/16")}})
	for i := range n {
		advance(Change{Endpoint: &plan.Endpoint{Name: fmt.Sprintf("ep-%d", i), Network: "pods", Node: fmt.Sprintf("node-%d", i),
			Kind: plan.KindVeth, MAC: fmt.Sprintf("02:00:00:00:00:%02x", i), VFIndex: -1,
			IPs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, 0, byte(i)}), 16)}}})
	}
	if p.walked != 0 {
		t.Fatalf("%d networks compared by walking their VTEP lists", p.walked)
	}
	for i := range n {
		name := fmt.Sprintf("node-%d", i)
		if got, want := p.Plan(name), Build(s, name); !got.Equal(want) {
			t.Fatalf("%s: incremental %s, full build %s", name, summary(got), summary(want))
		}
	}
}
