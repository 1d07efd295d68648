package nltest_test

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/nltest"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestConformance runs one scripted sequence of nl.Kernel calls against
// the fake and against the real kernel in two throwaway namespaces,
// reads both back through the same calls and compares what they read:
// the fake keeps the kernel's semantics for what the datapaths use.
// Root (testns fails, never skips, without it); in the kernel VM the
// namespaces are the guest's.
func TestConformance(t *testing.T) {
	a, b := throwaway(t), throwaway(t)
	real := func(path string) nl.Kernel {
		k, err := nl.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { k.Close() })
		return k
	}
	ns := filepath.Base(a)
	want := script(real(a), real(b), func(port, sender, dst string) {
		testkit.SendFrame(t, ns, sender, mustMAC(dst), 0x88b5, []byte("skiff-learn"))
		time.Sleep(50 * time.Millisecond) // the bridge forwards it in softirq
	})

	w := nltest.New()
	w.AddNS("/a")
	w.AddNS("/b")
	fa, _ := w.Open("/a")
	fb, _ := w.Open("/b")
	got := script(fa, fb, func(port, _, dst string) {
		if mustMAC(dst)[0]&1 == 0 { // what the learning rule matches
			w.NS("/a").Learn(nl.NftBridge, learnTable, "seen", port, dst)
		}
	})

	compare(t, got, want)
	if t.Failed() {
		t.Logf("the fake's state of a:\n%s", w.NS("/a").State())
	}
}

// compare reports each line where the fake's transcript (got) and the
// kernel's (want) differ.
func compare(t *testing.T, got, want []string) {
	t.Helper()
	for i := range max(len(got), len(want)) {
		var g, r string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			r = want[i]
		}
		if g != r {
			t.Errorf("line %d:\n fake:   %s\n kernel: %s", i, g, r)
		}
	}
}

var guestNS atomic.Int32

// throwaway is a namespace deleted when the test ends: testns's, or the
// kernel VM guest's (its /var/run is not /run).
func throwaway(t *testing.T) string {
	if !guest.Inside() {
		return testkit.Path(testkit.New(t))
	}
	name := fmt.Sprintf("nlt%d", guestNS.Add(1))
	guest.AddNetns(t, name)
	return "/run/netns/" + name
}

// script makes the calls and returns what it saw: each call's outcome
// and the namespaces read back at checkpoints. send sends a frame for
// dst from sender, the peer of bridge port port, in k's namespace.
func script(k, p nl.Kernel, send func(port, sender, dst string)) []string {
	// Lower than the kernel's random MACs (almost surely), so a bridge
	// takes them.
	mac1, mac2, mac3 := "02:00:00:00:aa:01", "02:00:00:00:aa:02", "02:00:00:00:aa:03"
	o := &observer{macs: map[string]string{mac1: "mac1", mac2: "mac2", mac3: "mac3",
		"02:00:00:00:ab:01": "mac-remote", "02:00:00:00:ab:02": "mac-remote2"}}
	idx := func(name string) int {
		l, err := k.LinkByName(name)
		if err != nil {
			return 9999
		}
		return l.Index
	}
	ip := netip.MustParseAddr
	pfx := netip.MustParsePrefix

	// Links of every kind.
	o.step("add bridge", k.AddBridge(nl.Bridge{Name: "skb0", MTU: 1450, Alias: "skiff:bridge:0"}))
	o.step("add bridge again", k.AddBridge(nl.Bridge{Name: "skb0"}))
	o.step("add vxlan", k.AddVXLAN(nl.VXLAN{Name: "skv0", VNI: 100, Local: ip("192.0.2.1"), Port: 4789, MTU: 1450, Alias: "skiff:vxlan:0"}))
	o.step("add vxlan external", k.AddVXLAN(nl.VXLAN{Name: "skvx", Port: 4790, External: true}))
	o.step("add pair", k.AddPair(nl.Pair{Name: "skp0", Peer: "skp1", MTU: 1500, MAC: mac1, Alias: "skiff:p0", PeerAlias: "skiff:p1"}))
	o.step("add pair taken", k.AddPair(nl.Pair{Name: "skx0", Peer: "skp1"}))
	o.step("add veth", k.AddVeth(nl.Veth{Name: "skh0", Alias: "skiff:h0", MTU: 1400, PeerName: "eth0"}, p))
	o.step("add tap", k.AddTap(nl.Tap{Name: "skt0", MTU: 1500, Alias: "skiff:tap"}))
	_, err := k.LinkByName("nosuch")
	o.step("link by name missing", err)
	o.observe("a", k)
	o.observe("b", p)

	// Bridge ports and their flags.
	o.step("master p0", k.SetMaster(idx("skp0"), idx("skb0")))
	o.step("master v0", k.SetMaster(idx("skv0"), idx("skb0")))
	o.step("master h0", k.SetMaster(idx("skh0"), idx("skb0")))
	o.step("master not a bridge", k.SetMaster(idx("skt0"), idx("skp1")))
	o.step("master missing", k.SetMaster(idx("skt0"), 9999))
	o.step("master of missing", k.SetMaster(9999, idx("skb0")))
	o.step("port flags v0", k.SetPortFlags(idx("skv0"), nl.PortFlags{NeighSuppress: true}))
	o.step("port flags h0", k.SetPortFlags(idx("skh0"), nl.PortFlags{Learning: true, Hairpin: true}))
	o.step("port flags not a port", k.SetPortFlags(idx("skt0"), nl.PortFlags{}))
	_, err = k.PortFlags(idx("skt0"))
	o.step("read port flags not a port", err)
	o.step("master h0 none", k.SetMaster(idx("skh0"), 0))
	for _, n := range []string{"skb0", "skv0", "skvx", "skp0", "skp1", "skh0"} {
		o.step("up "+n, k.SetUp(idx(n)))
	}
	o.step("mtu p0", k.SetMTU(idx("skp0"), 1300))
	o.step("mtu too small", k.SetMTU(idx("skp0"), 20))
	o.step("mac p1", k.SetMAC(idx("skp1"), mac2))
	o.step("alias p1", k.SetAlias(idx("skp1"), "skiff:p1b"))
	o.step("up missing", k.SetUp(9999))
	o.observe("a", k)

	// Addresses, routes and rules.
	for _, s := range []struct {
		dev string
		a   string
	}{{"skb0", "10.1.0.1/24"}, {"skb0", "10.1.0.2/24"}, {"skb0", "10.1.0.3/16"}, {"skb0", "2001:db8::1/64"},
		{"skp1", "10.2.0.1/24"}, {"skp1", "10.2.0.9/32"}, {"skp1", "2001:db8:1::1/64"}, {"skp1", "2001:db8:1::1/48"}, {"skp1", "2001:db8:2::1/128"}} {
		o.step("addr "+s.dev+" "+s.a, k.AddAddr(idx(s.dev), pfx(s.a)))
	}
	o.step("addr missing", k.AddAddr(9999, pfx("10.3.0.1/24")))
	o.step("delete primary", k.DeleteAddr(idx("skb0"), pfx("10.1.0.1/24")))
	o.step("delete absent", k.DeleteAddr(idx("skb0"), pfx("10.1.0.99/24")))
	o.step("delete v6 other length", k.DeleteAddr(idx("skp1"), pfx("2001:db8:1::1/48")))
	for _, r := range []struct {
		what string
		r    nl.Route
	}{
		{"route via", nl.Route{Dst: pfx("10.9.0.0/16"), Gw: ip("10.2.0.2"), LinkIndex: idx("skp1"), Protocol: nl.RouteProtocol}},
		{"route table", nl.Route{Dst: pfx("0.0.0.0/0"), Gw: ip("10.2.0.254"), LinkIndex: idx("skp1"), Table: 100, Protocol: nl.RouteProtocol}},
		{"route on link", nl.Route{Dst: pfx("10.8.0.0/16"), LinkIndex: idx("skp1"), Src: ip("10.2.0.1"), Protocol: nl.RouteProtocol}},
		{"route v6", nl.Route{Dst: pfx("2001:db8:9::/48"), Gw: ip("2001:db8:1::2"), LinkIndex: idx("skp1"), Protocol: nl.RouteProtocol}},
		{"route boot", nl.Route{Dst: pfx("10.7.0.0/16"), LinkIndex: idx("skp1")}},
		{"route replace", nl.Route{Dst: pfx("10.9.0.0/16"), Gw: ip("10.2.0.3"), LinkIndex: idx("skp1"), Protocol: nl.RouteProtocol}},
		{"route unreachable gw", nl.Route{Dst: pfx("10.6.0.0/16"), Gw: ip("10.5.0.1"), LinkIndex: idx("skp1"), Protocol: nl.RouteProtocol}},
		{"route unreachable gw6", nl.Route{Dst: pfx("2001:db8:6::/48"), Gw: ip("2001:db8:5::1"), LinkIndex: idx("skp1"), Protocol: nl.RouteProtocol}},
		{"route missing link", nl.Route{Dst: pfx("10.6.0.0/16"), LinkIndex: 9999, Protocol: nl.RouteProtocol}},
		{"route down link", nl.Route{Dst: pfx("10.6.0.0/16"), LinkIndex: idx("skt0"), Protocol: nl.RouteProtocol}},
		{"route foreign src", nl.Route{Dst: pfx("10.6.0.0/16"), LinkIndex: idx("skp1"), Src: ip("10.77.0.1"), Protocol: nl.RouteProtocol}},
	} {
		o.step(r.what, k.ReplaceRoute(r.r))
	}
	for _, dst := range []string{"10.9.1.1", "10.2.0.7", "10.2.0.1", "10.8.0.1", "198.51.100.1", "2001:db8:9::1", "2001:db8:1::5", "2001:db8:77::1"} {
		nh, err := k.RouteTo(ip(dst))
		o.add("route to %s: dev %s gw %v local %v %s", dst, names(mustLinks(k))(nh.LinkIndex), nh.Gateway, nh.Local, errClass(err))
	}
	o.step("delete route v6", k.DeleteRoute(nl.Route{Dst: pfx("2001:db8:9::/48"), Gw: ip("2001:db8:1::2"), LinkIndex: idx("skp1")}))
	o.step("delete route absent", k.DeleteRoute(nl.Route{Dst: pfx("10.55.0.0/16"), LinkIndex: idx("skp1")}))
	o.step("delete route wrong gw", k.DeleteRoute(nl.Route{Dst: pfx("10.9.0.0/16"), Gw: ip("10.2.0.99"), LinkIndex: idx("skp1")}))
	for _, r := range []nl.Rule{{IIF: "skb0", Table: 100, Priority: 100}, {IIF: "skb0", Table: 100, Priority: 100, IPv6: true},
		{IIF: "skb0", Table: 100, Priority: 100}, {IIF: "skp1", Table: 200, Priority: 200}} {
		o.step("rule", k.AddRule(r))
	}
	o.step("delete rule", k.DeleteRule(nl.Rule{IIF: "skb0", Table: 100, Priority: 100, IPv6: true}))
	o.step("delete rule absent", k.DeleteRule(nl.Rule{IIF: "nosuch", Table: 100, Priority: 100}))

	// Neighbours and FDB entries of both kinds.
	o.step("neigh", k.SetNeigh(nl.Neigh{LinkIndex: idx("skp1"), IP: ip("10.2.0.7"), MAC: mac3}))
	o.step("neigh v6", k.SetNeigh(nl.Neigh{LinkIndex: idx("skp1"), IP: ip("2001:db8:1::7"), MAC: mac3}))
	o.step("neigh replace", k.SetNeigh(nl.Neigh{LinkIndex: idx("skp1"), IP: ip("10.2.0.8"), MAC: mac3}))
	o.step("neigh delete", k.DeleteNeigh(nl.Neigh{LinkIndex: idx("skp1"), IP: ip("10.2.0.8")}))
	o.step("neigh delete absent", k.DeleteNeigh(nl.Neigh{LinkIndex: idx("skp1"), IP: ip("10.2.0.99")}))
	o.step("neigh missing link", k.SetNeigh(nl.Neigh{LinkIndex: 9999, IP: ip("10.2.0.7"), MAC: mac3}))
	o.step("resolve", k.Resolve(idx("skp1"), ip("10.2.0.50")))
	o.step("resolve v6", k.Resolve(idx("skp1"), ip("2001:db8:1::50")))
	o.step("resolve missing link", k.Resolve(9999, ip("10.2.0.50")))
	vx := idx("skv0")
	zero := "00:00:00:00:00:00"
	for _, f := range []struct {
		what string
		do   func(nl.FDB) error
		e    nl.FDB
	}{
		{"fdb flood", k.AddFDB, nl.FDB{LinkIndex: vx, MAC: zero, Dst: ip("192.0.2.7"), Self: true, Permanent: true}},
		{"fdb flood again", k.AddFDB, nl.FDB{LinkIndex: vx, MAC: zero, Dst: ip("192.0.2.7"), Self: true, Permanent: true}},
		{"fdb flood 2", k.AddFDB, nl.FDB{LinkIndex: vx, MAC: zero, Dst: ip("192.0.2.8"), Self: true, Permanent: true}},
		{"fdb flood set", k.SetFDB, nl.FDB{LinkIndex: vx, MAC: zero, Dst: ip("192.0.2.9"), Self: true, Permanent: true}},
		{"fdb remote", k.SetFDB, nl.FDB{LinkIndex: vx, MAC: "02:00:00:00:ab:01", Dst: ip("192.0.2.9"), Self: true, Permanent: true}},
		{"fdb remote moved", k.SetFDB, nl.FDB{LinkIndex: vx, MAC: "02:00:00:00:ab:01", Dst: ip("192.0.2.10"), Self: true, Permanent: true}},
		{"fdb remote append", k.AddFDB, nl.FDB{LinkIndex: vx, MAC: "02:00:00:00:ab:01", Dst: ip("192.0.2.11"), Self: true, Permanent: true}},
		{"fdb self not permanent", k.SetFDB, nl.FDB{LinkIndex: vx, MAC: "02:00:00:00:ab:02", Dst: ip("192.0.2.9"), Self: true, Static: true}},
		{"fdb bridge", k.SetFDB, nl.FDB{LinkIndex: vx, MAC: "02:00:00:00:ab:01", Master: true, Static: true}},
		{"fdb bridge port", k.SetFDB, nl.FDB{LinkIndex: idx("skp0"), MAC: "02:00:00:00:ab:02", Master: true, Static: true}},
		{"fdb bridge moved", k.SetFDB, nl.FDB{LinkIndex: vx, MAC: "02:00:00:00:ab:02", Master: true, Static: true}},
		{"fdb bridge not a port", k.SetFDB, nl.FDB{LinkIndex: idx("skp1"), MAC: "02:00:00:00:ab:02", Master: true, Static: true}},
		{"fdb self not vxlan", k.SetFDB, nl.FDB{LinkIndex: idx("skb0"), MAC: "02:00:00:00:ab:02", Dst: ip("192.0.2.9"), Self: true, Permanent: true}},
		{"fdb missing link", k.SetFDB, nl.FDB{LinkIndex: 9999, MAC: "02:00:00:00:ab:02", Master: true, Static: true}},
	} {
		o.step(f.what, f.do(f.e))
	}
	o.observe("a", k)
	for _, f := range []struct {
		what string
		e    nl.FDB
	}{
		{"fdb delete flood dst", nl.FDB{LinkIndex: vx, MAC: zero, Dst: ip("192.0.2.7"), Self: true}},
		{"fdb delete flood absent dst", nl.FDB{LinkIndex: vx, MAC: zero, Dst: ip("192.0.2.99"), Self: true}},
		{"fdb delete remote", nl.FDB{LinkIndex: vx, MAC: "02:00:00:00:ab:01", Self: true}},
		{"fdb delete bridge", nl.FDB{LinkIndex: vx, MAC: "02:00:00:00:ab:01", Master: true}},
		{"fdb delete bridge absent", nl.FDB{LinkIndex: vx, MAC: "02:00:00:00:ab:09", Master: true}},
	} {
		o.step(f.what, k.DeleteFDB(f.e))
	}

	nftScript(o, k)
	learnScript(o, k, send)
	sysctlScript(o, k)
	o.observe("a", k)

	// Down, renames, moves between namespaces, deletions.
	o.step("down p1", k.SetDown(idx("skp1")))
	o.observe("a", k)
	o.step("up p1", k.SetUp(idx("skp1")))
	o.step("rename p1", k.Rename(idx("skp1"), "skq1"))
	o.step("rename taken", k.Rename(idx("skb0"), "skq1"))
	o.step("up b0", k.SetUp(idx("skb0")))
	o.step("rename missing", k.Rename(9999, "skz"))
	o.step("add bridge b", p.AddBridge(nl.Bridge{Name: "skm0"}))
	o.step("add pair m", k.AddPair(nl.Pair{Name: "skm0", Peer: "skm1"}))
	o.step("move taken", k.MoveLink(idx("skm0"), p))
	o.step("move bridge", k.MoveLink(idx("skb0"), p))
	o.step("move q1", k.MoveLink(idx("skq1"), p))
	o.step("move m1", k.MoveLink(idx("skm1"), p))
	o.observe("a", k)
	o.observe("b", p)
	o.step("delete h0", k.DeleteLink(idx("skh0")))
	o.step("delete b0", k.DeleteLink(idx("skb0")))
	o.step("delete missing", k.DeleteLink(9999))
	o.step("delete lo", k.DeleteLink(idx("lo")))
	o.observe("a", k)
	o.observe("b", p)
	return o.lines
}

func mustLinks(k nl.Kernel) []nl.Link {
	ls, _ := k.Links()
	return ls
}

func mustMAC(s string) net.HardwareAddr {
	hw, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return hw
}
