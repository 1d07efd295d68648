package offload

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestSuppressionVM runs in the kernel VM: one node with pods a and b on
// blue (dual stack), a peer namespace whose plain VXLAN device (VNI 100)
// plays a remote node, and in the plan a remote endpoint "ghost" behind
// the peer's VTEP that nothing there answers for. The node's bridge
// answers ARP and neighbour solicitations for the ghost's addresses (a
// learns its MAC), and neither kind of request reaches the peer; a
// request for an address the plan does not hold still does (the
// control). A remote endpoint added or removed alone (the incremental
// path) is answered for at once, and no longer once removed.
func TestSuppressionVM(t *testing.T) {
	guest.Require(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	node := peerNode(t, "sksunode", "sksupeer", "sksu", 100, "198.51.100.99/24", "2001:db8:100::99/64")

	vtep := netip.MustParseAddr("192.0.2.2")
	p := plan.New("n1")
	p.UnderlayIP = netip.MustParseAddr("192.0.2.1")
	p.Networks["blue"] = plan.Network{Name: "blue", VNI: 100, MTU: 1450, FloodVTEPs: []netip.Addr{vtep},
		Subnets: []plan.Subnet{
			{Name: "blue4", Network: "blue", CIDR: netip.MustParsePrefix("198.51.100.0/24"), Gateway: netip.MustParseAddr("198.51.100.1")},
			{Name: "blue6", Network: "blue", CIDR: netip.MustParsePrefix("2001:db8:100::/64"), Gateway: netip.MustParseAddr("2001:db8:100::1")}}}
	remote := func(name, mac string, ips ...string) plan.Remote {
		r := plan.Remote{Name: name, Network: "blue", VTEP: vtep, MAC: mac}
		for _, ip := range ips {
			r.IPs = append(r.IPs, netip.MustParsePrefix(ip))
		}
		return r
	}
	p.Remote["peer"] = remote("peer", peerMAC, "198.51.100.99/24", "2001:db8:100::99/64")
	p.Remote["ghost"] = remote("ghost", "02:00:00:00:00:77", "198.51.100.77/24", "2001:db8:100::77/64")
	pods := map[string]string{}
	for i, name := range []string{"a", "b"} {
		pods[name] = "sksup" + name
		p.Local[name] = vethPod(t, "sksunode", pods[name], name, "blue", fmt.Sprintf("02:00:00:00:00:%02x", 0x10+i),
			fmt.Sprintf("198.51.100.%d/24", 10+i), fmt.Sprintf("2001:db8:100::%x/64", 0x10+i))
	}
	reps := func(e plan.Endpoint) (Port, bool) { return Port{Rep: datapath.HostIfName(e.Name)}, true }
	dp, err := New(Options{Logger: log, NetNS: node, Representor: reps})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}

	// resolve has a ask for ip (a ping nobody may answer) while the
	// peer listens for requests naming it, and returns the MAC a learnt
	// ("" when none) and the requests the peer received.
	resolve := func(ip string) (mac string, requests [][]byte) {
		t.Helper()
		a := netip.MustParseAddr(ip)
		ethertype, family := uint16(0x0806), "-4"
		if a.Is6() {
			ethertype, family = 0x86dd, "-6"
		}
		// An ARP request holds the target last; a neighbour solicitation
		// holds it after four reserved zero bytes (an echo request to
		// it has it after its source address).
		marker := a.AsSlice()
		if a.Is6() {
			marker = append([]byte{0, 0, 0, 0}, marker...)
		}
		peer := testkit.ListenFrames(t, "sksupeer", "vx100", ethertype)
		out := nsExec(t, pods["a"], "/bin/sh", "-c", fmt.Sprintf("ping %s -c 1 -W 1 %s >/dev/null; ip %s neigh show %s dev eth0", family, ip, family, ip))
		requests = peer.Matching(marker, 500*time.Millisecond)
		if f := strings.Fields(out); len(f) >= 3 && f[1] == "lladdr" {
			mac = f[2]
		}
		return mac, requests
	}
	for _, ip := range []string{"198.51.100.77", "2001:db8:100::77"} {
		mac, rs := resolve(ip)
		if mac != "02:00:00:00:00:77" || len(rs) != 0 {
			t.Errorf("a asking for the ghost's %s: learnt %q (want 02:00:00:00:00:77, answered by the node's bridge), the peer saw %d requests (want 0): % x", ip, mac, len(rs), rs)
		}
	}
	// The gateway answers its own addresses, asked of the local ports
	// only.
	for _, ip := range []string{"198.51.100.1", "2001:db8:100::1"} {
		if mac, rs := resolve(ip); mac != datapath.GatewayMAC(100) || len(rs) != 0 {
			t.Errorf("a asking for the gateway's %s: learnt %q (want %s), the peer saw %d requests (want 0): % x", ip, mac, datapath.GatewayMAC(100), len(rs), rs)
		}
	}
	for _, ip := range []string{"198.51.100.99", "2001:db8:100::99"} {
		nsExec(t, pods["a"], "/bin/ping", "-c", "2", "-W", "3", ip) // the peer itself, its address answered by the bridge
	}
	nsExec(t, pods["a"], "/bin/ping", "-6", "-c", "2", "-W", "3", "2001:db8:100::11") // b, asked of the local ports
	// The control: an address the plan does not hold is asked of every
	// VTEP, the peer among them.
	if mac, rs := resolve("198.51.100.200"); mac != "" || len(rs) == 0 {
		t.Errorf("a asking for 198.51.100.200 (in no plan): learnt %q, the peer saw %d requests (want at least 1)", mac, len(rs))
	}

	// A remote endpoint added alone, then the ghost removed alone.
	q := p.Clone()
	q.Remote["late"] = remote("late", "02:00:00:00:00:78", "198.51.100.78/24", "2001:db8:100::78/64")
	w0 := dp.Writes()
	if err := dp.Apply(q); err != nil {
		t.Fatal(err)
	}
	t.Logf("a remote endpoint added: %d writes", dp.Writes()-w0)
	for _, ip := range []string{"198.51.100.78", "2001:db8:100::78"} {
		if mac, rs := resolve(ip); mac != "02:00:00:00:00:78" || len(rs) != 0 {
			t.Errorf("a asking for late's %s: learnt %q, the peer saw %d requests: % x", ip, mac, len(rs), rs)
		}
	}
	r := q.Clone()
	delete(r.Remote, "ghost")
	if err := dp.Apply(r); err != nil {
		t.Fatal(err)
	}
	held := nsExec(t, "sksunode", "/usr/sbin/ip", "neigh", "show", "dev", "skrb.1")
	fdb := nsExec(t, "sksunode", "/usr/sbin/bridge", "fdb", "show", "dev", "skvx")
	if strings.Contains(held, "198.51.100.77") || strings.Contains(fdb, "02:00:00:00:00:77") || !strings.Contains(held, "198.51.100.78") {
		t.Errorf("after the ghost left: skrb.1's neighbours\n%s\nskvx's entries\n%s", held, fdb)
	}
	// Unchanged, a whole Apply (another instance, as after a restart)
	// writes nothing.
	again, err := New(Options{Logger: log, NetNS: node, Representor: reps})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := again.Apply(r); err != nil {
		t.Fatal(err)
	}
	if w := again.Writes(); w != 0 {
		t.Errorf("a restarted datapath's Apply of the same plan wrote %d times", w)
	}
}
