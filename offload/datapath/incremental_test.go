package datapath

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
)

func TestRemotesOnly(t *testing.T) {
	p := plan.New("n1")
	p.Networks["blue"] = plan.Network{Name: "blue", VNI: 100}
	p.Remote["r1"] = plan.Remote{Name: "r1", Network: "blue", VTEP: netip.MustParseAddr("192.0.2.2"), MAC: "02:00:00:00:00:01"}
	p.Remote["r2"] = plan.Remote{Name: "r2", Network: "blue", VTEP: netip.MustParseAddr("192.0.2.2"), MAC: "02:00:00:00:00:02"}
	if _, ok := remotesOnly(p, p.Clone()); ok {
		t.Error("an unchanged plan is a remote change")
	}
	q := p.Clone()
	delete(q.Remote, "r1")
	q.Remote["r3"] = plan.Remote{Name: "r3", Network: "blue", VTEP: netip.MustParseAddr("192.0.2.3"), MAC: "02:00:00:00:00:03"}
	r2 := q.Remote["r2"]
	r2.VTEP = netip.MustParseAddr("192.0.2.4")
	q.Remote["r2"] = r2
	if names, ok := remotesOnly(p, q); !ok || !slices.Equal(names, []string{"r1", "r2", "r3"}) {
		t.Errorf("remotesOnly = %v, %v; want r1 r2 r3", names, ok)
	}
	q.Local["a"] = plan.Endpoint{Name: "a", Network: "blue", VFIndex: -1}
	if names, ok := remotesOnly(p, q); ok {
		t.Errorf("a local endpoint's change is a remote change only: %v", names)
	}
}

func TestGroupOnly(t *testing.T) {
	a := netip.MustParseAddr
	p := plan.New("n1")
	p.Groups["g"] = plan.AddressGroup{Name: "g", Members: []netip.Addr{a("192.0.2.1"), a("192.0.2.2")}}
	p.Groups["h"] = plan.AddressGroup{Name: "h", Members: []netip.Addr{a("192.0.2.9")}}
	q := p.Clone()
	q.Groups["g"] = plan.AddressGroup{Name: "g", Members: []netip.Addr{a("192.0.2.2"), a("192.0.2.3")}}
	g, joined, left, ok := groupOnly(p, q)
	if !ok || g != "g" || !slices.Equal(joined, []netip.Addr{a("192.0.2.3")}) || !slices.Equal(left, []netip.Addr{a("192.0.2.1")}) {
		t.Errorf("groupOnly = %s +%v -%v %v", g, joined, left, ok)
	}
	q.Groups["h"] = plan.AddressGroup{Name: "h"}
	if _, _, _, ok := groupOnly(p, q); ok {
		t.Error("two groups changed (one emptied): a one-group change")
	}
	if _, _, _, ok := groupOnly(p, p.Clone()); ok {
		t.Error("no change: a group change")
	}
}
