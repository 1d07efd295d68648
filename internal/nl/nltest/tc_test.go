package nltest_test

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/nltest"
	"github.com/skiff-sdn/skiff/internal/nl/tc"
)

// flower is a flower filter matching a destination MAC, redirecting to
// target.
func flower(ifindex int, chain uint32, prio uint16, handle uint32, mac string, target int, flags uint32) *tc.Filter {
	m, _ := net.ParseMAC(mac)
	return &tc.Filter{Ifindex: ifindex, Chain: chain, Prio: prio, Proto: unix.ETH_P_ALL, Handle: handle, Flags: flags, Match: tc.Match{DstMAC: m},
		Actions: []tc.Action{{Kind: tc.KindMirred, Verdict: tc.TC_ACT_STOLEN, MirredOp: tc.TCA_EGRESS_REDIR, Ifindex: target, Cookie: []byte("sk" + mac[15:])}}}
}

func TestTC(t *testing.T) {
	w := nltest.New()
	k := open(t, w, "")
	ns := w.NS("")
	rep := ns.AddDevice(nltest.Device{Name: "rep0", SwitchID: "1a2b", Up: true}).Index
	refusing := ns.AddDevice(nltest.Device{Name: "rep1", SwitchID: "1a2b"}).Index
	ns.RefuseHardware("rep1", unix.EOPNOTSUPP, "unsupported action")
	must(t, k.AddPair(nl.Pair{Name: "v0", Peer: "v1"}))
	v0, v1 := index(t, k, "v0"), index(t, k, "v1")
	c, err := k.TC(3)
	must(t, err)
	if ids := c.PortIDs(); len(ids) != 3 || ids[0] == ids[1] {
		t.Errorf("port ids %v, want 3 distinct", ids)
	}
	if err := c.Do(tc.Op{Kind: tc.Add, Filter: flower(v0, 3, 5, 0, "02:00:00:00:00:01", v1, 0)}); !errors.Is(err, unix.EINVAL) {
		t.Errorf("a filter before clsact: %v, want EINVAL", err)
	}
	for _, d := range []int{v0, rep, refusing} {
		must(t, c.AddClsact(d))
	}
	if err := c.AddClsact(v0); !errors.Is(err, unix.EEXIST) {
		t.Errorf("clsact twice: %v", err)
	}
	if err := c.AddClsact(99); !errors.Is(err, unix.ENODEV) {
		t.Errorf("clsact on a gone link: %v", err)
	}
	add := func(f *tc.Filter) error { return c.Do(tc.Op{Kind: tc.Add, Filter: f}) }
	for _, x := range []struct {
		what string
		err  error
		want unix.Errno
	}{
		{"first", add(flower(v0, 3, 5, 0, "02:00:00:00:00:01", v1, 0)), 0},
		{"second", add(flower(v0, 3, 5, 0, "02:00:00:00:00:02", v1, 0)), 0},
		{"handle taken", add(flower(v0, 3, 5, 2, "02:00:00:00:00:03", v1, 0)), unix.EEXIST},
		{"same match", add(flower(v0, 3, 5, 7, "02:00:00:00:00:01", v1, 0)), unix.EEXIST},
		{"other protocol in the priority", add(&tc.Filter{Ifindex: v0, Chain: 3, Prio: 5, Proto: unix.ETH_P_IP, Handle: 9, Match: tc.Match{IPProto: 6}}), unix.EINVAL},
		{"other kind in the priority", add(&tc.Filter{Ifindex: v0, Chain: 3, Prio: 5, Proto: unix.ETH_P_ALL, Kind: tc.KindFw, Handle: 9, Match: tc.Match{Mark: 9, MarkMask: 9}}), unix.EINVAL},
		{"skip_sw on a veth", add(flower(v0, 3, 6, 0, "02:00:00:00:00:04", v1, tc.TCA_CLS_FLAGS_SKIP_SW)), unix.EOPNOTSUPP},
		{"skip_sw on hardware", add(flower(rep, 3, 6, 0, "02:00:00:00:00:04", v1, tc.TCA_CLS_FLAGS_SKIP_SW)), 0},
		{"skip_hw on hardware", add(flower(rep, 3, 6, 0, "02:00:00:00:00:05", v1, tc.TCA_CLS_FLAGS_SKIP_HW)), 0},
		{"hardware that refuses", add(flower(refusing, 3, 6, 0, "02:00:00:00:00:04", v1, tc.TCA_CLS_FLAGS_SKIP_SW)), unix.EOPNOTSUPP},
		{"refused, in software", add(flower(refusing, 3, 6, 0, "02:00:00:00:00:04", v1, 0)), 0},
		{"mirred to a gone link", add(flower(v0, 3, 7, 0, "02:00:00:00:00:06", 99, 0)), unix.ENODEV},
		{"gone link", add(flower(99, 3, 7, 0, "02:00:00:00:00:06", v1, 0)), unix.ENODEV},
		{"replace missing", c.Do(tc.Op{Kind: tc.Replace, Filter: flower(v0, 3, 5, 9, "02:00:00:00:00:09", v1, 0)}), unix.ENOENT},
		{"replace", c.Do(tc.Op{Kind: tc.Replace, Filter: flower(v0, 3, 5, 2, "02:00:00:00:00:08", v1, 0)}), 0},
		{"delete missing", c.Do(tc.Op{Kind: tc.Delete, Filter: &tc.Filter{Ifindex: v0, Chain: 3, Prio: 5, Proto: unix.ETH_P_ALL, Handle: 9}}), unix.ENOENT},
	} {
		if got := errno(x.err); got != x.want || (x.want == 0) != (x.err == nil) {
			t.Errorf("%s: %v, want %v", x.what, x.err, x.want)
		}
	}
	var te *tc.Error
	if err := add(flower(refusing, 3, 8, 0, "02:00:00:00:00:0a", v1, tc.TCA_CLS_FLAGS_SKIP_SW)); !errors.As(err, &te) || te.Message != "unsupported action" {
		t.Errorf("the driver's refusal: %v, want a tc.Error with its message", err)
	}
	fs, _ := c.Dump(rep, tc.DumpOptions{})
	if len(fs) != 2 || fs[0].Flags != tc.TCA_CLS_FLAGS_SKIP_SW|tc.TCA_CLS_FLAGS_IN_HW || fs[1].Flags != tc.TCA_CLS_FLAGS_SKIP_HW|tc.TCA_CLS_FLAGS_NOT_IN_HW {
		t.Errorf("flags on hardware: %+v", fs)
	}
	fs, _ = c.Dump(refusing, tc.DumpOptions{})
	if len(fs) != 1 || fs[0].Flags != tc.TCA_CLS_FLAGS_NOT_IN_HW {
		t.Errorf("a refusing device's software filter: %+v", fs)
	}
	fs, _ = c.Dump(v0, tc.DumpOptions{Chains: []uint32{3}})
	if len(fs) != 2 || fs[0].Handle != 1 || fs[1].Handle != 2 || fs[1].Match.DstMAC.String() != "02:00:00:00:00:08" || fs[0].Parent != tc.Ingress {
		t.Errorf("dump of v0: %+v", fs)
	}
	var terse []tc.Terse
	must(t, c.DumpTerse(v0, nil, func(f *tc.Terse) { terse = append(terse, *f) }))
	if len(terse) != 2 || string(terse[0].Cookie) != "sk01" || terse[0].Actions != 1 || terse[0].Flags != tc.TCA_CLS_FLAGS_NOT_IN_HW {
		t.Errorf("terse %+v", terse)
	}
	ns.SetFilterStats("v0", 3, 5, 1, tc.Stats{Packets: 4, Bytes: 400})
	terse = terse[:0]
	must(t, c.DumpTerse(v0, []uint32{3}, func(f *tc.Terse) { terse = append(terse, *f) }))
	if terse[0].Stats.Packets != 4 {
		t.Errorf("terse counters %+v", terse[0].Stats)
	}
	// A terse dump ends at a fw filter, as the kernel's does.
	must(t, add(&tc.Filter{Ifindex: v0, Chain: 3, Prio: 1, Proto: unix.ETH_P_ALL, Kind: tc.KindFw, Match: tc.Match{Mark: 0x100, MarkMask: 0x100},
		Actions: []tc.Action{{Kind: tc.KindGact, Verdict: tc.Goto(4)}}}))
	terse = terse[:0]
	must(t, c.DumpTerse(v0, nil, func(f *tc.Terse) { terse = append(terse, *f) }))
	if len(terse) != 0 {
		t.Errorf("a terse dump went past a fw filter: %+v", terse)
	}
	if fs, _ := c.Dump(v0, tc.DumpOptions{}); len(fs) != 3 || fs[0].Kind != tc.KindFw || fs[0].Handle != 0x100 {
		t.Errorf("full dump with the fw filter: %+v", fs)
	}
	must(t, c.Do(tc.Op{Kind: tc.Delete, Filter: &tc.Filter{Ifindex: v0, Chain: 3, Prio: 5, Proto: unix.ETH_P_ALL}}))
	if fs, _ := c.Dump(v0, tc.DumpOptions{Chains: []uint32{3}}); len(fs) != 1 {
		t.Errorf("after deleting the priority: %+v", fs)
	}
	qs, _ := c.Qdiscs()
	want := []tc.Qdisc{{Ifindex: 1, Parent: 0xffffffff, Kind: "noqueue"}, {Ifindex: rep, Parent: 0xffffffff, Kind: "noqueue"},
		{Ifindex: rep, Handle: 0xffff0000, Parent: tc.TC_H_CLSACT, Kind: "clsact"}, {Ifindex: refusing, Handle: 0xffff0000, Parent: tc.TC_H_CLSACT, Kind: "clsact"},
		{Ifindex: v0, Handle: 0xffff0000, Parent: tc.TC_H_CLSACT, Kind: "clsact"}}
	if !slices.Equal(qs, want) {
		t.Errorf("qdiscs\n%+v\nwant\n%+v", qs, want)
	}
	if c.Messages() == 0 {
		t.Error("no messages counted")
	}
	must(t, c.Close())
	if _, err := c.Dump(v0, tc.DumpOptions{}); err == nil {
		t.Error("a closed client dumped")
	}
}

// The watcher reports what other clients changed, by filter, and a
// device Whole for a qdisc, a priority deleted or more than 64 changes.
func TestWatchTC(t *testing.T) {
	w := nltest.New()
	k := open(t, w, "")
	must(t, k.AddPair(nl.Pair{Name: "v0", Peer: "v1"}))
	v0, v1 := index(t, k, "v0"), index(t, k, "v1")
	mine, _ := k.TC(2)
	other, _ := k.TC(1)
	wt, err := k.WatchTC()
	must(t, err)
	defer wt.Close()
	must(t, wt.Ignore(mine.PortIDs()...))
	must(t, mine.AddClsact(v0))
	must(t, mine.Do(tc.Op{Kind: tc.Add, Filter: flower(v0, 3, 5, 0, "02:00:00:00:00:01", v1, 0)}))
	if devs, lost := wt.Changes(); len(devs) != 0 || lost {
		t.Errorf("own changes reported: %+v %v", devs, lost)
	}
	must(t, other.Do(tc.Op{Kind: tc.Add, Filter: flower(v0, 3, 5, 0, "02:00:00:00:00:02", v1, 0)}))
	must(t, other.Do(tc.Op{Kind: tc.Delete, Filter: &tc.Filter{Ifindex: v0, Chain: 3, Prio: 5, Proto: unix.ETH_P_ALL, Handle: 2}}))
	devs, _ := wt.Changes()
	want := []tc.FilterChange{{Chain: 3, Prio: 5, Proto: unix.ETH_P_ALL, Handle: 2}, {Delete: true, Chain: 3, Prio: 5, Proto: unix.ETH_P_ALL, Handle: 2}}
	if len(devs) != 1 || devs[v0].Whole || !slices.Equal(devs[v0].Filters, want) {
		t.Errorf("changes %+v, want %+v on v0", devs, want)
	}
	must(t, other.AddClsact(v1))
	must(t, other.Do(tc.Op{Kind: tc.Delete, Filter: &tc.Filter{Ifindex: v0, Chain: 3, Prio: 5, Proto: unix.ETH_P_ALL}}))
	if devs, _ := wt.Changed(); len(devs) != 2 || !devs[v0] || !devs[v1] {
		t.Errorf("changed %v", devs)
	}
	var ops []tc.Op
	for i := range 70 {
		ops = append(ops, tc.Op{Kind: tc.Add, Filter: flower(v0, 3, 6, 0, "02:00:00:00:01:"+string("0123456789"[i/10])+string("0123456789"[i%10]), v1, 0)})
	}
	errs, err := other.WriteAny(ops)
	must(t, err)
	for _, e := range errs {
		must(t, e)
	}
	if devs, _ := wt.Changes(); !devs[v0].Whole {
		t.Errorf("70 changes not whole: %d listed", len(devs[v0].Filters))
	}
	w.NS("").LoseTC()
	if _, lost := wt.Changes(); !lost {
		t.Error("LoseTC: not lost")
	}
	if _, lost := wt.Changes(); lost {
		t.Error("lost twice")
	}
	if wt.Notifications() == 0 {
		t.Error("no notifications read")
	}
}

// With OffloadTunnels, VXLAN devices there and made later take skip_sw
// filters in hardware (a switchdev NIC's indirect block); without, they
// refuse them; other links are not changed.
func TestOffloadTunnels(t *testing.T) {
	w := nltest.New()
	k := open(t, w, "")
	ns := w.NS("")
	must(t, k.AddVXLAN(nl.VXLAN{Name: "vx0", External: true, Port: 4789}))
	must(t, k.AddPair(nl.Pair{Name: "v0", Peer: "v1"}))
	ns.OffloadTunnels(true)
	must(t, k.AddVXLAN(nl.VXLAN{Name: "vx1", VNI: 5, Local: netip.MustParseAddr("192.0.2.1"), Port: 4790}))
	c, err := k.TC(1)
	must(t, err)
	defer c.Close()
	v1 := index(t, k, "v1")
	for _, x := range []struct {
		dev  string
		want unix.Errno
	}{{"vx0", 0}, {"vx1", 0}, {"v0", unix.EOPNOTSUPP}} {
		i := index(t, k, x.dev)
		must(t, c.AddClsact(i))
		if err := c.Do(tc.Op{Kind: tc.Add, Filter: flower(i, 3, 5, 0, "02:00:00:00:00:01", v1, tc.TCA_CLS_FLAGS_SKIP_SW)}); errno(err) != x.want {
			t.Errorf("skip_sw on %s: %v, want %v", x.dev, err, x.want)
		}
	}
	if fs := ns.Filters("vx1"); len(fs) != 1 || fs[0].Flags != tc.TCA_CLS_FLAGS_SKIP_SW|tc.TCA_CLS_FLAGS_IN_HW {
		t.Errorf("vx1: %+v", fs)
	}
	ns.OffloadTunnels(false)
	vx0 := index(t, k, "vx0")
	if err := c.Do(tc.Op{Kind: tc.Add, Filter: flower(vx0, 3, 6, 0, "02:00:00:00:00:02", v1, tc.TCA_CLS_FLAGS_SKIP_SW)}); errno(err) != unix.EOPNOTSUPP {
		t.Errorf("skip_sw on vx0 with tunnels not offloaded: %v", err)
	}
}

// Someone else's filter staged: a clsact made for it, the kernel's
// handle picked, in hardware on a switchdev port, seen by a watcher as
// another client's change; ForeignTable staged prints as
// ForeignTableState.
func TestAddForeignFilter(t *testing.T) {
	w := nltest.New()
	ns := w.NS("")
	ns.AddDevice(nltest.Device{Name: "rep0", SwitchID: "1a2b"})
	k := w.MustOpen(t, "")
	watch, err := k.WatchTC()
	must(t, err)
	defer watch.Close()
	ns.AddForeignFilter("rep0", tc.Filter{Prio: 7, Proto: unix.ETH_P_ALL, Kind: "flower", Actions: []tc.Action{{Kind: tc.KindGact, Verdict: tc.TC_ACT_SHOT}}})
	ns.AddForeignTable(nltest.ForeignTable())
	want := "link lo device mtu 65536 up\nlink rep0 device mtu 1500 down switchid 1a2b hw-tc\n" + nltest.ForeignTableState +
		"\nqdisc rep0 clsact\nfilter rep0 ingress chain 0 prio 7 protocol all handle 0x1 flower in_hw action gact drop\n"
	if m := nltest.Mismatch(want, ns.State()); m != "" {
		t.Errorf("the namespace %s", m)
	}
	if ch, lost := watch.Changes(); lost || len(ch) != 1 {
		t.Errorf("the watcher saw %v (lost %v), want rep0's change", ch, lost)
	}
	defer func() {
		if recover() == nil {
			t.Error("a refused filter did not panic")
		}
	}()
	ns.AddForeignFilter("rep0", tc.Filter{Prio: 7, Proto: unix.ETH_P_IP, Kind: "flower"}) // another protocol at the priority: EINVAL
}
