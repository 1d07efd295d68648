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
