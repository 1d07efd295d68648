package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/skiff-sdn/skiff/internal/testns"
)

// TestServiceDNAT: kube-proxy's Service rules, stood in for by nftables
// rules of the test in the nodes (DNAT at prerouting and output,
// masquerade of what came from outside the pod network, as kube-proxy's
// KUBE-MARK-MASQ does), on a snat network: a pod reaches a "ClusterIP"
// backed by a pod on the other node and one backed by itself (hairpin),
// and a "NodePort" answers from the underlay on the backend's node and on
// the other.
func TestServiceDNAT(t *testing.T) {
	c := newCluster(t, "n1", "n2")
	c.mustCtl("network", "create", "pods", "--vni", "100", "--egress", "snat")
	c.mustCtl("subnet", "create", "pods-v4", "--network", "pods", "--cidr", "198.51.100.0/25")
	c.waitCNI(t, "pods")
	a, aIP := c.addPod(t, "pod-a", "pods", "n1")
	b, bIP := c.addPod(t, "pod-b", "pods", "n2")
	listenIn(t, a, aIP+":8080")
	listenIn(t, b, bIP+":8080")
	const remoteVIP, selfVIP = "203.0.113.100", "203.0.113.101"
	rules := `table ip kpt {
 chain pre { type nat hook prerouting priority dstnat;
  ip daddr ` + remoteVIP + ` tcp dport 80 dnat to ` + bIP + `:8080
  ip daddr ` + selfVIP + ` tcp dport 80 ip saddr ` + aIP + ` meta mark set 0x4000
  ip daddr ` + selfVIP + ` tcp dport 80 dnat to ` + aIP + `:8080
  fib daddr type local tcp dport 30080 meta mark set 0x4000
  fib daddr type local tcp dport 30080 dnat to ` + bIP + `:8080
 }
 chain out { type nat hook output priority -100;
  ip daddr ` + remoteVIP + ` tcp dport 80 dnat to ` + bIP + `:8080
 }
 chain post { type nat hook postrouting priority srcnat;
  meta mark & 0x4000 == 0x4000 masquerade
 }
}
`
	f := filepath.Join(t.TempDir(), "kpt.nft")
	if err := os.WriteFile(f, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.nodes {
		testns.Run(t, n.ns, "nft", "-f", f)
		// A node routes the Service addresses like any address, as a
		// default route would (the test's nodes have none).
		testns.Run(t, n.ns, "ip", "route", "add", "203.0.113.96/28", "via", "192.0.2.254")
	}
	eventually(t, func() error {
		if !connects(a, remoteVIP, "80") {
			return fmt.Errorf("pod a (n1) does not reach the ClusterIP backed by pod b (n2)")
		}
		return nil
	})
	if !connects(a, selfVIP, "80") {
		t.Error("pod a does not reach itself through its ClusterIP (hairpin)")
	}
	if !connects(c.nodes["n1"].ns, remoteVIP, "80") {
		t.Error("node n1 does not reach the ClusterIP backed by pod b (n2)")
	}
	for _, ip := range []string{"192.0.2.1", "192.0.2.2"} {
		if !connects(c.ul, ip, "30080") {
			t.Errorf("the NodePort on %s (backend pod b on n2) does not answer the underlay", ip)
		}
	}
}
