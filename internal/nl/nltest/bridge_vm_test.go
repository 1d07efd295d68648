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
	step("delete flood", k.DeleteFDB(nl.FDB{LinkIndex: vx, MAC: zero, Dst: netip.MustParseAddr("192.0.2.2"), Self: true, SrcVNI: 100, VNI: 100}))
	step("delete flood absent", k.DeleteFDB(nl.FDB{LinkIndex: vx, MAC: zero, Dst: netip.MustParseAddr("192.0.2.9"), Self: true, SrcVNI: 100, VNI: 100}))
	step("delete vlan", k.DeleteBridgeVLAN(nl.BridgeVLAN{LinkIndex: vx, VID: 11}))
	step("delete vlan absent", k.DeleteBridgeVLAN(nl.BridgeVLAN{LinkIndex: vx, VID: 13}))
	step("delete access vlan", k.DeleteBridgeVLAN(nl.BridgeVLAN{LinkIndex: p, VID: 11, Access: true}))
	observe("after deletions")
	step("release", k.SetMaster(p, 0))
	observe("released")
	return out
}
