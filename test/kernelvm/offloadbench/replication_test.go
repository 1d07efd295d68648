package offloadbench

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/datapath/offload"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// floodVTEPs is the size of the network TestReplication floods to.
const floodVTEPs = 5000

// TestReplication measures the replication path at 5,000 VTEPs: a node
// with two pods whose network floods to 5,000 VTEPs (routed to a peer
// namespace that counts and drops them). Figures: the rules on a
// representor (none grows with the VTEPs), the first Apply and its
// writes against `bridge -batch` appending the same 5,000 entries to a
// hand-built external VXLAN device, one VTEP joining and leaving (a whole
// Apply: medians of repeated changes, the first beside), and one
// broadcast's cost (from the pod's send to the last of its 5,000 copies
// leaving the node's underlay device) against a hand-built bridge with a
// plain VXLAN device flooding to the same 5,000 VTEPs, the software
// datapath's way.
func TestReplication(t *testing.T) {
	guest.Require(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// Room for a broadcast's 5,000 copies in the peer's backlog.
	guest.Backlog(t, 16384)

	node := func(ns, peer string) {
		guest.AddNetns(t, ns)
		guest.AddNetns(t, peer)
		guest.Run(t, guest.IP, "link", "add", "skrcu0", "netns", ns, "type", "veth", "peer", "name", "skrcu1", "netns", peer)
		guest.In(t, ns, guest.IP, "addr", "add", "192.0.2.1/24", "dev", "skrcu0")
		guest.In(t, ns, guest.IP, "link", "set", "skrcu0", "up")
		guest.In(t, ns, guest.IP, "route", "add", "198.18.0.0/15", "via", "192.0.2.2")
		guest.In(t, peer, guest.IP, "addr", "add", "192.0.2.2/24", "dev", "skrcu1")
		guest.In(t, peer, guest.IP, "link", "set", "skrcu1", "up")
		// The next hop of every VTEP resolved before any copy is sent.
		guest.In(t, ns, "/bin/ping", "-c", "1", "-W", "2", "192.0.2.2")
		for _, pod := range []string{"a", "b"} {
			guest.AddNetns(t, ns+pod)
			guest.Run(t, guest.IP, "link", "add", "skrcp"+pod, "netns", ns, "type", "veth", "peer", "name", "eth0", "netns", ns+pod)
			guest.In(t, ns, guest.IP, "link", "set", "skrcp"+pod, "alias", "skiff:ep:"+pod, "up")
			guest.In(t, ns+pod, guest.IP, "link", "set", "eth0", "up")
		}
	}
	vtep := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}) }

	// Skiff's node.
	node("skrc", "skrcpeer")
	p := plan.New("n1")
	p.UnderlayIP = netip.MustParseAddr("192.0.2.1")
	nw := plan.Network{Name: "blue", VNI: 100, MTU: 1450}
	for i := range floodVTEPs {
		nw.FloodVTEPs = append(nw.FloodVTEPs, vtep(i))
	}
	p.Networks["blue"] = nw
	for i, pod := range []string{"a", "b"} {
		p.Local[pod] = plan.Endpoint{Name: pod, Network: "blue", Kind: plan.KindVeth, MAC: fmt.Sprintf("02:00:00:00:00:%02x", 10+i),
			IPs: []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("198.51.100.%d/24", 10+i))}, VFIndex: -1}
	}
	dp, err := offload.New(offload.Options{Logger: log, NetNS: testkit.Path("skrc"),
		Representor: func(e plan.Endpoint) (offload.Port, bool) { return offload.Port{Rep: "skrcp" + e.Name}, true }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dp.Close)
	start := time.Now()
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	install := time.Since(start)
	fdb := guest.In(t, "skrc", guest.Bridge, "fdb", "show", "dev", offload.VXLANName)
	if n := strings.Count(fdb, "src_vni 100"); n != floodVTEPs {
		t.Fatalf("%s floods VNI 100 to %d VTEPs, want %d", offload.VXLANName, n, floodVTEPs)
	}
	repRules := countIn(t, "skrc", "skrcpa")
	// a's representor: unicast and ARP to b, chain 0's filter.
	if repRules != 3 {
		t.Fatalf("a's representor holds %d rules at %d VTEPs, want 3", repRules, floodVTEPs)
	}
	t.Logf("FIGURE replication install: %d VTEPs in %v (%d writes), %d rules on a representor, RSS %d KiB",
		floodVTEPs, install.Round(time.Millisecond), dp.Writes(), repRules, rssKiB())
	figure("replication_install_ms", install)
	figure("replication_rep_rules", repRules)
	figure("replication_rss_kib", rssKiB())

	// The reference: bridge -batch appending the same entries to a
	// hand-built external VXLAN device.
	guest.AddNetns(t, "skrcref")
	guest.In(t, "skrcref", guest.IP, "link", "add", "vx", "type", "vxlan", "external", "dstport", "4789", "nolearning")
	var b strings.Builder
	for i := range floodVTEPs {
		fmt.Fprintf(&b, "fdb append 00:00:00:00:00:00 dev vx dst %s src_vni 100 vni 100 self permanent\n", vtep(i))
	}
	batch := filepath.Join(t.TempDir(), "fdb.batch")
	if err := os.WriteFile(batch, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	guest.In(t, "skrcref", guest.Bridge, "-batch", batch)
	ref := time.Since(start)
	t.Logf("FIGURE replication install reference: bridge -batch of %d entries %v: ratio %.2f", floodVTEPs, ref.Round(time.Millisecond), float64(install)/float64(ref))
	figure("replication_install_ref_ms", ref)

	// One VTEP joining, then leaving: a whole Apply each.
	var joins, leaves []time.Duration
	for i := range changeRounds + 1 {
		q := p.Clone()
		n := q.Networks["blue"]
		n.FloodVTEPs = append(n.FloodVTEPs, vtep(floodVTEPs+i))
		q.Networks["blue"] = n
		start := time.Now()
		if err := dp.Apply(q); err != nil {
			t.Fatal(err)
		}
		joins = append(joins, time.Since(start))
		start = time.Now()
		if err := dp.Apply(p); err != nil {
			t.Fatal(err)
		}
		leaves = append(leaves, time.Since(start))
	}
	t.Logf("FIGURE replication VTEP join: first %v, median %v; leave: first %v, median %v; the last leave's parts: %s",
		joins[0].Round(time.Microsecond), median(joins[1:]).Round(time.Microsecond), leaves[0].Round(time.Microsecond), median(leaves[1:]).Round(time.Microsecond),
		phaseFigures("replication_leave", dp))
	figure("replication_join_first_ms", joins[0])
	figure("replication_join_median_ms", median(joins[1:]))
	figure("replication_leave_median_ms", median(leaves[1:]))

	// The hand-built software reference: a bridge with a plain VXLAN
	// device whose flood list is the same 5,000 VTEPs.
	node("skrs", "skrspeer")
	guest.In(t, "skrs", guest.IP, "link", "add", "skrsbr", "type", "bridge")
	guest.In(t, "skrs", guest.IP, "link", "add", "vx", "type", "vxlan", "id", "100", "local", "192.0.2.1", "dstport", "4789", "nolearning")
	for _, dev := range []string{"vx", "skrcpa", "skrcpb"} {
		guest.In(t, "skrs", guest.IP, "link", "set", dev, "master", "skrsbr", "up")
	}
	guest.In(t, "skrs", guest.IP, "link", "set", "skrsbr", "up")
	b.Reset()
	for i := range floodVTEPs {
		fmt.Fprintf(&b, "fdb append 00:00:00:00:00:00 dev vx dst %s self permanent\n", vtep(i))
	}
	if err := os.WriteFile(batch, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	guest.In(t, "skrs", guest.Bridge, "-batch", batch)

	skiff := broadcastCost(t, "skrc")
	soft := broadcastCost(t, "skrs")
	t.Logf("FIGURE replication broadcast to %d VTEPs: first %v, median %v; hand-built bridge + VXLAN: first %v, median %v; ratio %.2f",
		floodVTEPs, skiff[0].Round(time.Microsecond), median(skiff[1:]).Round(time.Microsecond),
		soft[0].Round(time.Microsecond), median(soft[1:]).Round(time.Microsecond), float64(median(skiff[1:]))/float64(median(soft[1:])))
	figure("replication_broadcast_median_ms", median(skiff[1:]))
	figure("replication_broadcast_ref_median_ms", median(soft[1:]))
}

// broadcastCost sends broadcasts from pod a of node ns, one at a time, and
// returns for each the time until every copy left the node's underlay
// device (its transmit counter, read over netlink every millisecond):
// the first, then changeRounds more.
func broadcastCost(t *testing.T, ns string) []time.Duration {
	t.Helper()
	k, err := nl.Open(testkit.Path(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	sent := func() int {
		st, err := k.Stats()
		if err != nil {
			t.Fatal(err)
		}
		return int(st["skrcu0"].TxPackets)
	}
	var out []time.Duration
	for i := range changeRounds + 1 {
		before := sent()
		start := time.Now()
		testkit.SendFrame(t, ns+"a", "eth0", net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 0x88b5, []byte(fmt.Sprintf("skiff-cost-%d", i)))
		for sent()-before < floodVTEPs {
			if time.Since(start) > time.Minute {
				t.Fatalf("%s: %d of %d copies sent after a minute", ns, sent()-before, floodVTEPs)
			}
			time.Sleep(time.Millisecond)
		}
		out = append(out, time.Since(start))
	}
	return out
}
