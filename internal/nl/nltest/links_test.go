package nltest_test

import (
	"errors"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/nltest"
)

func TestLinks(t *testing.T) {
	w := nltest.New()
	w.AddNS("/pod")
	k, pod := open(t, w, ""), open(t, w, "/pod")
	must(t, k.AddBridge(nl.Bridge{Name: "br0", MTU: 1450, Alias: "skiff:br"}))
	must(t, k.AddVXLAN(nl.VXLAN{Name: "vx0", VNI: 7, Local: netip.MustParseAddr("192.0.2.1"), Port: 4789}))
	must(t, k.AddVXLAN(nl.VXLAN{Name: "vxe", External: true}))
	must(t, k.AddPair(nl.Pair{Name: "p0", Peer: "p1", MAC: "02:00:00:00:00:01", MTU: 9000}))
	must(t, k.AddVeth(nl.Veth{Name: "h0", PeerName: "eth0", MTU: 1400}, pod))
	must(t, k.AddTap(nl.Tap{Name: "tap0", Owner: 1000}))

	for _, c := range []struct {
		name string
		want nl.Link
	}{
		{"br0", nl.Link{Index: 2, Name: "br0", Kind: "bridge", Alias: "skiff:br", MTU: 1450, MAC: "fe:00:00:00:00:02"}},
		{"vx0", nl.Link{Index: 3, Name: "vx0", Kind: "vxlan", MTU: 1500, MAC: "fe:00:00:00:00:03", VNI: 7, Local: netip.MustParseAddr("192.0.2.1"), Port: 4789}},
		{"vxe", nl.Link{Index: 4, Name: "vxe", Kind: "vxlan", MTU: 1500, MAC: "fe:00:00:00:00:04", Port: 8472, External: true}},
		// The peer is made first.
		{"p1", nl.Link{Index: 5, Name: "p1", Kind: "veth", MTU: 9000, MAC: "fe:00:00:00:00:05"}},
		{"p0", nl.Link{Index: 6, Name: "p0", Kind: "veth", MTU: 9000, MAC: "02:00:00:00:00:01"}},
		{"h0", nl.Link{Index: 7, Name: "h0", Kind: "veth", MTU: 1400, MAC: "fe:00:00:00:00:07"}},
		{"tap0", nl.Link{Index: 8, Name: "tap0", Kind: nl.TapKind, MTU: 1500, MAC: "fe:00:00:00:00:08"}},
	} {
		got, err := k.LinkByName(c.name)
		if err != nil || got != c.want {
			t.Errorf("%s: %+v, %v\nwant %+v", c.name, got, err, c.want)
		}
	}
	if got, _ := pod.LinkByName("eth0"); got != (nl.Link{Index: 2, Name: "eth0", Kind: "veth", MTU: 1400, MAC: "fe:00:00:01:00:02"}) {
		t.Errorf("the peer in the pod: %+v", got)
	}
	for _, c := range []struct {
		what string
		err  error
		want error
	}{
		{"a name taken", k.AddBridge(nl.Bridge{Name: "p1"}), unix.EEXIST},
		{"a pair's peer taken", k.AddPair(nl.Pair{Name: "x0", Peer: "br0"}), unix.EEXIST},
		{"a veth's peer taken", k.AddVeth(nl.Veth{Name: "h1", PeerName: "eth0"}, pod), unix.EEXIST},
		{"a name too long", k.AddBridge(nl.Bridge{Name: "a-name-too-long-for-linux"}), unix.EINVAL},
		{"a second vxlan of vni 7", k.AddVXLAN(nl.VXLAN{Name: "vx1", VNI: 7, Local: netip.MustParseAddr("192.0.2.1"), Port: 4789}), unix.EEXIST},
		{"a tap's mtu", k.AddTap(nl.Tap{Name: "tap1", MTU: 10}), unix.EINVAL},
		{"no such name", func() error { _, err := k.LinkByName("nope"); return err }(), nl.ErrNoLink},
		{"a gone index", k.SetUp(99), nl.ErrLinkGone},
		{"a gone index's mtu", k.SetMTU(99, 1500), nl.ErrLinkGone},
		{"delete gone", k.DeleteLink(99), nil},
		{"delete a device", k.DeleteLink(1), unix.EOPNOTSUPP},
		{"master not a bridge", k.SetMaster(index(t, k, "tap0"), index(t, k, "p0")), unix.EOPNOTSUPP},
		{"master missing", k.SetMaster(index(t, k, "tap0"), 99), unix.EINVAL},
		{"a bridge in a bridge", k.SetMaster(index(t, k, "br0"), index(t, k, "br0")), unix.ELOOP},
		{"mac multicast", k.SetMAC(index(t, k, "p0"), "01:00:5e:00:00:01"), unix.EADDRNOTAVAIL},
		{"mtu too large", k.SetMTU(index(t, k, "p0"), 70000), unix.EINVAL},
		{"port flags of a non-port", k.SetPortFlags(index(t, k, "p0"), nl.PortFlags{}), unix.EOPNOTSUPP},
		{"move a bridge", k.MoveLink(index(t, k, "br0"), pod), unix.EINVAL},
		{"rename taken", k.Rename(index(t, k, "tap0"), "br0"), unix.EEXIST},
	} {
		if (c.want == nil) != (c.err == nil) || c.want != nil && !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.what, c.err, c.want)
		}
	}
	if _, err := k.PortFlags(index(t, k, "p0")); err == nil {
		t.Error("port flags of a link that is no port")
	}
}

// A bridge's ports: the kernel's default flags and its entry for the
// port's MAC; the bridge takes the lowest port MAC and MTU (unless set);
// deleting the bridge frees its ports, deleting a veth its peer.
func TestBridgePorts(t *testing.T) {
	w := nltest.New()
	k := open(t, w, "")
	must(t, k.AddBridge(nl.Bridge{Name: "br0", MTU: 1500}))
	must(t, k.AddPair(nl.Pair{Name: "p0", Peer: "p1", MAC: "02:00:00:00:00:09", MTU: 1450}))
	must(t, k.AddPair(nl.Pair{Name: "q0", Peer: "q1", MAC: "02:00:00:00:00:05"}))
	br, p0, q0 := index(t, k, "br0"), index(t, k, "p0"), index(t, k, "q0")
	must(t, k.SetMaster(p0, br))
	must(t, k.SetMaster(p0, br)) // again: nothing
	must(t, k.SetMaster(q0, br))
	f, err := k.PortFlags(p0)
	if err != nil || f != (nl.PortFlags{Learning: true}) {
		t.Errorf("a new port's flags: %+v, %v; want learning on only", f, err)
	}
	must(t, k.SetPortFlags(p0, nl.PortFlags{NeighSuppress: true, Hairpin: true}))
	if f, _ := k.PortFlags(p0); f != (nl.PortFlags{NeighSuppress: true, Hairpin: true}) {
		t.Errorf("flags %+v after setting them", f)
	}
	l, _ := k.LinkByName("br0")
	if l.MAC != "02:00:00:00:00:05" || l.MTU != 1450 {
		t.Errorf("bridge mac %s mtu %d, want the lowest port MAC and MTU", l.MAC, l.MTU)
	}
	fdb, _ := k.FDB(p0)
	if len(fdb) != 1 || fdb[0] != (nl.FDB{LinkIndex: p0, MAC: "02:00:00:00:00:09", Master: true, Permanent: true}) {
		t.Errorf("a port's FDB: %+v, want the kernel's entry for its MAC", fdb)
	}
	if s := w.NS("").State(); containsLine(s, "fdb p0 02:00:00:00:00:09") {
		t.Errorf("State lists the kernel's own entry:\n%s", s)
	}
	must(t, k.SetMAC(p0, "02:00:00:00:00:01"))
	if l, _ := k.LinkByName("br0"); l.MAC != "02:00:00:00:00:01" {
		t.Errorf("bridge mac %s after a port's changed, want 02:00:00:00:00:01", l.MAC)
	}
	if fdb, _ := k.FDB(p0); len(fdb) != 1 || fdb[0].MAC != "02:00:00:00:00:01" {
		t.Errorf("the port's entry after its MAC changed: %+v", fdb)
	}
	must(t, k.SetMaster(q0, 0))
	must(t, k.SetMaster(p0, 0))
	if l, _ := k.LinkByName("br0"); l.MAC != "" {
		t.Errorf("a bridge without ports has MAC %q, want none (all zeros)", l.MAC)
	}
	must(t, k.SetMaster(p0, br))
	must(t, k.DeleteLink(br))
	if l, _ := k.LinkByName("p0"); l.Master != 0 {
		t.Errorf("p0 kept the deleted bridge as master: %+v", l)
	}
	if _, err := k.PortFlags(p0); err == nil {
		t.Error("p0 still has port flags")
	}
	must(t, k.DeleteLink(p0))
	if _, err := k.LinkByName("p1"); !errors.Is(err, nl.ErrNoLink) {
		t.Errorf("p1 after its peer went: %v", err)
	}
	// The bridge's MTU set by hand stays.
	must(t, k.AddBridge(nl.Bridge{Name: "br1"}))
	br1 := index(t, k, "br1")
	must(t, k.SetMTU(br1, 9000))
	must(t, k.SetMaster(q0, br1))
	if l, _ := k.LinkByName("br1"); l.MTU != 9000 {
		t.Errorf("br1 mtu %d, want 9000 (set by hand)", l.MTU)
	}
}

// Rename sets an up link down first (and leaves it down when refused);
// MoveLink keeps the index where it is free, sets the link down and
// drops its addresses, routes, neighbours and port.
func TestRenameMove(t *testing.T) {
	w := nltest.New()
	w.AddNS("/pod")
	k, pod := open(t, w, ""), open(t, w, "/pod")
	must(t, k.AddPair(nl.Pair{Name: "p0", Peer: "p1", Alias: "a0"}))
	p0 := index(t, k, "p0")
	must(t, k.SetUp(p0))
	must(t, k.AddAddr(p0, netip.MustParsePrefix("10.0.0.1/24")))
	must(t, k.AddAddr(p0, netip.MustParsePrefix("2001:db8::1/64")))
	must(t, k.Rename(p0, "r0"))
	l, _ := k.LinkByName("r0")
	if l.Up || l.Index != p0 || l.Alias != "a0" {
		t.Errorf("renamed: %+v, want down with its index and alias", l)
	}
	if a, _ := k.Addrs(p0); len(a) != 1 {
		t.Errorf("after the down of a rename: %v, want the IPv4 address only", a)
	}
	must(t, k.SetUp(p0))
	must(t, k.ReplaceRoute(nl.Route{Dst: netip.MustParsePrefix("10.9.0.0/16"), Gw: netip.MustParseAddr("10.0.0.2"), LinkIndex: p0, Protocol: nl.RouteProtocol}))
	must(t, k.SetNeigh(nl.Neigh{LinkIndex: p0, IP: netip.MustParseAddr("10.0.0.2"), MAC: "02:00:00:00:00:02"}))
	must(t, k.MoveLink(p0, pod))
	l, err := pod.LinkByName("r0")
	if err != nil || l.Up || l.Index != p0 {
		t.Errorf("moved: %+v, %v; want down at the same index", l, err)
	}
	if a, _ := pod.Addrs(l.Index); len(a) != 0 {
		t.Errorf("moved with addresses %v", a)
	}
	if rs, _ := k.Routes(); len(rs) != 0 {
		t.Errorf("routes through a moved link stay: %v", rs)
	}
	if _, err := k.SetUp(p0), error(nil); !errors.Is(k.SetUp(p0), nl.ErrLinkGone) {
		t.Errorf("the old index in the old namespace: %v", err)
	}
	must(t, pod.AddBridge(nl.Bridge{Name: "p1"}))
	if err := k.MoveLink(index(t, k, "p1"), pod); !errors.Is(err, unix.EEXIST) {
		t.Errorf("moving p1 where p1 is: %v, want EEXIST", err)
	}
	// An index taken in the target: a new one.
	must(t, k.AddBridge(nl.Bridge{Name: "x"}))
	must(t, pod.AddPair(nl.Pair{Name: "y0", Peer: "y1"}))
	must(t, pod.MoveLink(index(t, pod, "y0"), k))
	if l, _ := k.LinkByName("y0"); l.Index == index(t, pod, "y1")+1 && l.Index <= index(t, k, "x") {
		t.Errorf("y0 took index %d, which is taken", l.Index)
	}
}

func containsLine(s, prefix string) bool {
	for _, l := range splitLines(s) {
		if len(l) >= len(prefix) && l[:len(prefix)] == prefix {
			return true
		}
	}
	return false
}

func splitLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		out = append(out, s[:i])
		if i < len(s) {
			i++
		}
		s = s[i:]
	}
	return out
}
