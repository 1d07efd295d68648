package planpb

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

func samplePlan() plan.Plan {
	p := plan.New("n1")
	p.Revision = 42
	p.UnderlayIP = netip.MustParseAddr("192.0.2.1")
	p.Networks["blue"] = plan.Network{Name: "blue", VNI: 100, MTU: 1450,
		Subnets:    []plan.Subnet{{Name: "blue-v4", Network: "blue", CIDR: netip.MustParsePrefix("198.51.100.0/24"), Gateway: netip.MustParseAddr("198.51.100.1")}},
		FloodVTEPs: []netip.Addr{netip.MustParseAddr("192.0.2.2")}}
	p.Local["a"] = plan.Endpoint{Name: "a", Network: "blue", Node: "n1", Kind: "veth", MAC: "02:00:00:00:00:01",
		IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.2/24")}, Labels: map[string]string{"app": "x"}, VFIndex: -1}
	p.Local["v"] = plan.Endpoint{Name: "v", Network: "blue", Node: "n1", Kind: "vf", MAC: "02:00:00:00:00:03", PF: "eth0", VFIndex: 3}
	p.Remote["b"] = plan.Remote{Name: "b", Network: "blue", Node: "n2", VTEP: netip.MustParseAddr("192.0.2.2"), MAC: "02:00:00:00:00:02",
		IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.3/24")}}
	return p
}

func TestPlanRoundTrip(t *testing.T) {
	p := samplePlan()
	back, err := Plan(PlanPB(p))
	if err != nil {
		t.Fatal(err)
	}
	if !back.Equal(p) || back.Revision != p.Revision {
		t.Fatalf("round trip changed the plan:\n%+v\n%+v", p, back)
	}
}

func TestDeltaRoundTrip(t *testing.T) {
	old := samplePlan()
	cur := old.Clone()
	cur.Revision = 50
	delete(cur.Remote, "b")
	ip := netip.MustParseAddr("192.0.2.9")
	cur.UnderlayIP = ip
	d := plan.Diff(old, cur)
	back, err := Delta(DeltaPB(d))
	if err != nil {
		t.Fatal(err)
	}
	next := old.Clone()
	if err := next.Apply(back); err != nil {
		t.Fatal(err)
	}
	if !next.Equal(cur) || next.Revision != 50 {
		t.Fatalf("applying the converted delta gave %+v, want %+v", next, cur)
	}
}

func TestBadPlansNameTheField(t *testing.T) {
	tests := []struct {
		d    *skiffv1.PlanDelta
		want string
	}{
		{&skiffv1.PlanDelta{UpsertNetworks: []*skiffv1.PlanNetwork{{Name: "x", Vni: 0}}}, "vni"},
		{&skiffv1.PlanDelta{UpsertNetworks: []*skiffv1.PlanNetwork{{Name: "x", Vni: 5, FloodVteps: []string{"nope"}}}}, "floodVteps"},
		{&skiffv1.PlanDelta{UpsertRemote: []*skiffv1.RemoteEndpoint{{Name: "r", Vtep: "bad", Mac: "02:00:00:00:00:01"}}}, "vtep"},
		{&skiffv1.PlanDelta{UpsertRemote: []*skiffv1.RemoteEndpoint{{Name: "r", Vtep: "192.0.2.1", Mac: "zz"}}}, "mac"},
		{&skiffv1.PlanDelta{UpsertLocal: []*skiffv1.Endpoint{{Name: "l", Ips: []string{"1.2.3"}}}}, "ips"},
	}
	for _, tc := range tests {
		_, err := Delta(tc.d)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error naming %s", tc.d, err, tc.want)
		}
	}
}

// A member change crosses the wire as it was, and a malformed one is
// refused naming the field.
func TestGroupChange(t *testing.T) {
	a := netip.MustParseAddr
	d := plan.Delta{Node: "n1", From: 1, Revision: 2, ChangeGroups: []plan.GroupChange{
		{Name: "g", Add: []netip.Addr{a("198.51.100.1"), a("2001:db8::1")}, Remove: []netip.Addr{a("198.51.100.9")}}}}
	back, err := Delta(DeltaPB(d))
	if err != nil {
		t.Fatal(err)
	}
	if len(back.ChangeGroups) != 1 || !back.ChangeGroups[0].Equal(d.ChangeGroups[0]) {
		t.Fatalf("round trip: %+v, want %+v", back.ChangeGroups, d.ChangeGroups)
	}
	for _, tc := range []struct {
		c    *skiffv1.GroupChange
		want string
	}{
		{&skiffv1.GroupChange{Name: "g", Add: []string{"198.51.100.1", "198.51.100.300"}}, `delta: changeGroups[0]: group "g": add[1]: `},
		{&skiffv1.GroupChange{Name: "g", Remove: []string{"x"}}, `delta: changeGroups[0]: group "g": remove[0]: `},
		{&skiffv1.GroupChange{Name: "g", Add: []string{"198.51.100.1", "198.51.100.1"}}, `group "g": add: 198.51.100.1 listed twice`},
		{&skiffv1.GroupChange{Add: []string{"198.51.100.1"}}, `delta: changeGroups[0]: name: empty`},
		{&skiffv1.GroupChange{Name: "g"}, `group "g": add, remove: both empty`},
	} {
		_, err := Delta(&skiffv1.PlanDelta{Node: "n1", FromRevision: 1, Revision: 2, ChangeGroups: []*skiffv1.GroupChange{tc.c}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.c, err, tc.want)
		}
	}
}

// TestNetworkOwnNotSent: a network whose lists hold the node's own VTEP
// (Own, as the planner shares them between nodes) goes out without it,
// and comes back equal, without Own.
func TestNetworkOwnNotSent(t *testing.T) {
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	n := plan.Network{Name: "blue", VNI: 100, MTU: 1450, Own: a("192.0.2.2"),
		FloodVTEPs: []netip.Addr{a("192.0.2.1"), a("192.0.2.2"), a("192.0.2.3")}, HostPortVTEPs: []netip.Addr{a("192.0.2.2"), a("192.0.2.3")}}
	pb := NetworkPB(n)
	if strings.Join(pb.GetFloodVteps(), " ") != "192.0.2.1 192.0.2.3" || strings.Join(pb.GetHostPortVteps(), " ") != "192.0.2.3" {
		t.Fatalf("sent flood %v, host ports %v", pb.GetFloodVteps(), pb.GetHostPortVteps())
	}
	back, err := PlanNetwork(pb)
	if err != nil {
		t.Fatal(err)
	}
	if back.Own.IsValid() || !back.Equal(n) || !back.Equal(n.Resolved()) {
		t.Fatalf("round trip: %+v, sent %+v", back, n)
	}
}
