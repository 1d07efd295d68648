package planner

import (
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// clusterState is 1,000 nodes with 100 endpoints each over 500 networks.
// Tenants are localized, as they are in practice: node i has 20 endpoints
// on each of 5 networks, (i + 200k) mod 500 for k = 0..4, so every network
// spans 10 nodes and holds 200 endpoints, and every plan has 100 local and
// 900 remote endpoints.
func clusterState() State {
	var s State
	for w := range 500 {
		s.Networks = append(s.Networks, plan.Network{Name: fmt.Sprintf("net-%d", w), VNI: uint32(w + 1), MTU: 1450})
		s.Subnets = append(s.Subnets, plan.Subnet{Name: fmt.Sprintf("net-%d-v4", w), Network: fmt.Sprintf("net-%d", w),
			CIDR: netip.MustParsePrefix("198.51.100.0/24")})
	}
	for i := range 1000 {
		name := fmt.Sprintf("node-%d", i)
		s.Nodes = append(s.Nodes, plan.Node{Name: name, UnderlayIP: netip.AddrFrom4([4]byte{192, 0, byte(2 + i/250), byte(i % 250)})})
		for j := range 100 {
			w := (i + 200*(j%5)) % 500
			s.Endpoints = append(s.Endpoints, plan.Endpoint{
				Name: fmt.Sprintf("ep-%d-%d", i, j), Network: fmt.Sprintf("net-%d", w), Node: name, Kind: plan.KindVeth,
				MAC: fmt.Sprintf("02:00:%02x:%02x:%02x:%02x", i>>8, i&0xff, j, w&0xff),
				IPs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(j)}), 24)}, VFIndex: -1,
			})
		}
	}
	return s
}

func BenchmarkFullBuild(b *testing.B) {
	s := clusterState()
	b.ReportAllocs()
	var (
		items int
		p     *Planner
	)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for b.Loop() {
		p = New(slog.New(slog.DiscardHandler), Options{})
		p.Load(1, s)
	}
	b.StopTimer()
	for _, pl := range p.plans {
		items += len(pl.Local) + len(pl.Remote) + len(pl.Networks)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(items), "plan-items")
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "planner-heap-MiB")
	runtime.KeepAlive(p)
}

// BenchmarkEndpointAdd measures one endpoint added (then deleted, to keep
// the state steady) to the 1,000-node cluster: the deltas for every node
// it concerns.
func BenchmarkEndpointAdd(b *testing.B) {
	p := New(slog.New(slog.DiscardHandler), Options{})
	p.Load(1, clusterState())
	rev := int64(1)
	touched := 0
	e := plan.Endpoint{Name: "new", Network: "net-7", Node: "node-7", Kind: plan.KindVeth, MAC: "02:ff:00:00:00:01",
		IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.250/24")}, VFIndex: -1}
	b.ReportAllocs()
	for b.Loop() {
		rev++
		touched = len(p.Update(rev, []Change{{Endpoint: &e}}))
		rev++
		p.Update(rev, []Change{{Endpoint: &e, Delete: true}})
	}
	b.ReportMetric(float64(touched), "nodes-touched")
}
