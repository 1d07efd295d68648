package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// BenchmarkEgressSNAT measures TCP throughput from a pod to an address
// outside the cluster through a snat network, against the same path built
// by hand on the same node in the same run: a veth from a namespace into
// the node, routed by the node and masqueraded by one nftables rule. The
// outside is the underlay namespace (an address on its loopback, no route
// back to either pod). Rounds alternate, three each.
//
//	go test ./test/e2e -run '^$' -bench EgressSNAT -benchtime 1x
func BenchmarkEgressSNAT(b *testing.B) {
	c := newCluster(b, "n1")
	n1 := c.nodes["n1"]
	c.mustCtl("network", "create", "pods", "--vni", "100", "--egress", "snat")
	c.mustCtl("subnet", "create", "pods-v4", "--network", "pods", "--cidr", "198.51.100.0/25")
	const inet = "203.0.113.200"
	testkit.Run(b, c.ul, "ip", "addr", "add", inet+"/32", "dev", "lo")
	testkit.Run(b, n1.ns, "ip", "route", "add", inet+"/32", "via", "192.0.2.254")
	c.waitCNI(b, "pods")
	ns := testkit.New(b)
	if _, err := cniRun("ADD", "egress-bench", testkit.Path(ns), "eth0", cniConf("pods", n1.socket, "1.1.0")); err != nil {
		b.Fatal(err)
	}

	// The hand-built reference: 198.51.100.248/30 on a veth, the node
	// masquerading it with a table of its own.
	ref := testkit.New(b)
	testkit.Run(b, n1.ns, "ip", "link", "add", "refh", "type", "veth", "peer", "name", "eth0", "netns", ref)
	testkit.Run(b, n1.ns, "ip", "addr", "add", "198.51.100.249/30", "dev", "refh")
	testkit.Run(b, n1.ns, "ip", "link", "set", "refh", "up")
	testkit.Run(b, ref, "ip", "addr", "add", "198.51.100.250/30", "dev", "eth0")
	testkit.Run(b, ref, "ip", "link", "set", "eth0", "up")
	testkit.Run(b, ref, "ip", "route", "add", "default", "via", "198.51.100.249")
	f := filepath.Join(b.TempDir(), "refnat.nft")
	rules := "table ip refnat {\n chain post {\n  type nat hook postrouting priority srcnat;\n  ip saddr 198.51.100.248/30 masquerade\n }\n}\n"
	if err := os.WriteFile(f, []byte(rules), 0o600); err != nil {
		b.Fatal(err)
	}
	testkit.Run(b, n1.ns, "nft", "-f", f)

	var skiff, hand float64
	const rounds = 3
	for range rounds {
		skiff += iperf(b, ns, c.ul, inet) / rounds
		hand += iperf(b, ref, c.ul, inet) / rounds
	}
	b.ReportMetric(skiff/1e9, "skiff-snat-Gbit/s")
	b.ReportMetric(hand/1e9, "hand-nft-masquerade-Gbit/s")
	b.Logf("pod -> outside TCP: skiff snat %.2f Gbit/s, hand-built nftables masquerade %.2f Gbit/s, ratio %.2f", skiff/1e9, hand/1e9, skiff/hand)
}
