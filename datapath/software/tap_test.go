package software

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestTapPorts plumbs a VM port's tap in a real namespace: Plumb makes a
// persistent tap, Apply puts it on the network's bridge and reports it
// ready, plumbing again keeps the same tap, Apply of a plan without the
// port removes its tap, and a foreign link of the tap's name is refused.
func TestTapPorts(t *testing.T) {
	ns := testkit.New(t)
	path := testkit.Path(ns)
	k, err := nl.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	dp := New(Options{Kernel: k})
	vm := plan.Endpoint{Name: "vm1-0", Network: "blue", Node: "n1", Kind: plan.KindTap, MAC: "02:00:00:00:00:07", VFIndex: -1,
		IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.7/24")}, Owner: "vm:vm1"}
	p := planWith([]plan.Network{blue})
	p.Local[vm.Name] = vm
	tap := datapath.HostIfName(vm.Name)
	plumb := func(e plan.Endpoint) (out datapath.Plumbed, err error) {
		err = nl.InNetNS(path, func() error {
			out, err = dp.Plumb(context.Background(), datapath.PlumbRequest{Endpoint: e, Network: blue})
			return err
		})
		return out, err
	}
	out, err := plumb(vm)
	if err != nil {
		t.Fatal(err)
	}
	if out.HostIf != tap || out.MTU != 1450 || len(out.Gateways) != 1 || out.Gateways[0].String() != "198.51.100.1" {
		t.Fatalf("plumbed %+v", out)
	}
	if got := testkit.Run(t, ns, "ip", "-d", "link", "show", tap); !strings.Contains(got, "tun type tap pi off vnet_hdr on persist on") ||
		!strings.Contains(got, "alias skiff:ep:vm1-0") || !strings.Contains(got, "mtu 1450") {
		t.Fatalf("tap: %s", got)
	}
	if ok, why := dp.Ready(vm.Name); ok {
		t.Fatalf("ready before an Apply (%s)", why)
	}
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	if ok, why := dp.Ready(vm.Name); !ok {
		t.Fatalf("not ready after Apply: %s", why)
	}
	state := kernelState(t, ns)
	if !strings.Contains(state, "link "+tap+" tun mtu 1450 up=true alias=\"skiff:ep:vm1-0\" master skb100 port-learning=true neigh-suppress=true") {
		t.Fatalf("tap not on the bridge:\n%s", state)
	}
	idx := testkit.Run(t, ns, "cat", "/sys/class/net/"+tap+"/ifindex")
	if _, err := plumb(vm); err != nil {
		t.Fatal(err)
	}
	w := k.Writes()
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	if k.Writes() != w || kernelState(t, ns) != state || testkit.Run(t, ns, "cat", "/sys/class/net/"+tap+"/ifindex") != idx {
		t.Fatal("plumbing and applying again changed the tap")
	}
	// The port leaves the plan (deleted while the agent was away): Apply
	// removes its tap, and only it.
	delete(p.Local, vm.Name)
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	if _, err := testkit.Try(ns, "ip", "link", "show", tap); err == nil {
		t.Fatal("the tap of a port that left the plan stayed")
	}
	if !strings.Contains(kernelState(t, ns), "link skb100 bridge") {
		t.Fatal("the network's bridge went with the tap")
	}
	// Unplumb is idempotent.
	for range 2 {
		if err := nl.InNetNS(path, func() error { return dp.Unplumb(context.Background(), datapath.UnplumbRequest{Endpoint: vm}) }); err != nil {
			t.Fatal(err)
		}
	}
	// Someone else's link of the tap's name is left alone.
	testkit.Run(t, ns, "ip", "tuntap", "add", "dev", tap, "mode", "tap")
	if _, err := plumb(vm); err == nil || !strings.Contains(err.Error(), "is not this endpoint's") {
		t.Fatalf("plumb over a foreign tap: %v", err)
	}
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	if _, err := testkit.Try(ns, "ip", "link", "show", tap); err != nil {
		t.Fatal("Apply deleted a foreign tap")
	}
	if _, err := plumb(plan.Endpoint{Name: "x", Network: "blue", Kind: plan.KindVFIO}); err == nil || !strings.Contains(err.Error(), "kind \"vfio\"") {
		t.Fatalf("vfio on the software datapath: %v", err)
	}
}
