package nltest_test

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/nltest"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
)

// TestConformanceBridgeVLAN runs one script against the VM's kernel (the
// host's has no VLAN filtering) and against the fake, and compares what
// both answered and read back: a VLAN-aware bridge with a veth port and an
// external VXLAN port, the ports' flooding, isolation and VLAN tunnel
// flags, VLANs with and without tunnel ids, a tunnel id refused on a port
// without the flag, the VXLAN device's flood entries per source VNI, and
// removals.
func TestConformanceBridgeVLAN(t *testing.T) {
	guest.Require(t)
	name := fmt.Sprintf("nlbv%d", guestNS.Add(1))
	guest.AddNetns(t, name)
	path := "/run/netns/" + name
	k, err := nl.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	want := bridgeVLANScript(k)
	w := nltest.New()
	w.AddNS(path)
	fk, _ := w.Open(path)
	got := bridgeVLANScript(fk)
	compare(t, got, want)
	t.Logf("the fake's state:\n%s", w.NS(path).State())
}

func bridgeVLANScript(k nl.Kernel) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	step := func(what string, err error) { add("%s: %s", what, errClass(err)) }
	step("bridge", k.AddBridge(nl.Bridge{Name: "skrt", VLANFiltering: true}))
	step("pair", k.AddPair(nl.Pair{Name: "skx0", Peer: "skx1"}))
	step("vxlan", k.AddVXLAN(nl.VXLAN{Name: "skxv", External: true, Port: 4789}))
	idx := func(n string) int {
		l, err := k.LinkByName(n)
		if err != nil {
			return 9999
		}
		return l.Index
	}
	br, p, vx := idx("skrt"), idx("skx0"), idx("skxv")
	step("vlan on a link of no bridge", k.AddBridgeVLAN(nl.BridgeVLAN{LinkIndex: p, VID: 10, Access: true}))
	_, err := k.BridgePort(p)
	step("port flags of no port", err)
	step("port", k.SetMaster(p, br))
	step("vxlan port", k.SetMaster(vx, br))
	observe := func(label string) {
		for _, n := range []string{"skx0", "skxv"} {
			f, err := k.BridgePort(idx(n))
			all, verr := k.BridgeVLANs()
			vs := all[idx(n)]
			var vlans []string
			for _, v := range vs {
				vlans = append(vlans, fmt.Sprintf("%d access %v tunnel %d", v.VID, v.Access, v.TunnelID))
			}
			add("%s %s: flood %v isolated %v vlan_tunnel %v (%s) vlans %v (%s)", label, n, f.Flood, f.Isolated, f.VLANTunnel, errClass(err), vlans, errClass(verr))
		}
		es, err := k.FDB(vx)
		var fdb []string
		for _, e := range es {
			if e.Self {
				fdb = append(fdb, fmt.Sprintf("%s dst %s vni %d src_vni %d", e.MAC, e.Dst, e.VNI, e.SrcVNI))
			}
		}
		slices.Sort(fdb) // the kernel lists them in hash order
		add("%s fdb %v (%s)", label, fdb, errClass(err))
	}
	observe("new ports")
	step("tunnel id without vlan_tunnel", k.AddBridgeVLAN(nl.BridgeVLAN{LinkIndex: vx, VID: 10, TunnelID: 100}))
	step("flags", k.SetBridgePort(vx, nl.BridgePort{Isolated: true, VLANTunnel: true}))
	step("port flags", k.SetBridgePort(p, nl.BridgePort{}))
	step("access vlan", k.AddBridgeVLAN(nl.BridgeVLAN{LinkIndex: p, VID: 10, Access: true}))
	step("second access vlan", k.AddBridgeVLAN(nl.BridgeVLAN{LinkIndex: p, VID: 11, Access: true}))
	step("tunnel vlan", k.AddBridgeVLAN(nl.BridgeVLAN{LinkIndex: vx, VID: 10, TunnelID: 100}))
	step("tunnel vlan 2", k.AddBridgeVLAN(nl.BridgeVLAN{LinkIndex: vx, VID: 11, TunnelID: 101}))
	step("tunnel vlan 3", k.AddBridgeVLAN(nl.BridgeVLAN{LinkIndex: vx, VID: 12, TunnelID: 300}))
	step("vlan 4095", k.AddBridgeVLAN(nl.BridgeVLAN{LinkIndex: p, VID: 4095}))
	zero := "00:00:00:00:00:00"
	for _, v := range []string{"192.0.2.2", "192.0.2.3"} {
		step("flood "+v, k.AddFDB(nl.FDB{LinkIndex: vx, MAC: zero, Dst: netip.MustParseAddr(v), Self: true, Permanent: true, SrcVNI: 100, VNI: 100}))
	}
	step("flood other vni", k.AddFDB(nl.FDB{LinkIndex: vx, MAC: zero, Dst: netip.MustParseAddr("192.0.2.2"), Self: true, Permanent: true, SrcVNI: 101, VNI: 101}))
	step("flood again", k.AddFDB(nl.FDB{LinkIndex: vx, MAC: zero, Dst: netip.MustParseAddr("192.0.2.2"), Self: true, Permanent: true, SrcVNI: 100, VNI: 100}))
	observe("configured")
	// A VLAN device on the bridge holding neighbours (left down), and
	// bridge entries in a VLAN.
	step("vlan device", k.AddVLAN(nl.VLAN{Name: "skrt.10", Parent: br, VID: 10}))
	step("vlan device again", k.AddVLAN(nl.VLAN{Name: "skrt.10", Parent: br, VID: 10}))
	step("vlan device of that id", k.AddVLAN(nl.VLAN{Name: "skrtx", Parent: br, VID: 10}))
	step("vlan device id 4095", k.AddVLAN(nl.VLAN{Name: "skrty", Parent: br, VID: 4095}))
	vd := idx("skrt.10")
	mac := "02:00:00:00:00:05"
	step("bridge entry", k.AddFDB(nl.FDB{LinkIndex: p, MAC: "02:00:00:00:00:0a", Master: true, Static: true, VLAN: 10}))
	step("bridge entry, vlan not on the port", k.AddFDB(nl.FDB{LinkIndex: p, MAC: "02:00:00:00:00:0a", Master: true, Static: true, VLAN: 12}))
	step("bridge entry on the tunnel port", k.AddFDB(nl.FDB{LinkIndex: vx, MAC: mac, Master: true, Static: true, VLAN: 10}))
	step("unicast entry", k.AddFDB(nl.FDB{LinkIndex: vx, MAC: mac, Dst: netip.MustParseAddr("192.0.2.2"), Self: true, Permanent: true, SrcVNI: 100, VNI: 100}))
	step("neighbours", k.SetNeighs([]nl.Neigh{{LinkIndex: vd, IP: netip.MustParseAddr("198.51.100.5"), MAC: mac, Permanent: true},
		{LinkIndex: vd, IP: netip.MustParseAddr("2001:db8::5"), MAC: mac, Permanent: true},
		{LinkIndex: vd, IP: netip.MustParseAddr("198.51.100.6"), MAC: mac, Permanent: true}}))
	step("neighbours on no link", k.SetNeighs([]nl.Neigh{{LinkIndex: 9999, IP: netip.MustParseAddr("198.51.100.5"), MAC: mac, Permanent: true}}))
	step("delete neighbours", k.DeleteNeighs([]nl.Neigh{{LinkIndex: vd, IP: netip.MustParseAddr("198.51.100.6")},
		{LinkIndex: vd, IP: netip.MustParseAddr("198.51.100.7")}}))
	suppressed := func(label string) {
		ls, err := k.Links()
		var vlans []string
		for _, l := range ls {
			if l.Kind == "vlan" {
				vlans = append(vlans, fmt.Sprintf("%s id %d parent %v up %v", l.Name, l.VID, l.Parent == br, l.Up))
			}
		}
		add("%s vlan devices %v (%s)", label, vlans, errClass(err))
		es, err := k.FDBs()
		var fdb []string
		for _, e := range es {
			if (e.LinkIndex == p || e.LinkIndex == vx) && !e.Permanent || e.Self && e.LinkIndex == vx && e.MAC != zero {
				fdb = append(fdb, fmt.Sprintf("%d %s master %v static %v vlan %d dst %s src_vni %d", e.LinkIndex-p, e.MAC, e.Master, e.Static, e.VLAN, e.Dst, e.SrcVNI))
			}
		}
		slices.Sort(fdb)
		add("%s entries %v (%s)", label, fdb, errClass(err))
		ns, err := k.Neighs(vd)
		var neighs []string
		for _, n := range ns {
			neighs = append(neighs, fmt.Sprintf("%s %s permanent %v", n.IP, n.MAC, n.Permanent))
		}
		slices.Sort(neighs)
		add("%s neighbours %v (%s)", label, neighs, errClass(err))
	}
	suppressed("suppressing")
	step("delete bridge entry", k.DeleteFDB(nl.FDB{LinkIndex: vx, MAC: mac, Master: true, Static: true, VLAN: 10}))
	step("delete unicast entry", k.DeleteFDB(nl.FDB{LinkIndex: vx, MAC: mac, Dst: netip.MustParseAddr("192.0.2.2"), Self: true, Permanent: true, SrcVNI: 100, VNI: 100}))
	suppressed("entries deleted")
	step("delete flood", k.DeleteFDB(nl.FDB{LinkIndex: vx, MAC: zero, Dst: netip.MustParseAddr("192.0.2.2"), Self: true, SrcVNI: 100, VNI: 100}))
	step("delete flood absent", k.DeleteFDB(nl.FDB{LinkIndex: vx, MAC: zero, Dst: netip.MustParseAddr("192.0.2.9"), Self: true, SrcVNI: 100, VNI: 100}))
	step("delete vlan", k.DeleteBridgeVLAN(nl.BridgeVLAN{LinkIndex: vx, VID: 11}))
	step("delete vlan absent", k.DeleteBridgeVLAN(nl.BridgeVLAN{LinkIndex: vx, VID: 13}))
	step("delete access vlan", k.DeleteBridgeVLAN(nl.BridgeVLAN{LinkIndex: p, VID: 11, Access: true}))
	observe("after deletions")
	step("vlan 10 off the port, its entry on it", k.DeleteBridgeVLAN(nl.BridgeVLAN{LinkIndex: p, VID: 10, Access: true}))
	suppressed("vlan gone")
	step("delete the entry of a vlan gone", k.DeleteFDB(nl.FDB{LinkIndex: p, MAC: "02:00:00:00:00:0a", Master: true, Static: true, VLAN: 10}))
	step("release", k.SetMaster(p, 0))
	observe("released")
	suppressed("released")
	step("delete bridge", k.DeleteLink(br))
	suppressed("bridge deleted")
	return out
}
