package offload

import (
	"testing"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/eswitch"
)

func TestPortOf(t *testing.T) {
	node := &eswitch.Node{PFs: []eswitch.PF{{
		Netdev: "eth0", Bus: "pci", Device: "0000:03:00.0", Mode: eswitch.ModeSwitchdev,
		Representors: []eswitch.Representor{
			{Netdev: "eth1", Port: eswitch.PortName{Kind: eswitch.PortVF, VF: 0}},
			{Netdev: "eth4", Port: eswitch.PortName{Kind: eswitch.PortVF, VF: 3}},
		},
	}}}
	cases := []struct {
		name string
		e    plan.Endpoint
		want Port
		ok   bool
	}{
		{"veth: its host side", plan.Endpoint{Name: "p", Kind: plan.KindVeth, VFIndex: -1}, Port{Rep: datapath.HostIfName("p")}, true},
		{"VF by PF netdev", plan.Endpoint{Name: "v", Kind: plan.KindVF, PF: "eth0", VFIndex: 3}, Port{Rep: "eth4", Target: datapath.HostIfName("v")}, true},
		{"VF by PF PCI address", plan.Endpoint{Name: "v", Kind: plan.KindVFIO, PF: "0000:03:00.0", VFIndex: 0}, Port{Rep: "eth1", Target: datapath.HostIfName("v")}, true},
		{"VF without a representor", plan.Endpoint{Name: "v", Kind: plan.KindVF, PF: "eth0", VFIndex: 5}, Port{}, false},
		{"unknown VF", plan.Endpoint{Name: "v", Kind: plan.KindVF, PF: "eth0", VFIndex: 9}, Port{}, false},
		{"unknown PF", plan.Endpoint{Name: "v", Kind: plan.KindVF, PF: "eth9", VFIndex: 0}, Port{}, false},
	}
	for _, c := range cases {
		got, ok := PortOf(node, c.e)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: got %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
