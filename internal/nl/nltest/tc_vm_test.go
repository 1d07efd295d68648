package nltest_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/nltest"
	"github.com/skiff-sdn/skiff/internal/nl/tc"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
)

// TestConformanceTC makes the same tc writes through the fake and
// through the kernel of the VM (the host's has no flower) and compares
// what they answer (refusals with their errno and message), the full
// and terse dumps, the qdiscs and what a watcher reports of someone
// else's changes. A netdevsim representor stands for a device with
// hardware: it refuses skip_sw with its driver's message, which the
// fake is given (RefuseHardware) to carry the same way.
func TestConformanceTC(t *testing.T) {
	guest.Require(t)
	name := fmt.Sprintf("nltc%d", guestNS.Add(1))
	guest.AddNetns(t, name)
	path := "/run/netns/" + name
	guest.SwitchdevEswitch(t, name, 91, 1)
	var rep string
	for _, r := range guest.Representors(t, name) {
		rep = r
	}
	k, err := nl.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	rl, err := k.LinkByName(rep)
	if err != nil {
		t.Fatal(err)
	}
	if rl.SwitchID == "" {
		t.Fatalf("representor %s has no switch id", rep)
	}
	// The driver's refusal, as the kernel gives it.
	c, err := k.TC(1)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddClsact(rl.Index); err != nil {
		t.Fatal(err)
	}
	probe := tc.Filter{Ifindex: rl.Index, Chain: 9, Prio: 9, Proto: unix.ETH_P_ALL, Handle: 1, Flags: tc.TCA_CLS_FLAGS_SKIP_SW,
		Actions: []tc.Action{{Kind: tc.KindGact, Verdict: tc.TC_ACT_SHOT}}}
	var refusal *tc.Error
	if !errors.As(c.Do(tc.Op{Kind: tc.Add, Filter: &probe}), &refusal) {
		t.Fatalf("%s took a skip_sw flower filter: want netdevsim's refusal", rep)
	}
	c.Close()
	want := tcScript(k, rep)

	w := nltest.New()
	ns := w.AddNS(path)
	ns.AddDevice(nltest.Device{Name: rep, SwitchID: rl.SwitchID})
	ns.RefuseHardware(rep, refusal.Errno, refusal.Message)
	fk, _ := w.Open(path)
	fc, _ := fk.TC(1)
	fl, _ := fk.LinkByName(rep)
	if err := fc.AddClsact(fl.Index); err != nil {
		t.Fatal(err)
	}
	got := tcScript(fk, rep)
	compare(t, got, want)
	t.Logf("the fake's state:\n%s", ns.State())
}

// tcScript makes the writes through k and returns what it read.
func tcScript(k nl.Kernel, rep string) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	fail := func(what string, err error) []string { return append(out, what+": "+err.Error()) }
	if err := k.AddPair(nl.Pair{Name: "skw0", Peer: "skw1"}); err != nil {
		return fail("pair", err)
	}
	if err := k.AddBridge(nl.Bridge{Name: "skwt"}); err != nil {
		return fail("bridge", err)
	}
	idx := func(n string) int {
		l, err := k.LinkByName(n)
		if err != nil {
			return 9999
		}
		return l.Index
	}
	for _, n := range []string{"skw0", "skw1", "skwt", rep} {
		_ = k.SetUp(idx(n))
	}
	name := func(i int) string {
		for _, n := range []string{"skw0", "skw1", "skwt", rep} {
			if idx(n) == i {
				return n
			}
		}
		return fmt.Sprintf("if%d", i)
	}
	c, err := k.TC(2)
	if err != nil {
		return fail("tc", err)
	}
	defer c.Close()
	other, err := k.TC(1)
	if err != nil {
		return fail("tc", err)
	}
	defer other.Close()
	w, err := k.WatchTC()
	if err != nil {
		return fail("watch", err)
	}
	defer w.Close()
	if err := w.Ignore(c.PortIDs()...); err != nil {
		return fail("ignore", err)
	}
	refusal := func(err error) string {
		var te *tc.Error
		if errors.As(err, &te) {
			return fmt.Sprintf("%s %q", unix.ErrnoName(te.Errno), te.Message)
		}
		return errClass(err)
	}
	w0, w1, wt, r := idx("skw0"), idx("skw1"), idx("skwt"), idx(rep)
	mac := func(s string) net.HardwareAddr { m, _ := net.ParseMAC(s); return m }
	ck := func(s string) []byte { return []byte("sk" + s) }
	fwd := func(ifindex int, chain uint32, prio uint16, handle uint32, m string, flags uint32) *tc.Filter {
		return &tc.Filter{Ifindex: ifindex, Chain: chain, Prio: prio, Proto: unix.ETH_P_ALL, Handle: handle, Flags: flags,
			Match:   tc.Match{DstMAC: mac(m)},
			Actions: []tc.Action{{Kind: tc.KindMirred, Verdict: tc.TC_ACT_STOLEN, MirredOp: tc.TCA_EGRESS_REDIR, Ifindex: wt, Cookie: ck(m[12:])}}}
	}
	pol := &tc.Filter{Ifindex: w0, Chain: 0, Prio: 0x5300, Proto: unix.ETH_P_IP, Handle: 7,
		Match: tc.Match{IPProto: unix.IPPROTO_TCP, Src: netip.MustParsePrefix("10.1.0.0/16"), Dst: netip.MustParsePrefix("10.2.0.5/32"),
			DstPortMin: 80, DstPortMax: 80, CtState: tc.TCA_FLOWER_KEY_CT_FLAGS_TRACKED, CtStateMask: tc.TCA_FLOWER_KEY_CT_FLAGS_TRACKED},
		Actions: []tc.Action{{Kind: tc.KindCt, Verdict: tc.TC_ACT_PIPE, Zone: 5, Commit: true, Cookie: ck("ct")}, {Kind: tc.KindGact, Verdict: tc.Goto(3)}}}
	encap := &tc.Filter{Ifindex: w0, Chain: 3, Prio: 0x5302, Proto: unix.ETH_P_ALL, Handle: 1,
		Match: tc.Match{DstMAC: mac("02:00:00:00:cc:01")},
		Actions: []tc.Action{{Kind: tc.KindTunnelKey, Verdict: tc.TC_ACT_PIPE, TunnelOp: tc.TCA_TUNNEL_KEY_ACT_SET, TunnelID: 100,
			TunnelSrc: netip.MustParseAddr("192.0.2.1"), TunnelDst: netip.MustParseAddr("192.0.2.2"), TunnelDstPort: 4789},
			{Kind: tc.KindMirred, Verdict: tc.TC_ACT_PIPE, MirredOp: tc.TCA_EGRESS_MIRROR, Ifindex: w1, Cookie: ck("encap")}}}
	fw := func(handle, mask uint32) *tc.Filter {
		return &tc.Filter{Ifindex: w0, Chain: 0, Prio: 0x52ff, Proto: unix.ETH_P_ALL, Kind: tc.KindFw, Handle: handle,
			Match: tc.Match{Mark: handle, MarkMask: mask}, Actions: []tc.Action{{Kind: tc.KindGact, Verdict: tc.Goto(3), Cookie: ck("fw")}}}
	}
	replaced := fwd(w0, 3, 0x5301, 1, "02:00:00:00:bb:01", 0)
	replaced.Actions = append([]tc.Action{{Kind: tc.KindGact, Verdict: tc.TC_ACT_PIPE}}, replaced.Actions...)
	egress := fwd(w0, 0, 0x5301, 1, "02:00:00:00:bb:09", 0)
	egress.Parent = tc.TC_H_CLSACT&0xffff0000 | tc.TC_H_MIN_EGRESS
	badMirred := fwd(w0, 3, 0x5301, 0, "02:00:00:00:bb:07", 0)
	badMirred.Actions[0].Ifindex = 9999
	noProto := fwd(w0, 3, 0x5309, 0, "02:00:00:00:bb:08", 0)
	noProto.Proto = 0
	ops := []struct {
		what string
		op   tc.Op
	}{
		{"before clsact", tc.Op{Kind: tc.Add, Filter: fwd(w0, 3, 0x5301, 0, "02:00:00:00:bb:01", 0)}},
		{"clsact", tc.Op{}},
		{"add auto handle", tc.Op{Kind: tc.Add, Filter: fwd(w0, 3, 0x5301, 0, "02:00:00:00:bb:01", 0)}},
		{"add auto handle 2", tc.Op{Kind: tc.Add, Filter: fwd(w0, 3, 0x5301, 0, "02:00:00:00:bb:02", 0)}},
		{"add taken handle", tc.Op{Kind: tc.Add, Filter: fwd(w0, 3, 0x5301, 2, "02:00:00:00:bb:03", 0)}},
		{"add same match", tc.Op{Kind: tc.Add, Filter: fwd(w0, 3, 0x5301, 5, "02:00:00:00:bb:01", 0)}},
		{"add other protocol", tc.Op{Kind: tc.Add, Filter: pol2(pol, 3, 0x5301)}},
		{"add skip_sw on veth", tc.Op{Kind: tc.Add, Filter: fwd(w0, 3, 0x5303, 0, "02:00:00:00:bb:04", tc.TCA_CLS_FLAGS_SKIP_SW)}},
		{"add skip_hw", tc.Op{Kind: tc.Add, Filter: fwd(w0, 3, 0x5303, 0, "02:00:00:00:bb:04", tc.TCA_CLS_FLAGS_SKIP_HW)}},
		{"add both skips", tc.Op{Kind: tc.Add, Filter: fwd(w0, 3, 0x5304, 0, "02:00:00:00:bb:05", tc.TCA_CLS_FLAGS_SKIP_HW|tc.TCA_CLS_FLAGS_SKIP_SW)}},
		{"add policy", tc.Op{Kind: tc.Add, Filter: pol}},
		{"add encap", tc.Op{Kind: tc.Add, Filter: encap}},
		{"add fw", tc.Op{Kind: tc.Add, Filter: fw(0x200000, 0x200000)}},
		{"add fw other mask", tc.Op{Kind: tc.Add, Filter: fw(0x100, 0xff00)}},
		{"add fw 2", tc.Op{Kind: tc.Add, Filter: fw(0x400000, 0x200000)}},
		{"add mirred to missing", tc.Op{Kind: tc.Add, Filter: badMirred}},
		{"add without protocol", tc.Op{Kind: tc.Add, Filter: noProto}},
		{"add auto prio", tc.Op{Kind: tc.Add, Filter: fwd(w0, 4, 0, 0, "02:00:00:00:bb:06", 0)}},
		{"add auto prio 2", tc.Op{Kind: tc.Add, Filter: fwd(w0, 4, 0, 0, "02:00:00:00:bb:07", 0)}},
		{"add egress", tc.Op{Kind: tc.Add, Filter: egress}},
		{"add no qdisc", tc.Op{Kind: tc.Add, Filter: fwd(w1, 3, 0x5301, 0, "02:00:00:00:bb:01", 0)}},
		{"add missing link", tc.Op{Kind: tc.Add, Filter: fwd(9999, 3, 0x5301, 0, "02:00:00:00:bb:01", 0)}},
		{"replace", tc.Op{Kind: tc.Replace, Filter: replaced}},
		{"replace missing", tc.Op{Kind: tc.Replace, Filter: fwd(w0, 3, 0x5301, 9, "02:00:00:00:bb:09", 0)}},
		{"replace prio 0", tc.Op{Kind: tc.Replace, Filter: fwd(w0, 3, 0, 1, "02:00:00:00:bb:09", 0)}},
		{"replace to other's match", tc.Op{Kind: tc.Replace, Filter: fwd(w0, 3, 0x5301, 1, "02:00:00:00:bb:02", 0)}},
		{"delete", tc.Op{Kind: tc.Delete, Filter: &tc.Filter{Ifindex: w0, Chain: 3, Prio: 0x5301, Proto: unix.ETH_P_ALL, Handle: 2}}},
		{"delete again", tc.Op{Kind: tc.Delete, Filter: &tc.Filter{Ifindex: w0, Chain: 3, Prio: 0x5301, Proto: unix.ETH_P_ALL, Handle: 2}}},
		{"delete missing prio", tc.Op{Kind: tc.Delete, Filter: &tc.Filter{Ifindex: w0, Chain: 3, Prio: 0x5399, Proto: unix.ETH_P_ALL, Handle: 1}}},
		{"delete missing chain", tc.Op{Kind: tc.Delete, Filter: &tc.Filter{Ifindex: w0, Chain: 77, Prio: 0x5301, Proto: unix.ETH_P_ALL, Handle: 1}}},
		{"delete wrong kind", tc.Op{Kind: tc.Delete, Filter: &tc.Filter{Ifindex: w0, Chain: 0, Prio: 0x52ff, Proto: unix.ETH_P_ALL, Handle: 0x200000}}},
		{"add skip_sw on hardware", tc.Op{Kind: tc.Add, Filter: fwd(r, 3, 0x5301, 0, "02:00:00:00:bb:01", tc.TCA_CLS_FLAGS_SKIP_SW)}},
		{"add on hardware", tc.Op{Kind: tc.Add, Filter: fwd(r, 3, 0x5301, 0, "02:00:00:00:bb:01", 0)}},
	}
	for _, o := range ops {
		if o.what == "clsact" {
			add("clsact: %s", refusal(c.AddClsact(w0)))
			add("clsact again: %s", refusal(c.AddClsact(w0)))
			add("clsact missing: %s", refusal(c.AddClsact(9999)))
			continue
		}
		errs, err := c.Write([]tc.Op{o.op})
		if err != nil {
			return fail(o.what, err)
		}
		add("%s: %s", o.what, refusal(errs[0]))
	}
	errs, err := c.WriteAny([]tc.Op{{Kind: tc.Add, Filter: fwd(w0, 3, 0x5305, 0, "02:00:00:00:bd:01", 0)}, {Kind: tc.Add, Filter: fwd(w0, 3, 0x5305, 0, "02:00:00:00:bd:01", 0)}})
	add("write any: %v %v", slices.Collect(func(yield func(string) bool) {
		for _, e := range errs {
			yield(refusal(e))
		}
	}), err)
	qs, err := c.Qdiscs()
	for _, q := range qs {
		if n := name(q.Ifindex); !strings.HasPrefix(n, "if") {
			add("qdisc %s %s %#x %#x", n, q.Kind, q.Handle, q.Parent)
		}
	}
	add("qdiscs: %v", err)
	dumps(add, c, name, w0, r)

	// Someone else's changes, as a watcher reports them.
	_, _ = w.Changes()
	_ = other.Do(tc.Op{Kind: tc.Add, Filter: fwd(w0, 3, 0x5306, 0, "02:00:00:00:be:01", 0)})
	_ = other.Do(tc.Op{Kind: tc.Delete, Filter: &tc.Filter{Ifindex: w0, Chain: 3, Prio: 0x5306, Proto: unix.ETH_P_ALL, Handle: 1}})
	_ = c.Do(tc.Op{Kind: tc.Add, Filter: fwd(w0, 3, 0x5307, 0, "02:00:00:00:be:02", 0)})
	devs, lost := w.Changes()
	for i, d := range devs {
		add("changes %s: %+v lost %v", name(i), d, lost)
	}
	_ = other.Do(tc.Op{Kind: tc.Delete, Filter: &tc.Filter{Ifindex: w0, Chain: 3, Prio: 0x5307, Proto: unix.ETH_P_ALL}})
	_ = other.AddClsact(w1)
	devs, lost = w.Changes()
	for _, n := range []string{"skw0", "skw1"} {
		add("changes %s: %+v lost %v", n, devs[idx(n)], lost)
	}
	// The mirred target goes: its actions point nowhere.
	add("delete skwt: %s", errClass(k.DeleteLink(wt)))
	dumps(add, c, name, w0, r)
	return out
}

// pol2 is p at another place.
func pol2(p *tc.Filter, chain uint32, prio uint16) *tc.Filter {
	x := *p
	x.Chain, x.Prio, x.Handle = chain, prio, 9
	return &x
}

// dumps records the full and terse dumps of the devices.
func dumps(add func(string, ...any), c tc.Client, name func(int) string, devs ...int) {
	for _, d := range devs {
		for _, o := range []tc.DumpOptions{{}, {Chains: []uint32{3, 0}}, {Parent: tc.TC_H_CLSACT&0xffff0000 | tc.TC_H_MIN_EGRESS}} {
			fs, err := c.Dump(d, o)
			add("dump %s %+v: %v", name(d), o, err)
			for _, f := range fs {
				add("  %s %#x %s", name(f.Ifindex), f.Parent, f.Format(name))
			}
		}
		err := c.DumpTerse(d, nil, func(f *tc.Terse) { add("  terse %+v cookie %q", *f, f.Cookie) })
		add("terse %s: %v", name(d), err)
	}
}
