package offload

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestReplicationVM runs in the kernel VM: one node with six pods on
// blue (veths whose host sides are their ports), a seventh standing in
// for the VF behind a netdevsim representor, a pod on red, and a peer
// namespace whose plain VXLAN device (VNI 100) plays a remote node.
// blue floods to the peer and to 1,000 other VTEPs (routed to the peer's
// namespace, which drops them). Real frames, counted by packet sockets:
// a broadcast from a pod reaches every other pod of blue, the peer and
// the gateway exactly once, and not red; a multicast from the stand-in
// the same; a broadcast from the peer every pod of blue once and neither
// the gateway nor red; IPv6 neighbour discovery resolves (ping -6 among
// the pods and to the peer), and so does ARP for an address the plan
// does not hold.
func TestReplicationVM(t *testing.T) {
	guest.Require(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	node := peerNode(t, "skrpnode", "skrppeer", "skrp", 100, "198.51.100.99/24", "2001:db8:100::99/64")
	nsExec(t, "skrpnode", "/usr/sbin/ip", "route", "add", "198.18.0.0/15", "via", "192.0.2.2")
	guest.SwitchdevEswitch(t, "skrpnode", 72, 1)
	var rep string
	for _, r := range guest.Representors(t, "skrpnode") {
		rep = r
	}

	// The peer's namespace takes the 1,001 copies of a frame from a
	// veth, which queues them in one CPU's backlog (1,000 frames by
	// default; a NIC's ring plays that part on a real node): room for
	// them all, so that the one for the peer's VTEP, sent last, is not
	// dropped.
	guest.Backlog(t, 4096)

	p := plan.New("n1")
	p.UnderlayIP = netip.MustParseAddr("192.0.2.1")
	blue := plan.Network{Name: "blue", VNI: 100, MTU: 1450, FloodVTEPs: []netip.Addr{netip.MustParseAddr("192.0.2.2")},
		Subnets: []plan.Subnet{
			{Name: "blue4", Network: "blue", CIDR: netip.MustParsePrefix("198.51.100.0/24"), Gateway: netip.MustParseAddr("198.51.100.1")},
			{Name: "blue6", Network: "blue", CIDR: netip.MustParsePrefix("2001:db8:100::/64"), Gateway: netip.MustParseAddr("2001:db8:100::1")}}}
	for i := range 1000 {
		blue.FloodVTEPs = append(blue.FloodVTEPs, netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}))
	}
	p.Networks["blue"] = blue
	p.Networks["red"] = plan.Network{Name: "red", VNI: 200, MTU: 1450, FloodVTEPs: []netip.Addr{netip.MustParseAddr("192.0.2.2")},
		Subnets: []plan.Subnet{{Name: "red4", Network: "red", CIDR: netip.MustParsePrefix("203.0.113.0/24"), Gateway: netip.MustParseAddr("203.0.113.1")}}}
	p.Remote["peer"] = plan.Remote{Name: "peer", Network: "blue", VTEP: netip.MustParseAddr("192.0.2.2"), MAC: peerMAC,
		IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.99/24"), netip.MustParsePrefix("2001:db8:100::99/64")}}
	pods := map[string]string{}
	names := []string{"a", "b", "c", "d", "e", "f", "w", "r"}
	for i, name := range names {
		pods[name] = "skrpp" + name
		network, ips := "blue", []string{fmt.Sprintf("198.51.100.%d/24", 10+i), fmt.Sprintf("2001:db8:100::%x/64", 0x10+i)}
		if name == "r" {
			network, ips = "red", []string{"203.0.113.10/24"}
		}
		e := vethPod(t, "skrpnode", pods[name], name, network, fmt.Sprintf("02:00:00:00:00:%02x", 0x10+i), ips...)
		if name == "w" {
			e.Kind, e.VFIndex = plan.KindVF, 0
		}
		p.Local[name] = e
	}
	reps := func(e plan.Endpoint) (Port, bool) {
		if e.Kind == plan.KindVF {
			return Port{Rep: rep, Target: datapath.HostIfName(e.Name)}, true
		}
		return Port{Rep: datapath.HostIfName(e.Name)}, true
	}
	dp, err := New(Options{Logger: log, NetNS: node, Representor: reps})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	start := time.Now()
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	t.Logf("first Apply (1,001 VTEPs): %v, %d writes", time.Since(start), dp.Writes())

	const ethertype = 0x88b5 // local experimental
	type where struct{ ns, dev string }
	at := map[string]where{"peer": {"skrppeer", "vx100"}, "gateway": {"skrpnode", "skg100"}}
	for _, name := range names {
		at[name] = where{pods[name], "eth0"}
	}
	// flood sends a frame to dst from one place and checks how many
	// copies each place received.
	n := 0
	flood := func(from string, dst net.HardwareAddr, want map[string]int) {
		t.Helper()
		n++
		marker := []byte(fmt.Sprintf("skiff-replication-%d", n))
		ls := map[string]*testkit.Frames{}
		for name, w := range at {
			ls[name] = testkit.ListenFrames(t, w.ns, w.dev, ethertype)
		}
		testkit.SendFrame(t, at[from].ns, at[from].dev, dst, ethertype, marker)
		time.Sleep(time.Second)
		for name := range at {
			if got := ls[name].Count(marker, 50*time.Millisecond); got != want[name] {
				t.Errorf("frame %d (to %s from %s): %s received %d copies, want %d", n, dst, from, name, got, want[name])
			}
		}
	}
	blueOnce := func(except ...string) map[string]int {
		m := map[string]int{}
		for _, name := range names[:7] {
			m[name] = 1
		}
		for _, e := range except {
			m[e] = 0
		}
		return m
	}
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	mcast := net.HardwareAddr{0x33, 0x33, 0, 0, 0, 0xfb}
	want := blueOnce("a")
	want["peer"], want["gateway"] = 1, 1
	flood("a", bcast, want)
	want = blueOnce("w")
	want["peer"], want["gateway"] = 1, 1
	flood("w", mcast, want)
	flood("peer", bcast, blueOnce())
	flood("r", bcast, map[string]int{}) // red floods to the peer with VNI 200, which its vx100 does not take

	// Neighbour discovery and ARP for an address only the pods know.
	nsExec(t, pods["a"], "/bin/ping", "-6", "-c", "2", "-W", "3", "2001:db8:100::11")
	nsExec(t, pods["a"], "/bin/ping", "-6", "-c", "2", "-W", "3", "2001:db8:100::99")
	nsExec(t, pods["w"], "/bin/ping", "-6", "-c", "2", "-W", "3", "2001:db8:100::10")
	nsExec(t, pods["b"], "/usr/sbin/ip", "addr", "add", "198.51.100.200/24", "dev", "eth0")
	nsExec(t, pods["c"], "/bin/ping", "-c", "2", "-W", "3", "198.51.100.200")

	// Unchanged, a whole Apply (another instance, as after a restart)
	// writes nothing.
	again, err := New(Options{Logger: log, NetNS: node, Representor: reps})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := again.Apply(p); err != nil {
		t.Fatal(err)
	}
	if w := again.Writes(); w != 0 {
		t.Errorf("a restarted datapath's Apply of the same plan wrote %d times", w)
	}
	// Without the peer's VTEP in blue's flood list, the peer gets nothing.
	q := p.Clone()
	b := q.Networks["blue"]
	b.FloodVTEPs = b.FloodVTEPs[1:]
	q.Networks["blue"] = b
	if err := dp.Apply(q); err != nil {
		t.Fatal(err)
	}
	want = blueOnce("a")
	want["gateway"] = 1
	flood("a", bcast, want)
}
