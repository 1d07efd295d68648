package dpu

import (
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/datapath/software"
	"github.com/skiff-sdn/skiff/datapath/vftable"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// In a throwaway "DPU" namespace: a host endpoint's representor (a veth
// end) is adopted and put on the network's bridge, a VF without
// representor is refused with the reason, a second Apply changes nothing,
// and an endpoint that left the plan gives its representor back.
func TestAdoptAndRelease(t *testing.T) {
	testkit.Require(t)
	ns := testkit.New(t)
	testkit.Run(t, ns, "ip", "link", "add", "rep0", "type", "veth", "peer", "name", "vfx")
	k, err := nl.Open(testkit.Path(ns))
	if err != nil {
		t.Fatal(err)
	}
	own, err := nl.Open(testkit.Path(ns))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	tab := &vftable.Table{VFs: []vftable.Entry{{PF: "0000:03:00.0", Index: 0, Netdev: "rep0"}}}
	d := New(Options{Node: "d1", Inner: software.New(software.Options{Kernel: k, Logger: log}), Kernel: own, Representors: tab, Logger: log})
	defer d.Close()
	p := plan.New("d1")
	p.UnderlayIP = netip.MustParseAddr("192.0.2.11")
	p.Networks["blue"] = plan.Network{Name: "blue", VNI: 100, MTU: 1450}
	vf := func(name string, idx int) plan.Endpoint {
		return plan.Endpoint{Name: name, Network: "blue", Node: "h1", Kind: plan.KindVF, MAC: "02:00:00:00:00:01", PF: "0000:03:00.0", VFIndex: idx}
	}
	p.Local["v0"], p.Local["v9"] = vf("v0", 0), vf("v9", 9)
	for range 2 {
		if err := d.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	writes := d.Writes()
	if err := d.Apply(p); err != nil || d.Writes() != writes {
		t.Errorf("an unchanged plan wrote %d times (%v)", d.Writes()-writes, err)
	}
	hn := datapath.HostIfName("v0")
	if out := testkit.Run(t, ns, "ip", "-o", "link", "show", hn); !strings.Contains(out, "master skb100") || !strings.Contains(out, "skiff:rep ep=v0 home=rep0") {
		t.Errorf("adopted representor: %s", out)
	}
	if ok, why := d.Ready("v0"); !ok {
		t.Errorf("v0 not ready: %s", why)
	}
	if ok, why := d.Ready("v9"); ok || !strings.Contains(d.Refused("v9"), "no representor for VF 9 of PF 0000:03:00.0 on DPU d1") {
		t.Errorf("v9: ready %v, %q, refused %q", ok, why, d.Refused("v9"))
	}
	delete(p.Local, "v0")
	if err := d.Apply(p); err != nil {
		t.Fatal(err)
	}
	out := testkit.Run(t, ns, "ip", "-o", "link", "show", "rep0")
	if strings.Contains(out, "master") || strings.Contains(out, "skiff:") {
		t.Errorf("representor not given back: %s", out)
	}
}
