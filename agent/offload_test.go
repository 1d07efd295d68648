package agent

import (
	"testing"

	"github.com/skiff-sdn/skiff/agent/datapath/software"
	"github.com/skiff-sdn/skiff/internal/plan"
	offloaddp "github.com/skiff-sdn/skiff/offload/datapath"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

func TestRepresentor(t *testing.T) {
	a := &Agent{caps: &skiffv1.NodeCapabilities{Pfs: []*skiffv1.PhysicalFunction{{
		Name: "eth0", PciAddress: "0000:03:00.0",
		Vfs: []*skiffv1.VirtualFunction{{Index: 0, Representor: "eth1"}, {Index: 3, Representor: "eth4"}, {Index: 5}},
	}}}}
	cases := []struct {
		name string
		e    plan.Endpoint
		want offloaddp.Port
		ok   bool
	}{
		{"veth: its host side", plan.Endpoint{Name: "p", Kind: plan.KindVeth, VFIndex: -1}, offloaddp.Port{Rep: software.HostIfName("p")}, true},
		{"VF by PF netdev", plan.Endpoint{Name: "v", Kind: plan.KindVF, PF: "eth0", VFIndex: 3}, offloaddp.Port{Rep: "eth4", Target: software.HostIfName("v")}, true},
		{"VF by PF PCI address", plan.Endpoint{Name: "v", Kind: plan.KindVFIO, PF: "0000:03:00.0", VFIndex: 0}, offloaddp.Port{Rep: "eth1", Target: software.HostIfName("v")}, true},
		{"VF without a representor", plan.Endpoint{Name: "v", Kind: plan.KindVF, PF: "eth0", VFIndex: 5}, offloaddp.Port{}, false},
		{"unknown VF", plan.Endpoint{Name: "v", Kind: plan.KindVF, PF: "eth0", VFIndex: 9}, offloaddp.Port{}, false},
		{"unknown PF", plan.Endpoint{Name: "v", Kind: plan.KindVF, PF: "eth9", VFIndex: 0}, offloaddp.Port{}, false},
	}
	for _, c := range cases {
		got, ok := a.representor(c.e)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: got %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

func TestGatewayMACAgrees(t *testing.T) {
	for _, vni := range []uint32{1, 100, 0xabcdef, 1<<24 - 1} {
		if a, b := software.GatewayMAC(vni), offloaddp.GatewayMAC(vni); a != b {
			t.Errorf("vni %d: software %s, offload %s", vni, a, b)
		}
	}
}
