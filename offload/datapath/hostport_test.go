package datapath

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/internal/testns"
	"github.com/skiff-sdn/skiff/offload/flower"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
)

// TestHostPortRouting runs on the host kernel (root, no flower needed)
// and in the kernel VM: the node's-stack half of an offload node's host
// ports. Network pods (snat) gets skn100/sknp100 with the node's
// underlay address and MAC, its remote endpoint routed through skn100
// from that address, the other nodes' host ports routed out of skg100
// in the network's table with their MACs, and the rule iif skg100; the
// tenant network (egress none) gets nothing, though the plan lists host
// port VTEPs for it. A second pass writes nothing; egress none removes
// it all.
func TestHostPortRouting(t *testing.T) {
	testns.Require(t)
	node := "skhprnode"
	guest.AddNetns(t, node)
	p := plan.New("n1")
	p.UnderlayIP = netip.MustParseAddr("192.0.2.1")
	peers := []netip.Addr{netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.3")}
	reps := map[string]string{}
	for _, n := range []struct {
		name, egress, cidr, gw, remote string
		vni                            uint32
	}{
		{"pods", plan.EgressSNAT, "198.51.100.0/25", "198.51.100.1", "198.51.100.20", 100},
		{"tenant", plan.EgressNone, "198.51.100.128/25", "198.51.100.129", "198.51.100.140", 200},
	} {
		cidr := netip.MustParsePrefix(n.cidr)
		p.Networks[n.name] = plan.Network{Name: n.name, VNI: n.vni, MTU: 1450, Egress: n.egress, FloodVTEPs: peers, HostPortVTEPs: peers,
			Subnets: []plan.Subnet{{Name: n.name + "-v4", Network: n.name, CIDR: cidr, Gateway: netip.MustParseAddr(n.gw)}}}
		p.Local["ep-"+n.name] = plan.Endpoint{Name: "ep-" + n.name, Network: n.name, MAC: "02:00:00:00:01:00", VFIndex: -1}
		reps["ep-"+n.name] = "unused" // gateways only asks which networks have a plumbed endpoint
		p.Remote["r-"+n.name] = plan.Remote{Name: "r-" + n.name, Network: n.name, VTEP: peers[0], MAC: "02:00:00:00:00:20",
			IPs: []netip.Prefix{netip.PrefixFrom(netip.MustParseAddr(n.remote), cidr.Bits()), netip.MustParsePrefix("2001:db8::20/64")}}
	}
	dp, err := New(Options{NetNS: nsPath(node)})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	pass := func() map[string]flower.HostPort {
		t.Helper()
		byName, err := dp.links()
		if err != nil {
			t.Fatal(err)
		}
		gws, err := dp.gateways(p, reps, byName)
		if err != nil {
			t.Fatal(err)
		}
		hps, err := dp.hostPorts(p, gws, byName)
		if err != nil {
			t.Fatal(err)
		}
		if byName, err = dp.links(); err != nil {
			t.Fatal(err)
		}
		if err := dp.hostRouting(p, gws, hps, byName); err != nil {
			t.Fatal(err)
		}
		return hps
	}
	hps := pass()
	want := map[string]flower.HostPort{"pods": {Port: "sknp100", MAC: "06:64:c0:00:02:01",
		Peers: map[netip.Addr]string{peers[0]: "06:64:c0:00:02:02", peers[1]: "06:64:c0:00:02:03"}}}
	if !maps.EqualFunc(hps, want, func(a, b flower.HostPort) bool {
		return a.Port == b.Port && a.MAC == b.MAC && maps.Equal(a.Peers, b.Peers)
	}) {
		t.Fatalf("host ports %+v, want %+v", hps, want)
	}
	state := func() string {
		addr, _ := try(node, guest.IP, "-4", "addr", "show", "dev", "skn100") // gone with egress none
		return strings.Join([]string{
			addr,
			ipIn(t, node, "-br", "link"),
			ipIn(t, node, "-4", "route", "show", "table", "all", "proto", "83"),
			ipIn(t, node, "-6", "route", "show", "table", "all", "proto", "83"),
			ipIn(t, node, "-4", "rule", "show", "pref", "2500"),
			ipIn(t, node, "neigh", "show", "nud", "permanent"),
		}, "\n")
	}
	got := state()
	// HostTable(100) = 0x53000064.
	for _, w := range []string{
		"inet 192.0.2.1/32",
		"skn100@sknp100   UP             06:64:c0:00:02:01",
		"198.51.100.20 dev skn100 scope link src 192.0.2.1",
		"192.0.2.2 dev skg100 table 1392509028 scope link",
		"192.0.2.3 dev skg100 table 1392509028 scope link",
		"from all iif skg100 lookup 1392509028 proto 83",
		"198.51.100.20 dev skn100 lladdr 02:00:00:00:00:20 PERMANENT",
		"192.0.2.2 dev skg100 lladdr 06:64:c0:00:02:02 PERMANENT",
		"192.0.2.3 dev skg100 lladdr 06:64:c0:00:02:03 PERMANENT",
		// IPv6: routed without a source of the node's (for what it
		// forwards), permanent neighbour.
		"2001:db8::20 dev skn100 metric",
		"2001:db8::20 dev skn100 lladdr 02:00:00:00:00:20 PERMANENT",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("the node lacks %q:\n%s", w, got)
		}
	}
	for _, no := range []string{"skn200", "198.51.100.140", "skg200 table", "iif skg200", "2001:db8::20 dev skn100 src"} {
		if strings.Contains(got, no) {
			t.Errorf("the node has %q (egress none, or an IPv6 source on an IPv4 underlay):\n%s", no, got)
		}
	}
	w, lw := dp.k.Writes(), dp.linkW
	pass()
	if dw, dl := dp.k.Writes()-w, dp.linkW-lw; dw != 0 || dl != 0 {
		t.Errorf("the same plan again made %d netlink writes (%d counted as link writes), want none", dw, dl)
	}

	// The node's end taken away (moved to another namespace): its
	// peer alone goes, and the pair is made again.
	guest.AddNetns(t, "skhpraway")
	ipIn(t, node, "link", "set", "skn100", "netns", "skhpraway")
	pass()
	if got := state(); !strings.Contains(got, "skn100@sknp100   UP             06:64:c0:00:02:01") ||
		!strings.Contains(got, "inet 192.0.2.1/32") || !strings.Contains(got, "198.51.100.20 dev skn100 scope link src 192.0.2.1") {
		t.Errorf("the host port was not made again:\n%s", got)
	}

	// No endpoint of pods here any more (the planner keeps the node a
	// host member): the gateway goes, the host port and its routes to
	// the remote endpoints stay, the table, rule and peers go.
	local := p.Local["ep-pods"]
	delete(p.Local, "ep-pods")
	delete(reps, "ep-pods")
	if hps := pass(); len(hps) != 1 {
		t.Errorf("no endpoint of pods: host ports %v, want pods'", slices.Collect(maps.Keys(hps)))
	}
	got = state()
	for _, w := range []string{"skn100@sknp100   UP             06:64:c0:00:02:01", "inet 192.0.2.1/32",
		"198.51.100.20 dev skn100 scope link src 192.0.2.1", "198.51.100.20 dev skn100 lladdr 02:00:00:00:00:20 PERMANENT"} {
		if !strings.Contains(got, w) {
			t.Errorf("no endpoint of pods: the node lacks %q:\n%s", w, got)
		}
	}
	for _, no := range []string{"skg100", "iif skg100", "table 1392509028"} {
		if strings.Contains(got, no) {
			t.Errorf("no endpoint of pods: the node keeps %q:\n%s", no, got)
		}
	}
	p.Local["ep-pods"], reps["ep-pods"] = local, "unused"
	pass()

	n := p.Networks["pods"]
	n.Egress = plan.EgressNone
	p.Networks["pods"] = n
	if hps := pass(); len(hps) != 0 {
		t.Errorf("egress none: host ports %v", slices.Collect(maps.Keys(hps)))
	}
	got = state()
	for _, no := range []string{"skn100@", "sknp100@", "proto 83", "lladdr 06:64", "2001:db8::20"} {
		if strings.Contains(got, no) {
			t.Errorf("after egress none the node keeps %q:\n%s", no, got)
		}
	}
}
