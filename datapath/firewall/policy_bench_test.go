package firewall_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/datapath/firewall"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// BenchmarkPolicyDatapath measures, on one node (a namespace with a bridge
// and two pods), what an ingress policy allowing a group of 10,000
// addresses costs the traffic it governs, in the same run:
//
//   - none: no policy;
//   - skiff: the policy table (Policy.Table), the group as one nftables
//     set (one lookup);
//   - iptables: the same policy as the reference rule chain (conntrack
//     first, then one ACCEPT rule per address, then DROP), as a plain
//     iptables setup without ipset writes it.
//
// Figures: TCP throughput (iperf3, 3 s) and new TCP connections per second
// (each one traverses the rules: established packets do not).
func BenchmarkPolicyDatapath(b *testing.B) {
	testkit.Require(b)
	node := testkit.New(b)
	testkit.Run(b, node, "ip", "link", "add", "skb100", "type", "bridge")
	testkit.Run(b, node, "ip", "link", "set", "skb100", "up")
	testkit.Run(b, node, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1")
	ips := map[string]string{"client": "198.51.100.11", "server": "198.51.100.12"}
	pods := map[string]string{}
	for _, p := range []string{"client", "server"} {
		n := testkit.New(b)
		pods[p] = n
		testkit.Run(b, node, "ip", "link", "add", "skp"+p[:1], "type", "veth", "peer", "name", "eth0", "netns", n)
		testkit.Run(b, node, "ip", "link", "set", "skp"+p[:1], "master", "skb100", "up")
		testkit.Run(b, n, "ip", "addr", "add", ips[p]+"/24", "dev", "eth0")
		testkit.Run(b, n, "ip", "link", "set", "eth0", "up")
	}
	iperfServer(b, pods["server"], ips["server"])
	var l net.Listener
	if err := ns.WithNetNSPath(testkit.Path(pods["server"]), func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp", ips["server"]+":8080")
		return err
	}); err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// The group: 9,999 other addresses and the client, last.
	var group []netip.Addr
	for i := range 9999 {
		group = append(group, netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
	}
	group = append(group, netip.MustParseAddr(ips["client"]))
	server := netip.MustParseAddr(ips["server"])

	throughput := func() float64 {
		out := testkit.Run(b, pods["client"], "iperf3", "-c", ips["server"], "-t", "3", "-J")
		var r struct {
			End struct {
				SumReceived struct {
					BitsPerSecond float64 `json:"bits_per_second"`
				} `json:"sum_received"`
			} `json:"end"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			b.Fatal(err)
		}
		return r.End.SumReceived.BitsPerSecond / 1e9
	}
	connRate := func() float64 {
		n := 0
		start := time.Now()
		if err := ns.WithNetNSPath(testkit.Path(pods["client"]), func(ns.NetNS) error {
			for time.Since(start) < 2*time.Second {
				c, err := net.DialTimeout("tcp", ips["server"]+":8080", time.Second)
				if err != nil {
					return err
				}
				// RST on close: no TIME_WAIT, so ports do not run out.
				_ = c.(*net.TCPConn).SetLinger(0)
				c.Close()
				n++
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		return float64(n) / time.Since(start).Seconds()
	}
	measure := func(name string) {
		gbps, cps := throughput(), connRate()
		b.ReportMetric(gbps, name+"-Gbit/s")
		b.ReportMetric(cps, name+"-conn/s")
		b.Logf("%s: %.2f Gbit/s, %.0f new connections/s", name, gbps, cps)
	}
	for b.Loop() {
		measure("none")

		k, err := nl.Open(testkit.Path(node))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := k.SetTable(firewall.Policy{Groups: map[string][]netip.Addr{"g": group}, Endpoints: []firewall.Endpoint{{
			Name: "server", Device: "skb100", IPs: []netip.Addr{server}, IngressIsolated: true,
			Ingress: []firewall.Rule{{Peers: []firewall.Peer{{Group: "g"}}, Ports: []firewall.Port{{Proto: unix.IPPROTO_TCP}}}}}}}.Table()); err != nil {
			b.Fatal(err)
		}
		measure("skiff")
		if _, err := k.SetTable(firewall.Policy{}.Table()); err != nil {
			b.Fatal(err)
		}
		k.Close()

		var rules strings.Builder
		rules.WriteString("*filter\n:FORWARD ACCEPT [0:0]\n:SRV - [0:0]\n")
		rules.WriteString("-A FORWARD -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT\n")
		fmt.Fprintf(&rules, "-A FORWARD -o skb100 -d %s/32 -j SRV\n", server)
		for _, a := range group {
			fmt.Fprintf(&rules, "-A SRV -s %s/32 -p tcp -j RETURN\n", a)
		}
		rules.WriteString("-A SRV -j DROP\nCOMMIT\n")
		cmd := exec.Command("ip", "netns", "exec", node, "iptables-restore")
		cmd.Stdin = strings.NewReader(rules.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("iptables-restore: %v\n%s", err, out)
		}
		measure("iptables")
		testkit.Run(b, node, "iptables", "-F")
		testkit.Run(b, node, "iptables", "-X")
	}
}
