// Package policyvm checks, inside the kernel VM, what the development
// kernel cannot show: Skiff's nftables policy on SCTP (the host kernel has
// no SCTP). A node (a namespace with a bridge) and three pods; the server
// admits SCTP on one port from the client's group only. TestSCTPSockets
// checks the SCTP sockets the truth table's probes open
// (policytruth.ListenSCTP, DialSCTP).
package policyvm

import (
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/datapath/firewall"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/policytruth"
	"github.com/skiff-sdn/skiff/test/testkit"
)

func TestSCTPPolicy(t *testing.T) {
	guest.Require(t)
	// The guest's busybox has an "ip" applet of its own; the real
	// iproute2 is in /usr/sbin. It keeps namespaces in /run/netns (see
	// testkit.Path).
	t.Setenv("PATH", "/usr/sbin:"+os.Getenv("PATH"))
	if err := os.MkdirAll("/run/netns", 0o755); err != nil {
		t.Fatal(err)
	}
	node := testkit.New(t)
	testkit.Run(t, node, "ip", "link", "add", "skb100", "type", "bridge")
	testkit.Run(t, node, "ip", "link", "set", "skb100", "up")
	ips := map[string]string{"client": "198.51.100.11", "server": "198.51.100.12", "other": "198.51.100.13"}
	pods := map[string]string{}
	for _, p := range []string{"client", "server", "other"} {
		n := testkit.New(t)
		pods[p] = n
		testkit.Run(t, node, "ip", "link", "add", "skp"+p[:2], "type", "veth", "peer", "name", "eth0", "netns", n)
		testkit.Run(t, node, "ip", "link", "set", "skp"+p[:2], "master", "skb100", "up")
		testkit.Run(t, n, "ip", "addr", "add", ips[p]+"/24", "dev", "eth0")
		testkit.Run(t, n, "ip", "link", "set", "eth0", "up")
		testkit.Run(t, n, "ip", "link", "set", "lo", "up")
	}
	for _, port := range []int{9000, 9001} {
		sctpServe(t, pods["server"], ips["server"], port)
	}
	reach := func(from string, port int) bool {
		return sctpConnect(t, pods[from], ips["server"], port) == nil
	}
	for _, from := range []string{"client", "other"} {
		for _, port := range []int{9000, 9001} {
			if !reach(from, port) {
				t.Fatalf("%s -> server SCTP %d fails before any policy", from, port)
			}
		}
	}
	k, err := nl.Open(testkit.Path(node))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if err := firewall.EnableBridgeNetfilter(k); err != nil {
		t.Fatal(err)
	}
	if _, err := k.SetTable(firewall.Policy{
		Groups: map[string][]netip.Addr{"clients": {netip.MustParseAddr(ips["client"])}},
		Endpoints: []firewall.Endpoint{{Name: "server", Device: "skb100", IPs: []netip.Addr{netip.MustParseAddr(ips["server"])}, IngressIsolated: true,
			Ingress: []firewall.Rule{{Peers: []firewall.Peer{{Group: "clients"}}, Ports: []firewall.Port{{Proto: unix.IPPROTO_SCTP, From: 9000, To: 9000}}}}}},
	}.Table()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		from string
		port int
		want bool
	}{{"client", 9000, true}, {"client", 9001, false}, {"other", 9000, false}, {"other", 9001, false}} {
		if got := reach(c.from, c.port); got != c.want {
			t.Errorf("%s -> server SCTP %d: reachable=%v, want %v", c.from, c.port, got, c.want)
		}
	}
	cs, err := k.TableCounters(nl.NftInet, firewall.PolicyTable)
	if err != nil {
		t.Fatal(err)
	}
	counters := firewall.PolicyCounters(cs)
	var allowed, dropped uint64
	for _, c := range counters {
		if c.Rule == 0 {
			allowed += c.Packets
		} else {
			dropped += c.Packets
		}
	}
	if allowed == 0 || dropped == 0 {
		t.Errorf("counters: %d allowed, %d dropped packets; want both > 0", allowed, dropped)
	}
}

// sctpServe listens on SCTP in a namespace, accepting until the test
// ends.
func sctpServe(t *testing.T, netns, ip string, port int) {
	err := ns.WithNetNSPath(testkit.Path(netns), func(ns.NetNS) error {
		l, err := policytruth.ListenSCTP(ip, port)
		if err == nil {
			t.Cleanup(func() { l.Close() })
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// sctpConnect opens an SCTP association from a namespace, giving up after
// a second.
func sctpConnect(t *testing.T, netns, ip string, port int) error {
	var result error
	err := ns.WithNetNSPath(testkit.Path(netns), func(ns.NetNS) error {
		result = policytruth.DialSCTP(ip, port, time.Second)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return result
}
