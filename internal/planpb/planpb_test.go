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
