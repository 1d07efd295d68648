package offload

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/nltest"
	"github.com/skiff-sdn/skiff/internal/nl/tc"
	"github.com/skiff-sdn/skiff/internal/plan"
)

// The offload datapath's state transitions, on the kernel fake (no
// root): a table of plans applied in order to a node with a switchdev
// eswitch (representors pf0vf0..pf0vf3 with a switch id, down, which
// take filters in hardware; an underlay eth0 holding the node's address,
// 192.0.2.2 answering ARP and 192.0.2.3 not), the node's whole state
// after each (links, addresses, neighbours, Skiff's routes and rules,
// sysctls, nftables, qdiscs and tc filters, cookies cut to their flags),
// a second Apply of each writing nothing, and someone else's objects (a
// veth pair named like a gateway but unmarked, filters on eth0 and on a
// representor at one of Skiff's priorities, an nftables table) never
// touched. vm_test.go holds the same datapath to the kernel's tc-flower.

// The priorities of Skiff's filters (offload/flower's), as State prints
// them.
const (
	pReply   = "21247" // chain 0: what the node let through (fw)
	pARP     = "21248" // chain 3: ARP
	pUnicast = "21249" // chain 3: by destination MAC
	pCt      = "21264" // chain 0: IPv4 into conntrack; chain 1: established
	pCt6     = "21265" // chain 0: IPv6; chain 1: related
	pEntry   = "21266" // chain 0: the rest, to forwarding
	pGateway = "21269" // chain 1: to the gateway (the node's stack checks it)
	pRule    = "21504" // chain 1 or 2: rule 0 of an endpoint's direction
	pDeny    = "25600" // chain 1 or 2: the default deny
	pOpen    = "25601" // chain 1 or 2: not isolated
)

// filter is a filter line of Skiff's on dev at "CHAIN PRIO PROTOCOL
// HANDLE": in hardware alone on a representor (pf*), in software
// elsewhere; its cookie the policy programmer's in chains 0 to 2, the
// forwarding programmer's in chain 3.
func filter(dev, at, match string, actions ...string) string {
	flags, cookie := "not_in_hw", "736b5001…"
	if strings.HasPrefix(dev, "pf") {
		flags = "skip_sw in_hw"
	}
	if strings.HasPrefix(at, "3 ") {
		cookie = "736b0000…"
	}
	return nltest.Filter(dev, at, flags, match, cookie, actions...)
}

func to(dev string) string     { return "mirred egress redirect dev " + dev }
func copyTo(dev string) string { return "mirred egress mirror dev " + dev }

// tunnel is the encapsulation to a VTEP from the node's address.
func tunnel(vni int, vtep string) string {
	return fmt.Sprintf("tunnel_key set id %d src_ip 192.0.2.1 dst_ip %s dst_port 4789", vni, vtep)
}

// decap matches what the VXLAN device took for the node on vni.
func decap(vni int) string {
	return fmt.Sprintf("enc_key_id %d enc_dst_ip 192.0.2.1 enc_dst_port 4789", vni)
}

// lines joins pieces of an expectation.
func lines(ls ...string) string { return strings.Join(ls, "\n") }

// offloadNode is the fake node: eth0, the representors, someone else's
// objects, and a datapath on the host namespace whose endpoints meet
// the eswitch at ports.
func offloadNode(t *testing.T, ports map[string]Port) (*nltest.World, nl.Kernel, *Datapath) {
	t.Helper()
	return offloadNodeWith(t, ports, nil)
}

// offloadNodeWith is offloadNode with the options' Learn.
func offloadNodeWith(t *testing.T, ports map[string]Port, learn *LearnOptions) (*nltest.World, nl.Kernel, *Datapath) {
	t.Helper()
	return offloadNodeLogged(t, ports, learn, slog.New(slog.DiscardHandler))
}

// offloadNodeLogged is offloadNodeWith logging to log.
func offloadNodeLogged(t *testing.T, ports map[string]Port, learn *LearnOptions, log *slog.Logger) (*nltest.World, nl.Kernel, *Datapath) {
	t.Helper()
	w := nltest.New()
	ns := w.NS("")
	other := w.MustOpen(t, "")
	eth0 := ns.AddDevice(nltest.Device{Name: "eth0", MAC: "02:00:00:00:ee:01", Up: true})
	if err := other.AddAddr(eth0.Index, netip.MustParsePrefix("192.0.2.1/24")); err != nil {
		t.Fatal(err)
	}
	ns.NeighReply("eth0", netip.MustParseAddr("192.0.2.2"), "02:00:00:00:ee:02")
	for i := range 4 {
		ns.AddDevice(nltest.Device{Name: fmt.Sprintf("pf0vf%d", i), SwitchID: "1a2b"})
	}
	if err := other.AddPair(nl.Pair{Name: "skg900", Peer: "skh900"}); err != nil {
		t.Fatal(err)
	}
	drop := []tc.Action{{Kind: tc.KindGact, Verdict: tc.TC_ACT_SHOT}}
	ns.AddForeignFilter("eth0", tc.Filter{Prio: 1, Proto: unix.ETH_P_ALL, Kind: "flower", Match: tc.Match{DstMAC: mac("02:99:99:99:99:99")}, Actions: drop})
	ns.AddForeignFilter("pf0vf0", tc.Filter{Prio: 21249, Proto: unix.ETH_P_ALL, Kind: "flower", Match: tc.Match{DstMAC: mac("02:99:99:99:99:98")}, Actions: drop})
	ns.AddForeignTable(nltest.ForeignTable())
	k := w.MustOpen(t, "")
	dp, err := New(Options{Kernel: k, Open: w.Open, Logger: log, Representor: func(e plan.Endpoint) (Port, bool) {
		port, ok := ports[e.Name]
		return port, ok
	}, Learn: learn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dp.Close)
	return w, k, dp
}

func mac(s string) net.HardwareAddr {
	hw, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return hw
}

// Someone else's: eth0 with the node's address and a filter, a filter
// on pf0vf0 at the unicast priority of Skiff's (in chain 0, ahead of
// Skiff's entry), a veth pair named like a gateway without Skiff's
// mark, an nftables table.
const offloadForeign = `link eth0 device mtu 1500 up mac 02:00:00:00:ee:01
link lo device mtu 65536 up
link pf0vf3 device mtu 1500 down switchid 1a2b hw-tc
link skg900 veth mtu 1500 down peer skh900
link skh900 veth mtu 1500 down peer skg900
addr eth0 192.0.2.1/24
` + nltest.ForeignTableState + `
qdisc eth0 clsact
filter eth0 ingress chain 0 prio 1 protocol all handle 0x1 flower not_in_hw dst_mac 02:99:99:99:99:99 action gact drop
qdisc pf0vf0 clsact
filter pf0vf0 ingress chain 0 prio 21249 protocol all handle 0x1 flower in_hw dst_mac 02:99:99:99:99:98 action gact drop`

// reps are the representors' links, those of local endpoints up (the
// datapath sets them up).
func reps(up int) string {
	var out []string
	for i := range 3 {
		state := "down"
		if i < up {
			state = "up"
		}
		out = append(out, fmt.Sprintf("link pf0vf%d device mtu 1500 %s switchid 1a2b hw-tc", i, state))
	}
	return lines(out...)
}

var (
	vtep2 = netip.MustParseAddr("192.0.2.2")
	vtep3 = netip.MustParseAddr("192.0.2.3")
	// blueNet: a, b and the remote endpoints r1, r2; redNet: c.
	blueNet = plan.Network{Name: "blue", VNI: 100, MTU: 1450, FloodVTEPs: []netip.Addr{vtep2},
		Subnets: []plan.Subnet{{Name: "blue-v4", Network: "blue", CIDR: netip.MustParsePrefix("198.51.100.0/24"), Gateway: netip.MustParseAddr("198.51.100.1")}}}
	redNet = plan.Network{Name: "red", VNI: 200, MTU: 1400, FloodVTEPs: []netip.Addr{vtep2, vtep3},
		Subnets: []plan.Subnet{{Name: "red-v4", Network: "red", CIDR: netip.MustParsePrefix("203.0.113.0/24"), Gateway: netip.MustParseAddr("203.0.113.1")}}}
)

func local(name, network, mac, ip string) plan.Endpoint {
	return plan.Endpoint{Name: name, Network: network, Node: "n1", Kind: plan.KindVF, PF: "pf0", VFIndex: 0, MAC: mac,
		IPs: []netip.Prefix{netip.MustParsePrefix(ip)}}
}

func remote(name, mac, ip string, vtep netip.Addr) plan.Remote {
	return plan.Remote{Name: name, Network: "blue", Node: "other", VTEP: vtep, MAC: mac, IPs: []netip.Prefix{netip.MustParsePrefix(ip)}}
}

// offloadPlan is node n1's plan (underlay 192.0.2.1).
func offloadPlan(nets []plan.Network, locals []plan.Endpoint, remotes ...plan.Remote) plan.Plan {
	p := plan.New("n1")
	p.UnderlayIP = netip.MustParseAddr("192.0.2.1")
	for _, n := range nets {
		p.Networks[n.Name] = n
	}
	for _, e := range locals {
		p.Local[e.Name] = e
	}
	for _, r := range remotes {
		p.Remote[r.Name] = r
	}
	return p
}

// threeEndpoints is the fake node of the tables with a and b on blue and
// c on red (on pf0vf0-2), and the remote endpoints r1 (behind 192.0.2.2)
// and r2 (behind 192.0.2.3).
func threeEndpoints(t *testing.T) (w *nltest.World, dp *Datapath, a, b, c plan.Endpoint, r1, r2 plan.Remote) {
	w, _, dp = offloadNode(t, map[string]Port{"a": {Rep: "pf0vf0"}, "b": {Rep: "pf0vf1"}, "c": {Rep: "pf0vf2"}})
	a = local("a", "blue", "02:00:00:00:00:0a", "198.51.100.10/24")
	b = local("b", "blue", "02:00:00:00:00:0b", "198.51.100.11/24")
	c = local("c", "red", "02:00:00:00:00:0c", "203.0.113.10/24")
	r1 = remote("r1", "02:00:00:00:00:01", "198.51.100.5/24", vtep2)
	r2 = remote("r2", "02:00:00:00:00:02", "198.51.100.6/24", vtep3)
	return w, dp, a, b, c, r1, r2
}

func TestTransitionsFake(t *testing.T) {
	w, dp, a, b, c, r1, r2 := threeEndpoints(t)
	ns := w.NS("")
	r2moved := r2
	r2moved.VTEP = vtep2
	blueSNAT, blueRouted := blueNet, blueNet
	blueSNAT.Egress, blueRouted.Egress = plan.EgressSNAT, plan.EgressRouted
	blueSNAT.HostPortVTEPs, blueRouted.HostPortVTEPs = []netip.Addr{vtep2}, []netip.Addr{vtep2}
	locals := []plan.Endpoint{a, b, c}
	withPolicy := func(members ...string) plan.Plan {
		p := offloadPlan([]plan.Network{blueRouted, redNet}, locals, r1, r2moved)
		web := plan.AddressGroup{Name: "web"}
		for _, m := range members {
			web.Members = append(web.Members, netip.MustParseAddr(m))
		}
		p.Groups["web"] = web
		p.Policies["a"] = plan.EndpointPolicy{Endpoint: "a", EgressIsolated: true,
			Egress: []plan.PolicyRule{{Peers: []plan.PolicyPeer{{Group: "web"}}, Ports: []plan.PolicyPort{{Protocol: "TCP", Port: 443}}}}}
		p.Policies["b"] = plan.EndpointPolicy{Endpoint: "b", IngressIsolated: true,
			Ingress: []plan.PolicyRule{{Peers: []plan.PolicyPeer{{Group: "web"}}, Ports: []plan.PolicyPort{{Protocol: "TCP", Port: 80}}}}}
		return p
	}
	probes := func(vtep2Probes, vtep3Probes int) func(t *testing.T) {
		return func(t *testing.T) {
			t.Helper()
			if p2, p3 := ns.Probes("eth0", vtep2), ns.Probes("eth0", vtep3); p2 != vtep2Probes || p3 != vtep3Probes {
				t.Errorf("ARP probes for 192.0.2.2 and 192.0.2.3: %d and %d, want %d and %d", p2, p3, vtep2Probes, vtep3Probes)
			}
		}
	}
	// Someone deletes two filters of Skiff's with another tc client: on
	// pf0vf1 the rule delivering to a, on skvx the rule letting r2 reach
	// b.
	deleteFilters := func(t *testing.T) {
		client, err := w.MustOpen(t, "").TC(1)
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		del := func(dev string, which func(f tc.Filter) bool) {
			for _, f := range ns.Filters(dev) {
				if which(f) {
					if err := client.Do(tc.Op{Kind: tc.Delete, Filter: &f}); err != nil {
						t.Fatal(err)
					}
					return
				}
			}
			t.Fatalf("no such filter on %s", dev)
		}
		del("pf0vf1", func(f tc.Filter) bool {
			return f.Chain == 3 && f.Prio == 21249 && f.Match.DstMAC.String() == "02:00:00:00:00:0a"
		})
		del("skvx", func(f tc.Filter) bool { return f.Chain == 2 && f.Match.Src == netip.MustParsePrefix("198.51.100.6/32") })
	}
	apply := func(p plan.Plan) func() error { return func() error { return dp.Apply(p) } }
	blue := nltest.Expect(offloadForeign, reps(2), blueLinks, blueQdiscs, blueRules(false), isolation(none("skg100")))
	out := func(parts ...string) string {
		return bridged(nltest.Expect(append([]string{offloadForeign, reps(3), blueLinks, blueQdiscs, blueRules(true), r2Rules("192.0.2.2"), red, blueHost}, parts...)...),
			blueWithR2("192.0.2.2"), redRepl)
	}
	joined := out(isolation(blueOut, none("skg200"), blueReplies), policy(true))
	// The two filters written again, each at the next handle of its
	// device.
	repaired := nltest.Expect(strings.NewReplacer(
		filter("pf0vf1", "3 "+pUnicast+" all 0x4", "dst_mac 02:00:00:00:00:0a", "ct nat", to("pf0vf0")),
		filter("pf0vf1", "3 "+pUnicast+" all 0x8", "dst_mac 02:00:00:00:00:0a", "ct nat", to("pf0vf0")),
		filter("skvx", "2 "+pRule+" ip 0x9", "enc_key_id 100 ip_proto tcp src_ip 198.51.100.6/32 dst_ip 198.51.100.11/32 dst_port 80 ct_state +trk+new", "ct commit zone 101", "gact goto chain 3"),
		filter("skvx", "2 "+pRule+" ip 0xa", "enc_key_id 100 ip_proto tcp src_ip 198.51.100.6/32 dst_ip 198.51.100.11/32 dst_port 80 ct_state +trk+new", "ct commit zone 101", "gact goto chain 3"),
	).Replace(joined))
	nltest.Table{NS: ns, Writes: dp.Writes, Show: nltest.ShortCookies}.Run(t, []nltest.Step{
		{Name: "empty plan", Apply: apply(offloadPlan(nil, nil)), Want: nltest.Expect(offloadForeign, reps(0)), Writes: 0},
		{Name: "blue: a and b on their representors, r1 behind 192.0.2.2 (which answered ARP)", Apply: apply(offloadPlan([]plan.Network{blueNet}, locals[:2], r1)),
			Want: bridged(blue, blueRepl), Writes: nltest.AnyWrites, After: func(t *testing.T) {
				probes(0, 0)(t)
				for _, ep := range []string{"a", "b"} {
					if ok, why := dp.Ready(ep); !ok {
						t.Errorf("%s not ready: %s", ep, why)
					}
				}
			}},
		{Name: "r2 comes behind 192.0.2.3: its rules alone, the new VTEP's next hop resolved", Apply: apply(offloadPlan([]plan.Network{blueNet}, locals[:2], r1, r2)),
			Want: bridged(nltest.Expect(blue, r2Rules("192.0.2.3")), blueWithR2("192.0.2.3")), Writes: 5, After: probes(0, 1)},
		{Name: "r2 moves behind 192.0.2.2: its rules replaced in place", Apply: apply(offloadPlan([]plan.Network{blueNet}, locals[:2], r1, r2moved)),
			Want: bridged(nltest.Expect(blue, r2Rules("192.0.2.2")), blueWithR2("192.0.2.2")), Writes: 4, After: probes(0, 1)},
		{Name: "second network: red, c on pf0vf2", Apply: apply(offloadPlan([]plan.Network{blueNet, redNet}, locals, r1, r2moved)),
			Want:   bridged(nltest.Expect(offloadForeign, reps(3), blueLinks, blueQdiscs, blueRules(false), r2Rules("192.0.2.2"), red, isolation(none("skg100"), none("skg200"))), blueWithR2("192.0.2.2"), redRepl),
			Writes: nltest.AnyWrites},
		{Name: "blue egress snat: its host port, masqueraded out", Apply: apply(offloadPlan([]plan.Network{blueSNAT, redNet}, locals, r1, r2moved)),
			Want: out(isolation(blueOut, none("skg200"), blueMasquerade, blueReplies)), Writes: nltest.AnyWrites},
		{Name: "blue egress routed: the masquerade goes, nothing else", Apply: apply(offloadPlan([]plan.Network{blueRouted, redNet}, locals, r1, r2moved)),
			Want: out(isolation(blueOut, none("skg200"), blueReplies)), Writes: 1},
		{Name: "NetworkPolicy: a isolated for egress, b for ingress", Apply: apply(withPolicy("198.51.100.5")),
			Want: out(isolation(blueOut, none("skg200"), blueReplies), policy(false)), Writes: nltest.AnyWrites},
		{Name: "r2 joins the group: its filters alone, one set element", Apply: apply(withPolicy("198.51.100.5", "198.51.100.6")),
			Want: joined, Writes: 5},
		{Name: "two filters deleted behind the datapath's back: written again, alone", Before: deleteFilters,
			Apply: apply(withPolicy("198.51.100.5", "198.51.100.6")), Want: repaired, Writes: 2, After: func(t *testing.T) {
				if n := dp.Drift(); n != 2 {
					t.Errorf("the tc watch reported %d devices changed by someone else, want 2", n)
				}
			}},
		{Name: "everything removed: nothing of Skiff's left but forwarding and the qdiscs (anyone's filters go there)", Apply: apply(offloadPlan(nil, nil)),
			Want: nltest.Expect(offloadForeign, reps(3), "sysctl net/ipv4/ip_forward = 1", "qdisc pf0vf1 clsact", "qdisc pf0vf2 clsact"), Writes: nltest.AnyWrites},
	})
}

// Endpoint plumbing on the fake: a pod's veth (kind veth, its host side
// the endpoint's port, as on a node whose VFs are stood in for) plumbed
// into its namespace, not ready until an Apply that began after; a VF
// endpoint whose representor pf0vf3 carries no frames, stood in for by
// a veth (Port.Target): what the stand-in sends enters pf0vf3's ingress,
// what is for the endpoint goes to the stand-in. Both ready after an
// Apply, with their rules on their ports (in software on the veths, in
// hardware on pf0vf3); the pod unplumbed, its namespace is empty, and
// the next Apply leaves nothing of its rules.
func TestEndpointsFake(t *testing.T) {
	hp, hw := datapath.HostIfName("p"), datapath.HostIfName("w")
	w, _, dp := offloadNode(t, map[string]Port{"p": {Rep: hp}, "w": {Rep: "pf0vf3", Target: hw}})
	w.AddNS("/run/netns/pod-p")
	w.AddNS("/run/netns/pod-w")
	p := plan.Endpoint{Name: "p", Network: "blue", Node: "n1", Kind: plan.KindVeth, MAC: "02:00:00:00:00:0d", VFIndex: -1,
		IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.13/24")}}
	v := local("w", "blue", "02:00:00:00:00:0e", "198.51.100.14/24")
	v.VFIndex = 3
	ctx := context.Background()
	out, err := dp.Plumb(ctx, datapath.PlumbRequest{Endpoint: p, Network: blueNet, NetNS: "/run/netns/pod-p", IfName: "eth0"})
	if err != nil || out.HostIf != hp || out.MTU != 1450 || !slices.Equal(out.Gateways, []netip.Addr{netip.MustParseAddr("198.51.100.1")}) {
		t.Fatalf("plumbed %+v, %v", out, err)
	}
	if ok, why := dp.Ready("p"); ok || why != datapath.NotCurrent {
		t.Errorf("p ready before an Apply: %v %q", ok, why)
	}
	// The stand-in, plumbed as a test rig does.
	if _, err := datapath.PlumbVeth(w.Open, "", datapath.PlumbRequest{Endpoint: v, Network: blueNet, NetNS: "/run/netns/pod-w", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	wantPod := "link eth0 veth mtu 1450 up mac 02:00:00:00:00:0d peer " + hp + " in host\nlink lo device mtu 65536 up\naddr eth0 198.51.100.13/24\n"
	if m := nltest.Mismatch(wantPod, w.NS("/run/netns/pod-p").State()); m != "" {
		t.Fatalf("the pod's namespace %s", m)
	}
	pl := offloadPlan([]plan.Network{blueNet}, []plan.Endpoint{p, v})
	if err := dp.Apply(pl); err != nil {
		t.Fatal(err)
	}
	for _, ep := range []string{"p", "w"} {
		if ok, why := dp.Ready(ep); !ok {
			t.Errorf("%s not ready: %s", ep, why)
		}
	}
	hosts := strings.NewReplacer("HP", hp, "HW", hw)
	ports := hosts.Replace(`link pf0vf0 device mtu 1500 down switchid 1a2b hw-tc
link pf0vf1 device mtu 1500 down switchid 1a2b hw-tc
link pf0vf2 device mtu 1500 down switchid 1a2b hw-tc
link pf0vf3 device mtu 1500 up switchid 1a2b hw-tc
link HW veth mtu 1450 up alias skiff:ep:w peer eth0 in /run/netns/pod-w
qdisc pf0vf3 clsact
qdisc HW clsact`)
	common := []string{
		strings.Replace(offloadForeign, "link pf0vf3 device mtu 1500 down switchid 1a2b hw-tc\n", "", 1), ports,
		blueLinks, "qdisc skh100 clsact\nqdisc skvx clsact", isolation(none("skg100")),
		filter("pf0vf3", "0 "+pEntry+" all 0x1", "", "gact goto chain 3"),
		filter("pf0vf3", "3 "+pARP+" arp 0x2", "arp_op request arp_tip 198.51.100.1", to("skh100")),
		filter("pf0vf3", "3 "+pUnicast+" all 0x5", "dst_mac 02:73:6b:00:00:64", to("skh100")),
		filter(hw, "0 "+pEntry+" all 0x1", "", "gact goto chain 3"),
		filter(hw, "3 "+pUnicast+" all 0x2", "", "mirred ingress redirect dev pf0vf3"),
		filter("skh100", "0 "+pEntry+" all 0x1", "", "gact goto chain 3"),
		filter("skh100", "3 "+pARP+" arp 0x3", "arp_op request arp_tip 198.51.100.14", to(hw)),
		filter("skh100", "3 "+pUnicast+" all 0x5", "dst_mac 02:00:00:00:00:0e", to(hw)),
		filter("skvx", "0 "+pEntry+" all 0x1", "", "gact goto chain 3"),
		filter("skvx", "3 "+pARP+" arp 0x3", decap(100)+" arp_op request arp_tip 198.51.100.14", "tunnel_key unset", to(hw)),
		filter("skvx", "3 "+pUnicast+" all 0x5", "dst_mac 02:00:00:00:00:0e "+decap(100), "tunnel_key unset", to(hw)),
	}
	// What the bridge sends to pf0vf3 goes to its stand-in.
	standIn := "filter pf0vf3 egress chain 0 prio 21249 protocol all handle 0x1 flower skip_hw not_in_hw action " + to(hw) + " cookie 736b0000…"
	withP := bridged(nltest.Expect(append(common, standIn, "link "+hp+" veth mtu 1450 up alias skiff:ep:p peer eth0 in /run/netns/pod-p", "qdisc "+hp+" clsact",
		filter("pf0vf3", "3 "+pARP+" arp 0x3", "arp_op request arp_tip 198.51.100.13", to(hp)),
		filter("pf0vf3", "3 "+pUnicast+" all 0x4", "dst_mac 02:00:00:00:00:0d", to(hp)),
		filter(hp, "0 "+pEntry+" all 0x1", "", "gact goto chain 3"),
		filter(hp, "3 "+pARP+" arp 0x2", "arp_op request arp_tip 198.51.100.1", to("skh100")),
		filter(hp, "3 "+pARP+" arp 0x3", "arp_op request arp_tip 198.51.100.14", to(hw)),
		filter(hp, "3 "+pUnicast+" all 0x4", "dst_mac 02:00:00:00:00:0e", to(hw)),
		filter(hp, "3 "+pUnicast+" all 0x5", "dst_mac 02:73:6b:00:00:64", to("skh100")),
		filter("skh100", "3 "+pARP+" arp 0x2", "arp_op request arp_tip 198.51.100.13", to(hp)),
		filter("skh100", "3 "+pUnicast+" all 0x4", "dst_mac 02:00:00:00:00:0d", to(hp)),
		filter("skvx", "3 "+pARP+" arp 0x2", decap(100)+" arp_op request arp_tip 198.51.100.13", "tunnel_key unset", to(hp)),
		filter("skvx", "3 "+pUnicast+" all 0x4", "dst_mac 02:00:00:00:00:0d "+decap(100), "tunnel_key unset", to(hp)))...),
		replicated{vid: 1, vni: 100, reps: []string{"pf0vf3", hp}, gw: "skh100", gwIP: "198.51.100.1", vteps: []string{"192.0.2.2"},
			hosts: []host{{"pf0vf3", "02:00:00:00:00:0e", "", "198.51.100.14"}, {hp, "02:00:00:00:00:0d", "", "198.51.100.13"}}})
	if m := nltest.Mismatch(withP, nltest.ShortCookies(w.NS("").State())); m != "" {
		t.Fatalf("the node %s", m)
	}
	if err := dp.Unplumb(ctx, datapath.UnplumbRequest{Endpoint: p, NetNS: "/run/netns/pod-p", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if m := nltest.Mismatch("link lo device mtu 65536 up\n", w.NS("/run/netns/pod-p").State()); m != "" {
		t.Errorf("the pod's namespace after Unplumb %s", m)
	}
	// p leaves the plan: its rules go (its port went with its veth).
	delete(pl.Local, "p")
	if err := dp.Apply(pl); err != nil {
		t.Fatal(err)
	}
	withoutP := bridged(nltest.Expect(append(common, standIn)...),
		replicated{vid: 1, vni: 100, reps: []string{"pf0vf3"}, gw: "skh100", gwIP: "198.51.100.1", vteps: []string{"192.0.2.2"},
			hosts: []host{{"pf0vf3", "02:00:00:00:00:0e", "", "198.51.100.14"}}})
	if m := nltest.Mismatch(withoutP, nltest.ShortCookies(w.NS("").State())); m != "" {
		t.Fatalf("the node after p left %s", m)
	}
}
