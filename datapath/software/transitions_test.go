package software

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/nltest"
	"github.com/skiff-sdn/skiff/internal/plan"
)

// The software datapath's state transitions, on the kernel fake (no
// root): a table of plans applied in order, the node's whole state after
// each (links, addresses, FDB, neighbours, Skiff's routes and rules,
// sysctls, nftables), a second Apply of each writing nothing, and
// someone else's objects (a bridge named like Skiff's but unmarked,
// another bridge with a port and an FDB entry, another nftables table)
// never touched. The privileged TestApplyTransitions holds the same
// datapath to the real kernel.

const (
	fakeForeign = `link br-foreign bridge mtu 1500 down
link fv0 veth mtu 1500 down peer fv1 master br-foreign learning on neigh_suppress off hairpin off
link fv1 veth mtu 1500 down peer fv0
link lo device mtu 65536 up
link skforeign bridge mtu 1500 down
fdb fv0 02:aa:00:00:00:01 master static
` + nltest.ForeignTableState
	fakeBlue = `link skb100 bridge mtu 1450 up mac 02:73:6b:00:00:64 alias skiff:bridge:blue
link skv100 vxlan mtu 1450 up alias skiff:vxlan:blue vni 100 local 192.0.2.1 dstport 4789 master skb100 learning off neigh_suppress on hairpin off
addr skb100 198.51.100.1/24`
	fakeRed = `link skb200 bridge mtu 1400 up mac 02:73:6b:00:00:c8 alias skiff:bridge:red
link skv200 vxlan mtu 1400 up alias skiff:vxlan:red vni 200 local 192.0.2.1 dstport 4789 master skb200 learning off neigh_suppress on hairpin off
fdb skv200 00:00:00:00:00:00 dst 192.0.2.2 self permanent
fdb skv200 00:00:00:00:00:00 dst 192.0.2.3 self permanent
fdb skv200 02:00:00:00:00:02 dst 192.0.2.3 self permanent
fdb skv200 02:00:00:00:00:02 master static
neigh skb200 203.0.113.7 lladdr 02:00:00:00:00:02`
	// The host port of red when its egress routes out: the pair, the
	// node's address and MAC, the other nodes' host ports over VXLAN,
	// the remote endpoint routed through it from the node's address,
	// the other nodes routed from the bridge.
	fakeRedHost = `link skn200 veth mtu 1400 up mac 06:c8:c0:00:02:01 alias skiff:host:red peer sknp200
link sknp200 veth mtu 1400 up alias skiff:host:red peer skn200 master skb200 learning off neigh_suppress on hairpin off
addr skn200 192.0.2.1/32
fdb sknp200 06:c8:c0:00:02:01 master static
fdb skv200 06:c8:c0:00:02:02 dst 192.0.2.2 self permanent
fdb skv200 06:c8:c0:00:02:02 master static
fdb skv200 06:c8:c0:00:02:03 dst 192.0.2.3 self permanent
fdb skv200 06:c8:c0:00:02:03 master static
neigh skb200 192.0.2.2 lladdr 06:c8:c0:00:02:02
neigh skb200 192.0.2.3 lladdr 06:c8:c0:00:02:03
neigh skn200 203.0.113.7 lladdr 02:00:00:00:00:02
route 203.0.113.7/32 dev skn200 src 192.0.2.1
route 192.0.2.2/32 dev skb200 table 1392509128
route 192.0.2.3/32 dev skb200 table 1392509128
rule pref 2500 iif skb200 lookup 1392509128
sysctl net/ipv4/ip_forward = 1`
)

// fakeIsolation is the isolation table's chain for bridges of networks
// whose egress is none, then the given rules of red's host port.
func fakeIsolation(bridges []string, extra ...string) string {
	out := []string{"table inet skiff", "  chain isolate type filter hook forward priority 0; policy accept;"}
	for _, b := range bridges {
		for _, p := range []string{"skb", "skn", "skg"} {
			out = append(out, `    iifname "`+b+`" oifname "`+p+`*" oifname != "`+b+`" drop  # x:`+b+`>`+p+`!`+b)
		}
		out = append(out, `    iifname "`+b+`" oifname != "skb*" oifname != "skn*" oifname != "skg*" drop  # none:`+b,
			`    iifname != "skb*" iifname != "skn*" iifname != "skg*" oifname "`+b+`" drop  # in:`+b)
	}
	return strings.Join(append(out, extra...), "\n")
}

// redHostIsolation are the isolation rules of red with its host port.
var redHostIsolation = []string{
	`    iifname "skb200" oifname "skb*" oifname != "skb200" oifname != "skn200" drop  # x:skb200>skb!skb200,skn200`,
	`    iifname "skb200" oifname "skn*" oifname != "skb200" oifname != "skn200" drop  # x:skb200>skn!skb200,skn200`,
	`    iifname "skb200" oifname "skg*" oifname != "skb200" oifname != "skn200" drop  # x:skb200>skg!skb200,skn200`,
	`    iifname "skn200" oifname "skb*" oifname != "skb200" oifname != "skn200" drop  # x:skn200>skb!skb200,skn200`,
	`    iifname "skn200" oifname "skn*" oifname != "skb200" oifname != "skn200" drop  # x:skn200>skn!skb200,skn200`,
	`    iifname "skn200" oifname "skg*" oifname != "skb200" oifname != "skn200" drop  # x:skn200>skg!skb200,skn200`,
}

var redHostChains = []string{
	`  chain untrack type filter hook prerouting priority -300; policy accept;`,
	`    iifname "skb200" ether daddr 06:c8:c0:00:02:01 notrack  # untrack:dst:skb200:06:c8:c0:00:02:01`,
	`    iifname "skb200" ether saddr 06:c8:c0:00:02:01 notrack  # untrack:src:skb200:06:c8:c0:00:02:01`,
	`  chain noredirect type filter hook output priority 0; policy accept;`,
	`    oifname "skb200" icmpv6 type 137 drop  # noredirect:skb200`,
}

// fakeNode is a fake kernel with someone else's objects staged, and a
// software datapath on its host namespace.
func fakeNode(t *testing.T) (*nltest.World, nl.Kernel, *Datapath) {
	t.Helper()
	w := nltest.New()
	other := w.MustOpen(t, "")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(other.AddBridge(nl.Bridge{Name: "skforeign"}))
	must(other.AddBridge(nl.Bridge{Name: "br-foreign"}))
	must(other.AddPair(nl.Pair{Name: "fv0", Peer: "fv1"}))
	br, _ := w.NS("").Link("br-foreign")
	fv0, _ := w.NS("").Link("fv0")
	must(other.SetMaster(fv0.Index, br.Index))
	must(other.SetFDB(nl.FDB{LinkIndex: fv0.Index, MAC: "02:aa:00:00:00:01", Master: true, Static: true}))
	w.NS("").AddForeignTable(nltest.ForeignTable())
	k := w.MustOpen(t, "")
	dp := New(Options{Kernel: k, Open: w.Open})
	t.Cleanup(dp.Close)
	return w, k, dp
}

func TestTransitionsFake(t *testing.T) {
	w, k, dp := fakeNode(t)
	r1 := remote("r1", "blue", "02:00:00:00:00:01", "198.51.100.5/24", vtep2)
	r1moved := remote("r1", "blue", "02:00:00:00:00:01", "198.51.100.5/24", vtep3)
	r2 := remote("r2", "red", "02:00:00:00:00:02", "203.0.113.7/24", vtep3)
	blue3 := blue
	blue3.FloodVTEPs = []netip.Addr{vtep3}
	redSNAT, redRouted := red, red
	redSNAT.Egress, redRouted.Egress = plan.EgressSNAT, plan.EgressRouted
	redSNAT.HostPortVTEPs, redRouted.HostPortVTEPs = red.FloodVTEPs, red.FloodVTEPs
	blueR1 := `fdb skv100 00:00:00:00:00:00 dst 192.0.2.2 self permanent
fdb skv100 02:00:00:00:00:01 dst 192.0.2.2 self permanent
fdb skv100 02:00:00:00:00:01 master static
neigh skb100 198.51.100.5 lladdr 02:00:00:00:00:01`
	blueR1Moved := strings.ReplaceAll(blueR1, "192.0.2.2", "192.0.2.3")
	step := func(name string, p plan.Plan, want string) nltest.Step {
		return nltest.Step{Name: name, Apply: func() error { return dp.Apply(p) }, Want: want, Writes: nltest.AnyWrites}
	}
	nltest.Table{NS: w.NS(""), Writes: k.Writes}.Run(t, []nltest.Step{
		step("empty plan", planWith(nil), nltest.Expect(fakeForeign)),
		step("network with a remote endpoint", planWith([]plan.Network{blue}, r1), nltest.Expect(fakeForeign, fakeBlue, blueR1, fakeIsolation([]string{"skb100"}))),
		step("endpoint moves to another node", planWith([]plan.Network{blue3}, r1moved), nltest.Expect(fakeForeign, fakeBlue, blueR1Moved, fakeIsolation([]string{"skb100"}))),
		step("second network", planWith([]plan.Network{blue3, red}, r1moved, r2),
			nltest.Expect(fakeForeign, fakeBlue, blueR1Moved, fakeRed, fakeIsolation([]string{"skb100", "skb200"}))),
		step("first network deleted", planWith([]plan.Network{red}, r2), nltest.Expect(fakeForeign, fakeRed, fakeIsolation([]string{"skb200"}))),
		step("egress snat: masqueraded out, a host port", planWith([]plan.Network{redSNAT}, r2), nltest.Expect(fakeForeign, fakeRed, fakeRedHost,
			fakeIsolation(nil, slices.Concat(redHostIsolation, []string{
				`  chain egress type nat hook postrouting priority 100; policy accept;`,
				`    iifname "skb200" oifname != "skb*" oifname != "skn*" oifname != "skg*" masquerade  # snat:skb200`,
				`    iifname "skn200" oifname != "skb*" oifname != "skn*" oifname != "skg*" masquerade  # snat:skn200`,
			}, redHostChains)...))),
		step("egress routed: out and in as they are", planWith([]plan.Network{redRouted}, r2), nltest.Expect(fakeForeign, fakeRed, fakeRedHost,
			fakeIsolation(nil, slices.Concat(redHostIsolation, redHostChains)...))),
		step("egress none again: no host port (forwarding stays on)", planWith([]plan.Network{red}, r2),
			nltest.Expect(fakeForeign, fakeRed, "sysctl net/ipv4/ip_forward = 1", fakeIsolation([]string{"skb200"}))),
		step("everything deleted", planWith(nil), nltest.Expect(fakeForeign, "sysctl net/ipv4/ip_forward = 1")),
	})
}

// Local endpoints and NetworkPolicy on the fake: a pod's veth plumbed
// into its namespace (MAC, MTU, address, default route), on the bridge
// with hairpin where the network routes out, ready; a policy isolating
// it writes the policy table (the bridge, the pod's address, its
// group's set), br_netfilter loaded; a group member joining is one set
// element, the rules untouched; the policy gone, the table goes; the
// pod unplumbed, its veth goes with its namespace's end.
func TestEndpointsAndPolicyFake(t *testing.T) {
	w, k, dp := fakeNode(t)
	w.AddNS("/run/netns/pod-a")
	n := blue
	n.Egress = plan.EgressRouted
	a := plan.Endpoint{Name: "pod-a", Network: "blue", Node: "n1", Kind: plan.KindVeth, MAC: "02:00:00:00:0a:01", VFIndex: -1,
		IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.10/24")}}
	p := planWith([]plan.Network{n})
	p.Local[a.Name] = a
	out, err := dp.Plumb(context.Background(), datapath.PlumbRequest{Endpoint: a, Network: n, NetNS: "/run/netns/pod-a", IfName: "eth0"})
	if err != nil {
		t.Fatal(err)
	}
	host := datapath.HostIfName(a.Name)
	if out.HostIf != host || out.MTU != 1450 {
		t.Fatalf("plumbed %+v", out)
	}
	wantPod := `link eth0 veth mtu 1450 up mac 02:00:00:00:0a:01 peer ` + host + ` in host
link lo device mtu 65536 up
addr eth0 198.51.100.10/24
`
	if m := nltest.Mismatch(wantPod, w.NS("/run/netns/pod-a").State()); m != "" {
		t.Fatalf("the pod's namespace %s", m)
	}
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	if ok, why := dp.Ready(a.Name); !ok {
		t.Fatalf("pod-a not ready: %s", why)
	}
	port := `link ` + host + ` veth mtu 1450 up alias skiff:ep:pod-a peer eth0 in /run/netns/pod-a master skb100 learning on neigh_suppress on hairpin on`
	if got := w.NS("").State(); !strings.Contains(got, port+"\n") || !strings.Contains(got, "neigh skb100 198.51.100.10 lladdr 02:00:00:00:0a:01") {
		t.Fatalf("pod-a's host side is not a hairpin port of skb100 with its neighbour entry:\n%s", got)
	}
	// Isolated: TCP 80 from the group "web" only.
	p.Groups["web"] = plan.AddressGroup{Name: "web", Members: []netip.Addr{netip.MustParseAddr("198.51.100.5")}}
	p.Policies[a.Name] = plan.EndpointPolicy{Endpoint: a.Name, IngressIsolated: true,
		Ingress: []plan.PolicyRule{{Peers: []plan.PolicyPeer{{Group: "web"}}, Ports: []plan.PolicyPort{{Protocol: "TCP", Port: 80}}}}}
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	policy := `table inet skiff-policy
  set web-4 ipv4_addr
    198.51.100.5
  set web-6 ipv6_addr
  chain forward type filter hook forward priority 0; policy accept;
    ct state established,related accept  # established
    oifname "skb100" meta nfproto ipv4 ip daddr 198.51.100.10 jump in-pod-a
  chain in-pod-a
    meta nfproto ipv4 ip saddr @web-4 meta l4proto 6 th dport 80 counter return  # pod-a\x00in\x000
    meta nfproto ipv6 ip6 saddr @web-6 meta l4proto 6 th dport 80 counter return  # pod-a\x00in\x000
    meta nfproto ipv6 icmpv6 type 133-137 return  # nd
    counter drop  # pod-a\x00in\x00drop`
	got := w.NS("").State()
	if !strings.HasSuffix(got, policy+"\n") {
		t.Fatalf("policy table:\n%s\nwant it to end with\n%s", got, policy)
	}
	if !slices.Contains(w.Modules(), "br_netfilter") {
		t.Errorf("br_netfilter not loaded (modules %v)", w.Modules())
	}
	before, err := dp.Counters(p)
	if err != nil {
		t.Fatal(err)
	}
	p.Groups["web"] = plan.AddressGroup{Name: "web", Members: []netip.Addr{netip.MustParseAddr("198.51.100.5"), netip.MustParseAddr("198.51.100.6")}}
	writes := k.Writes()
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	after, err := dp.Counters(p)
	if err != nil {
		t.Fatal(err)
	}
	if k.Writes()-writes != 1 || after.PolicyWrites["element"]-before.PolicyWrites["element"] != 1 || after.PolicyWrites["table"] != before.PolicyWrites["table"] {
		t.Errorf("a member joining: %d writes, policy writes %v then %v; want one element", k.Writes()-writes, before.PolicyWrites, after.PolicyWrites)
	}
	if got := w.NS("").State(); !strings.Contains(got, "set web-4 ipv4_addr\n    198.51.100.5\n    198.51.100.6\n") {
		t.Errorf("the group's set after the join:\n%s", got)
	}
	delete(p.Policies, a.Name)
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	if got := w.NS("").State(); strings.Contains(got, "skiff-policy") {
		t.Errorf("the policy table stayed without a policy:\n%s", got)
	}
	if err := dp.Unplumb(context.Background(), datapath.UnplumbRequest{Endpoint: a, NetNS: "/run/netns/pod-a", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if got := w.NS("/run/netns/pod-a").State(); got != "link lo device mtu 65536 up\n" {
		t.Errorf("the pod's namespace after Unplumb:\n%s", got)
	}
}
