package planner

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// TestHostMembers: a node whose datapath gives host ports is a member of
// every network that routes out (snat, routed), also with no endpoint on
// it: it holds the network and its remote endpoints, the others list it
// in HostPortVTEPs, and nobody floods to it. Not of a none network, and
// not a node without host ports (no mode, a dpu-host).
func TestHostMembers(t *testing.T) {
	mode := func(n plan.Node, m string) plan.Node { n.Mode = m; return n }
	s := State{
		Networks: []plan.Network{{Name: "pods", VNI: 1, Egress: plan.EgressSNAT}, {Name: "tenant", VNI: 2}},
		Nodes: []plan.Node{mode(node("a", 1), plan.ModeSoftware), mode(node("b", 2), plan.ModeSoftware),
			mode(node("cp", 3), plan.ModeSoftware), mode(node("o", 4), plan.ModeOffload), node("plain", 5)},
		Endpoints: []plan.Endpoint{ep("p1", "pods", "a", 1), ep("p2", "pods", "b", 2), ep("t1", "tenant", "a", 3), ep("t2", "tenant", "b", 4)},
	}
	p := newPlanner()
	p.Load(1, s)
	for _, c := range []struct{ node, want string }{
		{"cp", "ul=192.0.2.3 nets=[pods[192.0.2.1 192.0.2.2]] local=[] remote=[p1@192.0.2.1 p2@192.0.2.2]"},
		{"o", "ul=192.0.2.4 nets=[pods[192.0.2.1 192.0.2.2]] local=[] remote=[p1@192.0.2.1 p2@192.0.2.2]"},
		{"plain", "ul=192.0.2.5 nets=[] local=[] remote=[]"},
		{"a", "ul=192.0.2.1 nets=[pods[192.0.2.2] tenant[192.0.2.2]] local=[p1 t1] remote=[p2@192.0.2.2 t2@192.0.2.2]"},
	} {
		if got := summary(p.Plan(c.node)); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.node, got, c.want)
		}
	}
	if h := p.Plan("a").Networks["pods"].HostPortVTEPs; !slices.Equal(h, addrs(2, 3, 4)) {
		t.Errorf("a's pods: host ports %v, want b, cp and o", h)
	}
	if h := p.Plan("cp").Networks["pods"].HostPortVTEPs; !slices.Equal(h, addrs(1, 2, 4)) {
		t.Errorf("cp's pods: host ports %v, want a, b and o", h)
	}
	// cp gets an endpoint: now flooded to; and loses it: not any more,
	// still a host member. Each step equals a full build.
	steps := [][]Change{
		{{Endpoint: ptr(ep("p3", "pods", "cp", 5))}},
		{{Endpoint: ptr(ep("p3", "pods", "cp", 5)), Delete: true}},
		{{Node: ptr(node("cp", 3))}}, // no mode any more: not a host member
		{{Node: ptr(mode(node("cp", 3), plan.ModeSoftware))}},
		{{Node: ptr(node("cp", 3)), Delete: true}},
	}
	floods := [][]netip.Addr{addrs(2, 3), addrs(2), addrs(2), addrs(2), addrs(2)}
	hosts := [][]netip.Addr{addrs(2, 3, 4), addrs(2, 3, 4), addrs(2, 4), addrs(2, 3, 4), addrs(2, 4)}
	for i, cs := range steps {
		p.Update(int64(i+2), cs)
		s = applyState(s, cs)
		for _, n := range []string{"a", "b", "cp", "o", "plain"} {
			if b := Build(s, n); !p.Plan(n).Equal(b) {
				t.Fatalf("step %d: %s incremental %s, full %s", i, n, summary(p.Plan(n)), summary(b))
			}
		}
		x := p.Plan("a").Networks["pods"]
		if !slices.Equal(x.FloodVTEPs, floods[i]) || !slices.Equal(x.HostPortVTEPs, hosts[i]) {
			t.Errorf("step %d: a's pods: flood %v host ports %v, want %v %v", i, x.FloodVTEPs, x.HostPortVTEPs, floods[i], hosts[i])
		}
	}
}

// addrs is 192.0.2.L for each L: nodes' underlay addresses (node).
func addrs(last ...byte) []netip.Addr {
	var out []netip.Addr
	for _, l := range last {
		out = append(out, netip.AddrFrom4([4]byte{192, 0, 2, l}))
	}
	return out
}

// TestHostAddrs: a network's host addresses are those of its members
// with host ports that registered one (Node.HostIP), the node's own
// included, by VTEP; a node changing or dropping its host address, or
// leaving, changes every member's network item, as a full build does.
func TestHostAddrs(t *testing.T) {
	mode := func(n plan.Node, m string) plan.Node { n.Mode = m; return n }
	host := func(n plan.Node, last byte) plan.Node {
		n.HostIP = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: last})
		return n
	}
	ha := func(pairs ...byte) []plan.HostAddr {
		var out []plan.HostAddr
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, plan.HostAddr{VTEP: addrs(pairs[i])[0], IP: host(plan.Node{}, pairs[i+1]).HostIP})
		}
		return out
	}
	s := State{
		Networks: []plan.Network{{Name: "pods", VNI: 1, Egress: plan.EgressSNAT}},
		Nodes: []plan.Node{host(mode(node("a", 1), plan.ModeSoftware), 11), mode(node("b", 2), plan.ModeSoftware),
			host(mode(node("cp", 3), plan.ModeOffload), 13), host(node("plain", 5), 15)},
		Endpoints: []plan.Endpoint{ep("p1", "pods", "a", 1), ep("p2", "pods", "b", 2), ep("p5", "pods", "plain", 5)},
	}
	p := newPlanner()
	p.Load(1, s)
	for _, n := range []string{"a", "b", "cp", "plain"} {
		if got := p.Plan(n).Networks["pods"].HostAddrs; !slices.Equal(got, ha(1, 11, 3, 13)) {
			t.Errorf("%s's pods: host addresses %v, want a's and cp's", n, got)
		}
	}
	steps := []struct {
		cs   []Change
		want []plan.HostAddr
	}{
		{[]Change{{Node: ptr(host(mode(node("b", 2), plan.ModeSoftware), 12))}}, ha(1, 11, 2, 12, 3, 13)},
		{[]Change{{Node: ptr(host(mode(node("a", 1), plan.ModeSoftware), 21))}}, ha(1, 21, 2, 12, 3, 13)},
		{[]Change{{Node: ptr(mode(node("cp", 3), plan.ModeOffload))}}, ha(1, 21, 2, 12)},
		{[]Change{{Node: ptr(node("b", 2)), Delete: true}}, ha(1, 21)},
	}
	for i, st := range steps {
		ds := p.Update(int64(i+2), st.cs)
		s = applyState(s, st.cs)
		if j := slices.IndexFunc(ds, func(d plan.Delta) bool { return d.Node == "plain" }); j < 0 || len(ds[j].UpsertNetworks) != 1 {
			t.Fatalf("step %d: no network delta for plain: %+v", i, ds)
		}
		for _, n := range []string{"a", "cp", "plain"} {
			if got := p.Plan(n).Networks["pods"].HostAddrs; !slices.Equal(got, st.want) {
				t.Errorf("step %d: %s's pods: host addresses %v, want %v", i, n, got, st.want)
			}
			if b := Build(s, n); !p.Plan(n).Equal(b) {
				t.Fatalf("step %d: %s incremental %+v, full %+v", i, n, p.Plan(n).Networks, b.Networks)
			}
		}
	}
}
