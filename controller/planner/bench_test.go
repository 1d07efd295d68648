package planner

import (
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/controller/policy"
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
	for name, pl := range p.plans {
		items += len(pl.Local) + len(p.view(name, pl).Remote) + len(pl.Networks)
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

// policyClusterState is clusterState with every endpoint in one of 100
// namespaces (by network) and labelled with one of 20 apps, and 10,000
// policies: 100 per namespace, each isolating one app and allowing two
// apps of its namespace and one app of every namespace of a team.
func policyClusterState(b *testing.B) State {
	return withPolicies(b, clusterState(), func(e plan.Endpoint, _ int) int {
		var w int
		_, _ = fmt.Sscanf(e.Network, "net-%d", &w)
		return w % 100
	})
}

// withPolicies puts every endpoint of s in namespace ns<nsOf(e, i)> (0 to
// 99), labels it with one of 20 apps, and adds policyClusterState's 10,000
// policies.
func withPolicies(b *testing.B, s State, nsOf func(e plan.Endpoint, i int) int) State {
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		e.Namespace = fmt.Sprintf("ns%d", nsOf(*e, i))
		e.Labels = map[string]string{"app": fmt.Sprintf("app%d", (i/7)%20)}
	}
	for n := range 100 {
		s.Namespaces = append(s.Namespaces, NamespaceLabels{Name: fmt.Sprintf("ns%d", n), Labels: map[string]string{"team": fmt.Sprintf("t%d", n%10)}})
	}
	var y strings.Builder
	for n := range 100 {
		for j := range 100 {
			fmt.Fprintf(&y, `---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: p%d, namespace: ns%d}
spec:
  podSelector: {matchLabels: {app: app%d}}
  ingress:
  - from: [{podSelector: {matchLabels: {app: app%d}}}, {podSelector: {matchLabels: {app: app%d}}}, {namespaceSelector: {matchLabels: {team: t%d}}, podSelector: {matchLabels: {app: app%d}}}]
    ports: [{port: 80}, {protocol: UDP, port: 53}]
`, j, n, j%20, (j+1)%20, (j+2)%20, j%10, (j+3)%20)
		}
	}
	pols, err := policy.ParseYAML([]byte(y.String()))
	if err != nil {
		b.Fatal(err)
	}
	s.Policies = pols
	return s
}

// BenchmarkPolicyLoad builds every plan of the 1,000-node cluster with
// 10,000 policies over its 100,000 endpoints.
func BenchmarkPolicyLoad(b *testing.B) {
	s := policyClusterState(b)
	var p *Planner
	for b.Loop() {
		p = New(slog.New(slog.DiscardHandler), Options{})
		p.Load(1, s)
	}
	rules := 0
	for _, pl := range p.plans {
		rules += len(pl.Policies)
	}
	b.ReportMetric(float64(rules), "isolated-endpoints")
}

// BenchmarkPolicyLabelChange changes one endpoint's label in that
// cluster: the time to compute the deltas of every node concerned (its
// own, for its rules, and those holding a group it leaves or joins).
func BenchmarkPolicyLabelChange(b *testing.B) {
	s := policyClusterState(b)
	p := New(slog.New(slog.DiscardHandler), Options{})
	p.Load(1, s)
	e := s.Endpoints[4321]
	rev := int64(1)
	touched, groups := 0, 0
	for b.Loop() {
		rev++
		e.Labels = map[string]string{"app": fmt.Sprintf("app%d", rev%20)}
		ds := p.Update(rev, []Change{{Endpoint: &e}})
		touched = len(ds)
		groups = 0
		for _, d := range ds {
			groups += len(d.UpsertGroups)
		}
	}
	b.ReportMetric(float64(touched), "nodes-touched")
	b.ReportMetric(float64(groups), "group-upserts")
}

// wideState is the cluster-wide network: one network on 1,000 nodes with
// 30 endpoints each, so every plan holds 29,970 remote endpoints.
func wideState() State {
	s := State{Networks: []plan.Network{{Name: "pods", VNI: 1, MTU: 1450}}}
	for i := range 1000 {
		name := fmt.Sprintf("node-%d", i)
		s.Nodes = append(s.Nodes, plan.Node{Name: name, UnderlayIP: netip.AddrFrom4([4]byte{192, 0, byte(2 + i/250), byte(i % 250)})})
		for j := range 30 {
			s.Endpoints = append(s.Endpoints, plan.Endpoint{
				Name: fmt.Sprintf("ep-%d-%d", i, j), Network: "pods", Node: name, Kind: plan.KindVeth,
				MAC: fmt.Sprintf("02:00:%02x:%02x:%02x:00", i>>8, i&0xff, j),
				IPs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(i >> 2), byte(j + 30*(i&3))}), 16)}, VFIndex: -1,
			})
		}
	}
	return s
}

// BenchmarkWide loads the cluster-wide network (the planner's heap is
// reported by load), then measures one node's whole plan (what a snapshot
// or GetPlan materializes) and one endpoint added and deleted (1,000
// deltas each).
func BenchmarkWide(b *testing.B) {
	s := wideState()
	var p *Planner
	b.Run("load", func(b *testing.B) {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		for b.Loop() {
			p = New(slog.New(slog.DiscardHandler), Options{})
			p.Load(1, s)
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "planner-heap-MiB")
	})
	load := func() {
		if p == nil { // the load sub-benchmark was not selected
			p = New(slog.New(slog.DiscardHandler), Options{})
			p.Load(1, s)
		}
	}
	b.Run("plan", func(b *testing.B) {
		load()
		b.ReportAllocs()
		for b.Loop() {
			if pl := p.Plan("node-7"); len(pl.Remote) != 29970 {
				b.Fatalf("%d remote endpoints", len(pl.Remote))
			}
		}
	})
	e := s.Endpoints[0]
	e.Name, e.MAC = "new", "02:ff:00:00:00:01"
	b.Run("endpoint-add-delete", func(b *testing.B) {
		load()
		addDelete(b, p, e, 1000)
	})
}

// addDelete measures e added to p, then deleted: each addition must
// bring deltas to that many nodes.
func addDelete(b *testing.B, p *Planner, e plan.Endpoint, deltas int) {
	rev := p.rev
	b.ReportAllocs()
	for b.Loop() {
		rev++
		if n := p.Advance(rev, []Change{{Endpoint: &e}}); n != deltas {
			b.Fatalf("%d deltas, want %d", n, deltas)
		}
		rev++
		p.Advance(rev, []Change{{Endpoint: &e, Delete: true}})
	}
}

// BenchmarkWidePolicies is BenchmarkWide's endpoint added and deleted
// with 10,000 policies (withPolicies; endpoint i in namespace i mod 100):
// the controller's work per change in the scale harness's wide workload
// with --policies (every node holds every endpoint, and the groups its
// isolated endpoints' rules name).
func BenchmarkWidePolicies(b *testing.B) {
	s := withPolicies(b, wideState(), func(_ plan.Endpoint, i int) int { return i % 100 })
	p := New(slog.New(slog.DiscardHandler), Options{})
	p.Load(1, s)
	e := s.Endpoints[0]
	e.Name, e.MAC = "new", "02:ff:00:00:00:01"
	e.IPs = []netip.Prefix{netip.MustParsePrefix("198.19.255.250/16")}
	addDelete(b, p, e, 1000)
}
