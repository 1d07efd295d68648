package nltest_test

import (
	"context"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/nltest"
	"github.com/skiff-sdn/skiff/internal/nl/tc"
)

func TestWatch(t *testing.T) {
	w := nltest.New()
	k := open(t, w, "")
	ch, err := k.LinkChanges()
	must(t, err)
	if ch.Any() {
		t.Error("a new subscription has changes")
	}
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan nl.Event, 100)
	done := make(chan error)
	go func() { done <- k.Watch(ctx, func(e nl.Event) { events <- e }) }()
	// Watch subscribes on its goroutine: change lo's alias until an
	// event shows it has, then forget those.
	for subscribed := false; !subscribed; {
		must(t, k.SetAlias(1, "x"))
		select {
		case <-events:
			subscribed = true
		case <-time.After(10 * time.Millisecond):
		}
	}
	must(t, k.AddBridge(nl.Bridge{Name: "br0"}))
	br := index(t, k, "br0")
	must(t, k.SetUp(br))
	must(t, k.AddAddr(br, pfx("10.0.0.1/24")))
	must(t, k.SetNeigh(nl.Neigh{LinkIndex: br, IP: ip("10.0.0.2"), MAC: "02:00:00:00:00:02"}))
	must(t, k.DeleteLink(br))
	want := []nl.Event{{Kind: "link", Index: br, Name: "br0"}, {Kind: "link", Index: br, Name: "br0"}, {Kind: "addr", Index: br, Addr: ip("10.0.0.1")},
		{Kind: "neigh", Index: br, Static: true}}
	next := func() nl.Event { // lo's events (the alias) left out
		for {
			select {
			case e := <-events:
				if e.Index != 1 {
					return e
				}
			case <-time.After(5 * time.Second):
				return nl.Event{Kind: "none"}
			}
		}
	}
	for i, e := range want {
		if got := next(); got != e {
			t.Errorf("event %d: %+v, want %+v", i, got, e)
		}
	}
	deleted := nl.Event{Kind: "link", Index: br, Name: "br0", Deleted: true}
	for e := next(); e != deleted; e = next() {
		if e.Kind == "none" {
			t.Fatal("no event of br0 deleted")
		}
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Watch returned %v", err)
	}
	if !ch.Any() || ch.Any() {
		t.Error("LinkChanges: want changes once")
	}
	must(t, ch.Close())
}

// State prints the namespace one object a line, sorted, links by name.
func TestState(t *testing.T) {
	w := nltest.New()
	k := open(t, w, "")
	ns := w.NS("")
	ns.AddDevice(nltest.Device{Name: "eth0", MAC: "02:00:00:00:00:01", Up: true, VFs: 1, SwitchID: "1a2b"})
	ns.AddDevlink("pci", "0000:03:00.0", "switchdev")
	must(t, k.AddBridge(nl.Bridge{Name: "skb100", MTU: 1450, Alias: "skiff:bridge:100"}))
	must(t, k.AddVXLAN(nl.VXLAN{Name: "skv100", VNI: 100, Local: ip("192.0.2.1"), Port: 4789, MTU: 1450}))
	br, vx, eth := index(t, k, "skb100"), index(t, k, "skv100"), index(t, k, "eth0")
	must(t, k.SetMaster(vx, br))
	must(t, k.SetPortFlags(vx, nl.PortFlags{NeighSuppress: true}))
	for _, i := range []int{br, vx} {
		must(t, k.SetUp(i))
	}
	must(t, k.AddAddr(br, pfx("10.0.0.1/24")))
	must(t, k.AddAddr(eth, pfx("192.0.2.1/24")))
	must(t, k.AddFDB(nl.FDB{LinkIndex: vx, MAC: "00:00:00:00:00:00", Dst: ip("192.0.2.2"), Self: true, Permanent: true}))
	must(t, k.SetFDB(nl.FDB{LinkIndex: vx, MAC: "02:00:00:00:01:05", Master: true, Static: true}))
	must(t, k.SetNeigh(nl.Neigh{LinkIndex: br, IP: ip("10.0.0.5"), MAC: "02:00:00:00:01:05"}))
	must(t, k.ReplaceRoute(nl.Route{Dst: pfx("10.9.0.0/16"), Gw: ip("192.0.2.254"), LinkIndex: eth, Table: 100, Protocol: nl.RouteProtocol}))
	must(t, k.AddRule(nl.Rule{IIF: "skb100", Table: 100, Priority: 100}))
	must(t, k.SetSysctl("net/ipv4/ip_forward", "1"))
	if _, err := k.SetTable(nftTable("10.1.0.5")); err != nil {
		t.Fatal(err)
	}
	c, _ := k.TC(1)
	must(t, c.AddClsact(eth))
	must(t, c.Do(tc.Op{Kind: tc.Add, Filter: flower(eth, 3, 0x5301, 0, "02:00:00:00:01:05", vx, tc.TCA_CLS_FLAGS_SKIP_SW)}))
	must(t, k.SetVFTrust("eth0", 0, true))
	got := ns.State()
	want := `link eth0 device mtu 1500 up mac 02:00:00:00:00:01 switchid 1a2b hw-tc
link lo device mtu 65536 up
link skb100 bridge mtu 1450 up alias skiff:bridge:100
link skv100 vxlan mtu 1450 up vni 100 local 192.0.2.1 dstport 4789 master skb100 learning off neigh_suppress on hairpin off
addr eth0 192.0.2.1/24
addr skb100 10.0.0.1/24
fdb skv100 00:00:00:00:00:00 dst 192.0.2.2 self permanent
fdb skv100 02:00:00:00:01:05 master static
neigh skb100 10.0.0.5 lladdr 02:00:00:00:01:05
route 10.9.0.0/16 via 192.0.2.254 dev eth0 table 100
rule pref 100 iif skb100 lookup 100
sysctl net/ipv4/ip_forward = 1
table inet sktest
  set pods4 ipv4_addr
    10.1.0.5
  set pods6 ipv6_addr
  chain forward type filter hook forward priority 0; policy accept;
    ct state established,related accept  # established
    iifname "skb0" oifname != "skb*" counter drop  # isolate
    meta nfproto ipv4 ip daddr @pods4 counter jump pods  # pods
  chain pods
    meta l4proto 17 th dport 53 accept  # dns
    meta nfproto ipv4 ip saddr 10.1.0.0/16 meta mark set mark | 0x100  # mark
  chain nat type nat hook postrouting priority 100; policy accept;
    meta nfproto ipv4 ip saddr 10.1.0.0/16 oifname != "skb0" counter masquerade  # snat
qdisc eth0 clsact
filter eth0 ingress chain 3 prio 21249 protocol all handle 0x1 flower skip_sw in_hw dst_mac 02:00:00:00:01:05 action mirred egress redirect dev skv100 cookie 736b3035
devlink pci/0000:03:00.0 eswitch switchdev
vf eth0 0 mac 00:00:00:00:00:00 vlan 0 qos 0 spoofchk off trust on state auto rate 0-0
`
	if got != want {
		t.Errorf("State:\n%s\nwant:\n%s", got, want)
	}
	if got2 := ns.State(); got2 != got {
		t.Error("State differs between two calls")
	}
}

// The test API's inspection.
func TestInspect(t *testing.T) {
	w := nltest.New()
	k := open(t, w, "")
	ns := w.NS("")
	ns.AddDevice(nltest.Device{Name: "eth0", MAC: "02:00:00:00:00:01"})
	if l, ok := ns.Link("eth0"); !ok || l.MAC != "02:00:00:00:00:01" {
		t.Errorf("Link: %+v %v", l, ok)
	}
	if _, ok := ns.Link("nope"); ok {
		t.Error("Link of a missing name")
	}
	eth := index(t, k, "eth0")
	ns.SetHardware("eth0", true)
	ns.SetLinkStats("eth0", nl.Counters{RxPackets: 5})
	if st, _ := k.Stats(); st["eth0"].RxPackets != 5 {
		t.Errorf("stats %+v", st)
	}
	c, _ := k.TC(1)
	must(t, c.AddClsact(eth))
	must(t, c.Do(tc.Op{Kind: tc.Add, Filter: flower(eth, 0, 1, 0, "02:00:00:00:00:09", eth, 0)}))
	if fs := ns.Filters("eth0"); len(fs) != 1 || fs[0].Flags != tc.TCA_CLS_FLAGS_IN_HW {
		t.Errorf("Filters: %+v", fs)
	}
	defer func() {
		if recover() == nil {
			t.Error("setup on a missing link did not panic")
		}
	}()
	ns.RefuseHardware("nope", unix.EOPNOTSUPP, "")
}

func TestFilterString(t *testing.T) {
	m, _ := net.ParseMAC("02:00:00:00:00:0a")
	f := tc.Filter{Ifindex: 7, Chain: 3, Prio: 0x5301, Proto: unix.ETH_P_ALL, Handle: 42, Flags: tc.TCA_CLS_FLAGS_SKIP_SW | tc.TCA_CLS_FLAGS_IN_HW,
		Match:   tc.Match{DstMAC: m},
		Actions: []tc.Action{{Kind: tc.KindMirred, Verdict: tc.TC_ACT_STOLEN, MirredOp: tc.TCA_EGRESS_REDIR, Ifindex: 9, Cookie: []byte("sk0")}}}
	want := "chain 3 prio 21249 protocol all handle 0x2a flower skip_sw in_hw dst_mac 02:00:00:00:00:0a action mirred egress redirect dev if9 cookie 736b30"
	if got := f.String(); got != want {
		t.Errorf("String:\n%s\nwant\n%s", got, want)
	}
}
