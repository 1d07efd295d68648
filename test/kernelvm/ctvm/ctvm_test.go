// Package ctvm checks, inside the kernel VM, stateful policy as tc-flower
// rules with conntrack (flower.PolicyRule): two pods (namespaces) on veths
// into a node namespace, whose host-side veths forward to each other with
// flower mirred rules in chain 2; in front of them, on both veths, chain
// 0 sends IPv4 through `ct zone 1` to chain 1 and ARP to chain 2; chain 1
// passes +trk+est to chain 2, commits +trk+new TCP from an allowed prefix
// to a port range and sends it to chain 2, and drops the rest of IPv4.
package ctvm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/tc"
	"github.com/skiff-sdn/skiff/offload/flower"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

const (
	ipA     = "198.51.100.10" // the client pod, in the allowed prefix
	ipB     = "198.51.100.20" // the server pod
	allowed = "198.51.100.8/29"
	fwd     = 2 // the forwarding chain
)

func TestStatefulPolicy(t *testing.T) {
	guest.Require(t)
	t.Setenv("PATH", "/usr/sbin:"+os.Getenv("PATH"))
	if err := os.MkdirAll("/run/netns", 0o755); err != nil {
		t.Fatal(err)
	}
	node, a, b := testkit.New(t), testkit.New(t), testkit.New(t)
	for _, p := range []struct{ ns, dev, ip string }{{a, "skva", ipA}, {b, "skvb", ipB}} {
		testkit.Run(t, node, "ip", "link", "add", p.dev, "type", "veth", "peer", "name", "eth0", "netns", p.ns)
		testkit.Run(t, node, "ip", "link", "set", p.dev, "up")
		testkit.Run(t, node, "tc", "qdisc", "add", "dev", p.dev, "clsact")
		testkit.Run(t, p.ns, "ip", "addr", "add", p.ip+"/24", "dev", "eth0")
		testkit.Run(t, p.ns, "ip", "link", "set", "eth0", "up")
	}
	va, vb := ifindex(t, node, "skva"), ifindex(t, node, "skvb")

	// Forwarding in chain 2, and for now everything from chain 0 to it,
	// with the tc codec (a filter's chain, and gact goto chain as a
	// control action).
	conn, err := tc.Dial(testkit.Path(node))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, p := range [][2]int{{va, vb}, {vb, va}} {
		addFilter(t, conn, p[0], fwd, 1, tc.Action{Kind: tc.KindMirred, Verdict: tc.TC_ACT_STOLEN, MirredOp: tc.TCA_EGRESS_REDIR, Ifindex: p[1]})
		addFilter(t, conn, p[0], 0, 100, tc.Action{Kind: tc.KindGact, Verdict: tc.Goto(fwd)})
	}
	objs, err := conn.Dump(va, tc.DumpOptions{})
	if err != nil {
		t.Fatalf("dump before the policy: %v", err)
	}
	chains := map[uint32]int{}
	for _, o := range objs {
		chains[o.Chain]++
	}
	if chains[0] != 1 || chains[fwd] != 1 {
		t.Fatalf("read back filters per chain %v, want one in chain 0 and one in chain %d", chains, fwd)
	}

	// Servers: B on 8080 (allowed range) and 9000 (outside), A on 8080.
	serve(t, b, ipB, 8080)
	serve(t, b, ipB, 9000)
	serve(t, a, ipA, 8080)
	// Without the policy everything goes through: what is dropped later
	// is dropped by the policy.
	for _, c := range []struct {
		from, to string
		port     int
	}{{a, ipB, 8080}, {a, ipB, 9000}, {b, ipA, 8080}} {
		if err := echo(c.from, c.to, c.port, 4096); err != nil {
			t.Fatalf("before the policy, %s -> %s:%d: %v", c.from, c.to, c.port, err)
		}
	}
	if err := guest.Tools.Ping(a, ipB, 2, time.Second); err != nil {
		t.Fatalf("before the policy, ping %s: %v", ipB, err)
	}
	for _, dev := range []int{va, vb} {
		// Handle 0: every filter at that priority and protocol.
		if err := conn.Do(tc.Op{Kind: tc.Delete, Filter: &tc.Filter{Ifindex: dev, Chain: 0, Prio: 100, Proto: unix.ETH_P_ALL}}); err != nil {
			t.Fatalf("deleting the chain 0 catch-all of ifindex %d: %v", dev, err)
		}
	}

	nk, err := nl.Open(testkit.Path(node))
	if err != nil {
		t.Fatal(err)
	}
	defer nk.Close()
	pc, err := flower.OpenPolicy(nk)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	rules := map[int][]flower.PolicyRule{va: policy("skva", va), vb: policy("skvb", vb)}
	for _, dev := range []int{va, vb} {
		for _, r := range rules[dev] {
			if err := pc.Add(r, 0); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Forget the neighbours resolved before the policy: ARP has to pass
	// through the policy's ARP rule.
	for _, n := range []string{a, b} {
		testkit.Run(t, n, "ip", "neigh", "flush", "all")
	}

	// Allowed: A -> B:8080 connects, 256 KiB each way (B's replies enter
	// skvb and pass as +trk+est in zone 1).
	if err := echo(a, ipB, 8080, 256<<10); err != nil {
		t.Errorf("A -> B:8080 (allowed): %v", err)
	}
	// Dropped: a port outside the range, ICMP, and B -> A new (B's
	// address is outside the allowed prefix).
	if err := echo(a, ipB, 9000, 16); err == nil {
		t.Error("A -> B:9000 (outside 8000-8099) connected")
	}
	if err := guest.Tools.Ping(a, ipB, 2, time.Second); err == nil {
		t.Errorf("ping %s from A went through", ipB)
	}
	if err := echo(b, ipA, 8080, 16); err == nil {
		t.Error("B -> A:8080 (new, from outside the allowed prefix) connected")
	}
	// The allowed connection works again: established state kept its way.
	if err := echo(a, ipB, 8080, 4096); err != nil {
		t.Errorf("A -> B:8080 (allowed), second time: %v", err)
	}

	// Read back: every rule as installed, ct_state keys and port range
	// intact, Skiff's cookie; counters show which rule saw what.
	got := map[int]map[string]flower.PolicyFilter{}
	for _, dev := range []int{va, vb} {
		fs, err := pc.Dump(dev)
		if err != nil {
			t.Fatal(err)
		}
		got[dev] = map[string]flower.PolicyFilter{}
		var want, have []string
		for _, r := range rules[dev] {
			want = append(want, r.String())
		}
		for _, f := range fs {
			if f.Skiff() {
				if f.Rule.Index != dev || string(f.Cookie) != string(flower.PolicyCookie(f.Rule)) {
					t.Errorf("ifindex %d: filter %s: index %d, cookie %x does not match its rule", dev, f.Rule, f.Rule.Index, f.Cookie)
				}
				have = append(have, f.Rule.String())
				got[dev][f.Rule.String()] = f
				t.Logf("ifindex %d handle %#x flags %#x packets %v: %s", dev, f.Handle, f.Flags, f.Packets, f.Rule)
			} else if f.Rule.Chain != fwd {
				t.Errorf("ifindex %d: unexpected filter without Skiff's policy cookie: %s", dev, f.Rule)
			}
		}
		slices.Sort(want)
		slices.Sort(have)
		if !slices.Equal(want, have) {
			t.Errorf("ifindex %d read back\n%s\nwant\n%s", dev, strings.Join(have, "\n"), strings.Join(want, "\n"))
		}
	}
	// iproute2 reads the same keys (the attribute numbers are the kernel's).
	out := testkit.Run(t, node, "tc", "filter", "show", "dev", "skva", "ingress", "chain", "1")
	for _, s := range []string{"ct_state +trk+est", "ct_state +trk+new", "dst_port 8000-8099", "src_ip " + allowed, "ip_proto tcp", "ct commit zone 1"} {
		if !strings.Contains(out, s) {
			t.Errorf("tc filter show dev skva ingress chain 1 lacks %q:\n%s", s, out)
		}
	}
	pk := func(dev int, r flower.PolicyRule) uint64 {
		f, ok := got[dev][r.String()]
		if !ok || len(f.Packets) == 0 {
			return 0
		}
		return f.Packets[0]
	}
	arp, est, allow, drop := rules[va][1], rules[va][2], rules[va][3], rules[va][4]
	arpB, estB, allowB, dropB := rules[vb][1], rules[vb][2], rules[vb][3], rules[vb][4]
	for _, c := range []struct {
		what string
		n    uint64
		ok   bool
	}{
		{"skva arp (A's request or reply)", pk(va, arp), pk(va, arp) >= 1},
		{"skvb arp (B's request or reply)", pk(vb, arpB), pk(vb, arpB) >= 1},
		{"skva +trk+new allow (A's SYNs to 8080)", pk(va, allow), pk(va, allow) >= 2},
		{"skva +trk+est (A's data and acks)", pk(va, est), pk(va, est) >= 4},
		{"skva drop (ICMP, SYNs to 9000)", pk(va, drop), pk(va, drop) >= 3},
		{"skvb +trk+est (B's replies)", pk(vb, estB), pk(vb, estB) >= 4},
		{"skvb +trk+new allow (B is outside the prefix)", pk(vb, allowB), pk(vb, allowB) == 0},
		{"skvb drop (B's SYNs to A)", pk(vb, dropB), pk(vb, dropB) >= 1},
	} {
		if !c.ok {
			t.Errorf("counter %s: %d packets", c.what, c.n)
		}
	}
	// Delete: the policy's filters go, the forwarding stays.
	for _, dev := range []int{va, vb} {
		for _, f := range got[dev] {
			if err := pc.Delete(f); err != nil {
				t.Error(err)
			}
		}
		fs, err := pc.Dump(dev)
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for _, f := range fs {
			left = append(left, fmt.Sprintf("%s (skiff %v)", f.Rule, f.Skiff()))
		}
		if len(fs) != 1 || fs[0].Skiff() || fs[0].Rule.Chain != fwd {
			t.Errorf("ifindex %d after deleting the policy: %v, want only the forwarding filter", dev, left)
		}
	}
}

// policy is the policy of one device: zone 1 both ways.
func policy(dev string, index int) []flower.PolicyRule {
	est := flower.PolicyMatch{EthType: flower.EthIPv4, CtState: flower.CtTracked | flower.CtEstablished, CtStateMask: flower.CtTracked | flower.CtEstablished}
	allow := flower.PolicyMatch{EthType: flower.EthIPv4, IPProto: unix.IPPROTO_TCP, Src: mustPrefix(allowed), DstPortMin: 8000, DstPortMax: 8099,
		CtState: flower.CtTracked | flower.CtNew, CtStateMask: flower.CtTracked | flower.CtNew}
	toFwd := flower.PolicyAction{Kind: flower.PolicyGoto, Chain: fwd}
	return []flower.PolicyRule{
		{Dev: dev, Index: index, Chain: 0, Prio: 1, Match: flower.PolicyMatch{EthType: flower.EthIPv4},
			Actions: []flower.PolicyAction{{Kind: flower.PolicyCt, Zone: 1}, {Kind: flower.PolicyGoto, Chain: 1}}},
		{Dev: dev, Index: index, Chain: 0, Prio: 2, Match: flower.PolicyMatch{EthType: flower.EthARP}, Actions: []flower.PolicyAction{toFwd}},
		{Dev: dev, Index: index, Chain: 1, Prio: 1, Match: est, Actions: []flower.PolicyAction{toFwd}},
		{Dev: dev, Index: index, Chain: 1, Prio: 2, Match: allow, Actions: []flower.PolicyAction{{Kind: flower.PolicyCt, Zone: 1, Commit: true}, toFwd}},
		{Dev: dev, Index: index, Chain: 1, Prio: 3, Match: flower.PolicyMatch{EthType: flower.EthIPv4}, Actions: []flower.PolicyAction{{Kind: flower.PolicyDrop}}},
	}
}

// addFilter adds a keyless flower filter (all protocols) with one action
// in chain at prio on dev's ingress.
func addFilter(t *testing.T, c *tc.Conn, dev int, chain uint32, prio uint16, act tc.Action) {
	t.Helper()
	f := tc.Filter{Ifindex: dev, Chain: chain, Prio: prio, Proto: unix.ETH_P_ALL, Kind: "flower", Actions: []tc.Action{act}}
	if err := c.Do(tc.Op{Kind: tc.Add, Filter: &f}); err != nil {
		t.Fatalf("filter chain %d prio %d on ifindex %d: %v", chain, prio, dev, err)
	}
}

// serve echoes on ip:port in netns until the test ends.
func serve(t *testing.T, netns, ip string, port int) {
	var l net.Listener
	err := testkit.InNetns(netns, func() error {
		var err error
		l, err = net.Listen("tcp4", fmt.Sprintf("%s:%d", ip, port))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(20 * time.Second))
				_, _ = io.Copy(c, c)
			}()
		}
	}()
}

// echo connects from netns to ip:port within 1.5 s, sends n bytes and
// reads them back.
func echo(netns, ip string, port, n int) error {
	var c net.Conn
	err := testkit.InNetns(netns, func() error {
		var err error
		c, err = net.DialTimeout("tcp4", fmt.Sprintf("%s:%d", ip, port), 1500*time.Millisecond)
		return err
	})
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i * 7)
	}
	werr := make(chan error, 1)
	go func() { _, err := c.Write(data); werr <- err }()
	back := make([]byte, n)
	if _, err := io.ReadFull(c, back); err != nil {
		return fmt.Errorf("reading the echo: %w", err)
	}
	if err := <-werr; err != nil {
		return fmt.Errorf("writing: %w", err)
	}
	if !bytes.Equal(data, back) {
		return errors.New("echo differs from what was sent")
	}
	return nil
}

func ifindex(t *testing.T, netns, dev string) int {
	var idx int
	err := testkit.InNetns(netns, func() error {
		i, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		idx = i.Index
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
