package software

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestHostPortIPv6Underlay: on a node whose underlay address is IPv6, a
// snat network's host port carries that address (/128) and a MAC from
// its last 32 bits; remote endpoints' IPv6 addresses (not their IPv4
// ones) are routed through it from that address; other nodes' IPv6
// VTEPs are routed from the bridge by an IPv6 rule; a second Apply
// writes nothing, and egress none removes it all.
func TestHostPortIPv6Underlay(t *testing.T) {
	ns := testkit.New(t)
	k, dp := openIn(t, ns)
	self, other := netip.MustParseAddr("2001:db8:ff::1"), netip.MustParseAddr("2001:db8:ff::2")
	n := plan.Network{Name: "pods", VNI: 200, MTU: 1430, Egress: plan.EgressSNAT, FloodVTEPs: []netip.Addr{other}, HostPortVTEPs: []netip.Addr{other},
		Subnets: []plan.Subnet{
			{Name: "v4", Network: "pods", CIDR: netip.MustParsePrefix("198.51.100.0/24"), Gateway: netip.MustParseAddr("198.51.100.1")},
			{Name: "v6", Network: "pods", CIDR: netip.MustParsePrefix("2001:db8:100::/64"), Gateway: netip.MustParseAddr("2001:db8:100::1")}}}
	r := plan.Remote{Name: "r", Network: "pods", Node: "n2", VTEP: other, MAC: "02:00:00:00:00:02",
		IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.7/24"), netip.MustParsePrefix("2001:db8:100::7/64")}}
	p := plan.New("n1")
	p.UnderlayIP = self
	p.Networks[n.Name] = n
	p.Remote[r.Name] = r
	if got := HostMAC(200, self); got != "06:c8:00:00:00:01" {
		t.Fatalf("HostMAC of %s = %s", self, got)
	}
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		return strings.Join([]string{
			testkit.Run(t, ns, "ip", "-6", "addr", "show", "dev", "skn200", "scope", "global"),
			testkit.Run(t, ns, "ip", "link", "show", "skn200"),
			testkit.Run(t, ns, "ip", "-6", "route", "show", "table", "all", "proto", "83"),
			testkit.Run(t, ns, "ip", "-4", "route", "show", "table", "all", "proto", "83"),
			testkit.Run(t, ns, "ip", "-6", "rule", "show", "pref", "2500"),
			testkit.Run(t, ns, "ip", "-6", "neigh", "show", "nud", "permanent"),
			testkit.Run(t, ns, "bridge", "fdb", "show", "dev", "skv200"),
		}, "\n")
	}
	got := state()
	for _, want := range []string{
		"inet6 2001:db8:ff::1/128",
		"link/ether 06:c8:00:00:00:01",
		"2001:db8:100::7 dev skn200 src 2001:db8:ff::1 ",
		"2001:db8:ff::2 dev skb200 table 1392509128 ",
		"from all iif skb200 lookup 1392509128 proto 83",
		"2001:db8:100::7 dev skn200 lladdr 02:00:00:00:00:02 PERMANENT",
		"2001:db8:ff::2 dev skb200 lladdr 06:c8:00:00:00:02 PERMANENT",
		"06:c8:00:00:00:02 dst 2001:db8:ff::2",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the node lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "198.51.100.7 dev skn200") {
		t.Errorf("a remote endpoint's IPv4 address is routed through the host port of an IPv6 underlay:\n%s", got)
	}
	w := k.Writes()
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	if dw := k.Writes() - w; dw != 0 {
		t.Errorf("applying the same plan again made %d writes (netlink, nftables, sysctls), want none", dw)
	}
	n.Egress = plan.EgressNone
	p.Networks[n.Name] = n
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	if out := testkit.Run(t, ns, "ip", "-6", "rule", "show", "pref", "2500") + testkit.Run(t, ns, "ip", "-6", "route", "show", "table", "all", "proto", "83"); strings.TrimSpace(out) != "" {
		t.Errorf("egress none left host port routing behind:\n%s", out)
	}
}

// TestHostPortHostAddrs: on an IPv4 underlay, a node's host address
// (IPv6) is on its host port beside the underlay address, and remote
// endpoints' IPv6 addresses are routed through the port from it; another
// node's host address is routed from the bridge, by an IPv6 rule, to
// that node's host port MAC (its VTEP's); a host address inside the
// network's subnets is ignored. A second Apply writes nothing; without
// host addresses the IPv6 routes, rule and address go, the IPv4 ones
// stay.
func TestHostPortHostAddrs(t *testing.T) {
	ns := testkit.New(t)
	k, dp := openIn(t, ns)
	self, other, third := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("192.0.2.3")
	n := plan.Network{Name: "pods", VNI: 200, Egress: plan.EgressSNAT, FloodVTEPs: []netip.Addr{other, third}, HostPortVTEPs: []netip.Addr{other, third},
		Subnets: []plan.Subnet{
			{Name: "v4", Network: "pods", CIDR: netip.MustParsePrefix("198.51.100.0/24"), Gateway: netip.MustParseAddr("198.51.100.1")},
			{Name: "v6", Network: "pods", CIDR: netip.MustParsePrefix("2001:db8:100::/64"), Gateway: netip.MustParseAddr("2001:db8:100::1")}},
		HostAddrs: []plan.HostAddr{{VTEP: self, IP: netip.MustParseAddr("2001:db8:ff::1")}, {VTEP: other, IP: netip.MustParseAddr("2001:db8:ff::2")},
			{VTEP: third, IP: netip.MustParseAddr("2001:db8:100::3")}}}
	r := plan.Remote{Name: "r", Network: "pods", Node: "n2", VTEP: other, MAC: "02:00:00:00:00:02",
		IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.7/24"), netip.MustParsePrefix("2001:db8:100::7/64")}}
	p := plan.New("n1")
	p.UnderlayIP = self
	p.Networks[n.Name] = n
	p.Remote[r.Name] = r
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		return strings.Join([]string{
			testkit.Run(t, ns, "ip", "addr", "show", "dev", "skn200", "scope", "global"),
			testkit.Run(t, ns, "ip", "-6", "route", "show", "table", "all", "proto", "83"),
			testkit.Run(t, ns, "ip", "-4", "route", "show", "table", "all", "proto", "83"),
			testkit.Run(t, ns, "ip", "-6", "rule", "show", "pref", "2500"),
			testkit.Run(t, ns, "ip", "-4", "rule", "show", "pref", "2500"),
			testkit.Run(t, ns, "ip", "-6", "neigh", "show", "nud", "permanent"),
		}, "\n")
	}
	got := state()
	for _, want := range []string{
		"inet 192.0.2.1/32",
		"inet6 2001:db8:ff::1/128",
		"2001:db8:100::7 dev skn200 src 2001:db8:ff::1 ",
		"198.51.100.7 dev skn200 scope link src 192.0.2.1",
		"2001:db8:ff::2 dev skb200 table 1392509128 ",
		"192.0.2.2 dev skb200 table 1392509128 ",
		"from all iif skb200 lookup 1392509128 proto 83",
		"2001:db8:100::7 dev skn200 lladdr 02:00:00:00:00:02 PERMANENT",
		"2001:db8:ff::2 dev skb200 lladdr 06:c8:c0:00:02:02 PERMANENT",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the node lacks %q:\n%s", want, got)
		}
	}
	if strings.Count(got, "iif skb200") != 2 {
		t.Errorf("want one rule per family:\n%s", got)
	}
	if strings.Contains(got, "2001:db8:100::3") {
		t.Errorf("a host address inside the network's subnet was routed:\n%s", got)
	}
	w := k.Writes()
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	if dw := k.Writes() - w; dw != 0 {
		t.Errorf("applying the same plan again made %d writes (netlink, nftables, sysctls), want none", dw)
	}
	n.HostAddrs = nil
	p.Networks[n.Name] = n
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	got = state()
	for _, cmd := range [][]string{
		{"ip", "-6", "addr", "show", "dev", "skn200", "scope", "global"},
		{"ip", "-6", "route", "show", "table", "all", "proto", "83"},
		{"ip", "-6", "rule", "show", "pref", "2500"},
		{"ip", "-6", "neigh", "show", "dev", "skn200", "nud", "permanent"},
		{"ip", "-6", "neigh", "show", "to", "2001:db8:ff::2", "nud", "permanent"},
	} {
		if out := testkit.Run(t, ns, cmd...); strings.TrimSpace(out) != "" {
			t.Errorf("without host addresses, %v still shows:\n%s", cmd, out)
		}
	}
	if !strings.Contains(got, "198.51.100.7 dev skn200") || !strings.Contains(got, "inet 192.0.2.1/32") {
		t.Errorf("without host addresses, the IPv4 host port routing went too:\n%s", got)
	}
}

// openIn opens the kernel and a software datapath of namespace ns,
// closed when the test ends.
func openIn(t *testing.T, ns string) (nl.Kernel, *Datapath) {
	t.Helper()
	k, err := nl.Open(testkit.Path(ns))
	if err != nil {
		t.Fatal(err)
	}
	dp := New(Options{Kernel: k})
	t.Cleanup(dp.Close)
	return k, dp
}
