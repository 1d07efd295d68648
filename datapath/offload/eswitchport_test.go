package offload

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
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
	testkit.Require(t)
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
	dp, err := New(Options{NetNS: testkit.Path(node)})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	pass := func() map[string]flower.HostPort { return hostPortPass(t, dp, p, reps) }
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
	w := dp.Writes()
	pass()
	if dw := dp.Writes() - w; dw != 0 {
		t.Errorf("the same plan again made %d writes, want none", dw)
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

// hostPortPass makes the links, gateways, host ports and host routing
// of p, as Apply does without the flower rules, and returns the host
// ports.
func hostPortPass(t *testing.T, dp *Datapath, p plan.Plan, reps map[string]string) map[string]flower.HostPort {
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

// TestHostPortHostAddrs runs on the host kernel (root) and in the kernel
// VM: with host addresses (IPv6, the underlay IPv4), the node's own is
// on skn100 beside the underlay address, a remote endpoint's IPv6
// address is routed through skn100 from it, another node's host address
// is routed in the network's table out of skg100 to that node's host
// port MAC (its VTEP's: the flower peers stay keyed by VTEP), with an
// IPv6 rule iif skg100 beside the IPv4 one; a host address inside the
// network's subnets, or of a node without a host port here, is not
// routed. A second pass writes nothing; without host addresses exactly
// what they added goes (the remote IPv6 route stays, without source).
func TestHostPortHostAddrs(t *testing.T) {
	testkit.Require(t)
	node := "skhpanode"
	guest.AddNetns(t, node)
	self, other, third := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.3")
	p := plan.New("n1")
	p.UnderlayIP = self
	n := plan.Network{Name: "pods", VNI: 100, MTU: 1450, Egress: plan.EgressSNAT, FloodVTEPs: []netip.Addr{other, third},
		HostPortVTEPs: []netip.Addr{self, other, third},
		Subnets: []plan.Subnet{
			{Name: "v4", Network: "pods", CIDR: netip.MustParsePrefix("198.51.100.0/24"), Gateway: netip.MustParseAddr("198.51.100.1")},
			{Name: "v6", Network: "pods", CIDR: netip.MustParsePrefix("2001:db8:100::/64"), Gateway: netip.MustParseAddr("2001:db8:100::1")}},
		HostAddrs: []plan.HostAddr{{VTEP: self, IP: netip.MustParseAddr("2001:db8:ff::1")}, {VTEP: other, IP: netip.MustParseAddr("2001:db8:ff::2")},
			{VTEP: third, IP: netip.MustParseAddr("2001:db8:100::3")}, {VTEP: netip.MustParseAddr("192.0.2.4"), IP: netip.MustParseAddr("2001:db8:ff::4")}}}
	p.Networks[n.Name] = n
	p.Local["ep"] = plan.Endpoint{Name: "ep", Network: "pods", MAC: "02:00:00:00:01:00", VFIndex: -1}
	reps := map[string]string{"ep": "unused"}
	p.Remote["r"] = plan.Remote{Name: "r", Network: "pods", Node: "n2", VTEP: other, MAC: "02:00:00:00:00:02",
		IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.7/24"), netip.MustParsePrefix("2001:db8:100::7/64")}}
	dp, err := New(Options{NetNS: testkit.Path(node)})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	state := func() string {
		return strings.Join([]string{
			ipIn(t, node, "addr", "show", "dev", "skn100", "scope", "global"),
			ipIn(t, node, "-4", "route", "show", "table", "all", "proto", "83"),
			ipIn(t, node, "-6", "route", "show", "table", "all", "proto", "83"),
			ipIn(t, node, "-4", "rule", "show", "pref", "2500"),
			ipIn(t, node, "-6", "rule", "show", "pref", "2500"),
			ipIn(t, node, "neigh", "show", "nud", "permanent"),
		}, "\n")
	}
	hps := hostPortPass(t, dp, p, reps)
	if got, want := hps["pods"].Peers, map[netip.Addr]string{other: "06:64:c0:00:02:02", third: "06:64:c0:00:02:03"}; !maps.Equal(got, want) {
		t.Errorf("flower peers %v, want %v (by VTEP)", got, want)
	}
	got := state()
	// HostTable(100) = 0x53000064.
	has(t, got, "with host addresses",
		"inet 192.0.2.1/32",
		"inet6 2001:db8:ff::1/128",
		"198.51.100.7 dev skn100 scope link src 192.0.2.1",
		"2001:db8:100::7 dev skn100 src 2001:db8:ff::1 ",
		"192.0.2.2 dev skg100 table 1392509028 scope link",
		"2001:db8:ff::2 dev skg100 table 1392509028 ",
		"from all iif skg100 lookup 1392509028 proto 83",
		"2001:db8:100::7 dev skn100 lladdr 02:00:00:00:00:02 PERMANENT",
		"192.0.2.2 dev skg100 lladdr 06:64:c0:00:02:02 PERMANENT",
		"2001:db8:ff::2 dev skg100 lladdr 06:64:c0:00:02:02 PERMANENT")
	if c := strings.Count(got, "iif skg100"); c != 2 {
		t.Errorf("%d rules iif skg100, want one per family:\n%s", c, got)
	}
	hasNot(t, got, "inside the subnet, or of a node without a host port", "2001:db8:100::3", "2001:db8:ff::4")
	w := dp.Writes()
	hostPortPass(t, dp, p, reps)
	if dw := dp.Writes() - w; dw != 0 {
		t.Errorf("the same plan again made %d writes, want none", dw)
	}

	n.HostAddrs = nil
	p.Networks[n.Name] = n
	hostPortPass(t, dp, p, reps)
	got = state()
	hasNot(t, got, "without host addresses", "2001:db8:ff:", "src 2001")
	if c := strings.Count(got, "iif skg100"); c != 1 {
		t.Errorf("without host addresses, %d rules iif skg100, want the IPv4 one:\n%s", c, got)
	}
	has(t, got, "without host addresses", "inet 192.0.2.1/32", "198.51.100.7 dev skn100 scope link src 192.0.2.1", "2001:db8:100::7 dev skn100 metric",
		"192.0.2.2 dev skg100 table 1392509028 scope link", "192.0.2.2 dev skg100 lladdr 06:64:c0:00:02:02 PERMANENT",
		"2001:db8:100::7 dev skn100 lladdr 02:00:00:00:00:02 PERMANENT")
}

// has checks that got (the node's state) holds each of want; hasNot,
// none of no. when says in which case.
func has(t *testing.T, got, when string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s: the node lacks %q:\n%s", when, w, got)
		}
	}
}

func hasNot(t *testing.T, got, when string, no ...string) {
	t.Helper()
	for _, w := range no {
		if strings.Contains(got, w) {
			t.Errorf("%s: the node has %q:\n%s", when, w, got)
		}
	}
}
