package datapath

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
)

func TestClassifyRemotes(t *testing.T) {
	p := plan.New("n1")
	p.Networks["blue"] = plan.Network{Name: "blue", VNI: 100}
	p.Remote["r1"] = plan.Remote{Name: "r1", Network: "blue", VTEP: netip.MustParseAddr("192.0.2.2"), MAC: "02:00:00:00:00:01"}
	p.Remote["r2"] = plan.Remote{Name: "r2", Network: "blue", VTEP: netip.MustParseAddr("192.0.2.2"), MAC: "02:00:00:00:00:02"}
	if c := classify(p, p.Clone()); !c.same || len(c.remotes) != 0 {
		t.Errorf("an unchanged plan: %+v", c)
	}
	q := p.Clone()
	delete(q.Remote, "r1")
	q.Remote["r3"] = plan.Remote{Name: "r3", Network: "blue", VTEP: netip.MustParseAddr("192.0.2.3"), MAC: "02:00:00:00:00:03"}
	r2 := q.Remote["r2"]
	r2.VTEP = netip.MustParseAddr("192.0.2.4")
	q.Remote["r2"] = r2
	if c := classify(p, q); c.same || !slices.Equal(c.remotes, []string{"r1", "r2", "r3"}) {
		t.Errorf("classify = %+v; want remotes r1 r2 r3", c)
	}
	q.Local["a"] = plan.Endpoint{Name: "a", Network: "blue", VFIndex: -1}
	if c := classify(p, q); c.same || len(c.remotes) != 0 || c.group != "" {
		t.Errorf("a local endpoint's change is a remote change only: %+v", c)
	}
}

func TestClassifyGroup(t *testing.T) {
	a := netip.MustParseAddr
	p := plan.New("n1")
	p.Groups["g"] = plan.AddressGroup{Name: "g", Members: []netip.Addr{a("192.0.2.1"), a("192.0.2.2")}}
	p.Groups["h"] = plan.AddressGroup{Name: "h", Members: []netip.Addr{a("192.0.2.9")}}
	q := p.Clone()
	q.Groups["g"] = plan.AddressGroup{Name: "g", Members: []netip.Addr{a("192.0.2.2"), a("192.0.2.3")}}
	c := classify(p, q)
	g, joined, left := c.group, c.joined, c.left
	if g != "g" || !slices.Equal(joined, []netip.Addr{a("192.0.2.3")}) || !slices.Equal(left, []netip.Addr{a("192.0.2.1")}) {
		t.Errorf("classify = %+v", c)
	}
	q.Groups["h"] = plan.AddressGroup{Name: "h"}
	if c := classify(p, q); c.group != "" || c.same {
		t.Errorf("two groups changed (one emptied): %+v", c)
	}
	q = p.Clone()
	q.Groups["g"] = plan.AddressGroup{Name: "g", Members: []netip.Addr{a("192.0.2.1")}}
	q.Remote["r"] = plan.Remote{Name: "r"}
	if c := classify(p, q); c.group != "" || len(c.remotes) != 0 || c.same {
		t.Errorf("a group and a remote endpoint changed: %+v", c)
	}
}
