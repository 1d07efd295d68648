package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestServiceDNAT: kube-proxy's Service rules, stood in for by nftables
// rules of the test in the nodes (DNAT at prerouting and output,
// masquerade of what came from outside the pod network, as kube-proxy's
// KUBE-MARK-MASQ does), on a snat network: a pod reaches a "ClusterIP"
// backed by a pod on the other node and one backed by itself (hairpin),
// and a "NodePort" answers from the underlay on the backend's node and on
// the other. Then NetworkPolicy applies to Service traffic as Kubernetes
// specifies, after DNAT: with pod b admitting only app=web on 8080, pod a
// (app=web) still reaches it through the ClusterIP's port 80, and a pod
// labelled app=other is refused through the ClusterIP as directly.
func TestServiceDNAT(t *testing.T) {
	c := newCluster(t, "n1", "n2")
	c.mustCtl("network", "create", "pods", "--vni", "100", "--egress", "snat")
	c.mustCtl("subnet", "create", "pods-v4", "--network", "pods", "--cidr", "198.51.100.0/25")
	c.waitCNI(t, "pods")
	a, aIP := c.addPod(t, "pod-a", "pods", "n1")
	b, bIP := c.addPod(t, "pod-b", "pods", "n2")
	serviceDNAT(t, c, services{family: "ip", a: a, aIP: aIP, b: b, bIP: bIP, remoteVIP: "203.0.113.100", selfVIP: "203.0.113.101",
		vipNet: "203.0.113.96/28", via: "192.0.2.254", nodeIPs: []string{"192.0.2.1", "192.0.2.2"}})
}

// TestServiceDNATIPv6 is TestServiceDNAT over IPv6, kube-proxy's rules
// in an ip6 table: dual-stack pods on a snat network, nodes on an IPv6
// underlay (so that a node's own traffic reaches pods on the other node
// over IPv6 through its host port); the ClusterIPs are IPv6 addresses
// and the NodePort answers on the nodes' IPv6 addresses.
func TestServiceDNATIPv6(t *testing.T) {
	c, vtep := newIPv6UnderlayCluster(t)
	c.mustCtl("network", "create", "pods", "--vni", "100", "--egress", "snat", "--mtu", "1430")
	c.mustCtl("subnet", "create", "pods-v4", "--network", "pods", "--cidr", "198.51.100.0/25")
	c.mustCtl("subnet", "create", "pods-v6", "--network", "pods", "--cidr", "2001:db8:100::/64")
	c.waitCNI(t, "pods")
	a := c.addDualPod(t, "pod-a", "pods", "n1", "198.51.100.1", "2001:db8:100::1")
	b := c.addDualPod(t, "pod-b", "pods", "n2", "198.51.100.1", "2001:db8:100::1")
	serviceDNAT(t, c, services{family: "ip6", a: a.ns, aIP: a.v6, b: b.ns, bIP: b.v6, remoteVIP: "2001:db8:5e::100", selfVIP: "2001:db8:5e::101",
		vipNet: "2001:db8:5e::/64", via: "2001:db8:ff::fe", nodeIPs: []string{vtep["n1"], vtep["n2"]}})
}

// services is what serviceDNAT needs: the address family's nftables
// name (ip, ip6), pods a (n1) and b (n2) and their addresses of that
// family, the Service addresses, the network they are in and the
// underlay's address that routes it, and the nodes' addresses.
type services struct {
	family, a, aIP, b, bIP string
	remoteVIP, selfVIP     string
	vipNet, via            string
	nodeIPs                []string
}

func serviceDNAT(t *testing.T, c *cluster, s services) {
	t.Helper()
	testkit.Serve(t, s.a, net.JoinHostPort(s.aIP, "8080"), "ok")
	testkit.Serve(t, s.b, net.JoinHostPort(s.bIP, "8080"), "ok")
	to := func(ip string) string {
		if s.family == "ip6" {
			return "[" + ip + "]:8080"
		}
		return ip + ":8080"
	}
	fam := s.family
	rules := `table ` + fam + ` kpt {
 chain pre { type nat hook prerouting priority dstnat;
  ` + fam + ` daddr ` + s.remoteVIP + ` tcp dport 80 dnat to ` + to(s.bIP) + `
  ` + fam + ` daddr ` + s.selfVIP + ` tcp dport 80 ` + fam + ` saddr ` + s.aIP + ` meta mark set 0x4000
  ` + fam + ` daddr ` + s.selfVIP + ` tcp dport 80 dnat to ` + to(s.aIP) + `
  fib daddr type local tcp dport 30080 meta mark set 0x4000
  fib daddr type local tcp dport 30080 dnat to ` + to(s.bIP) + `
 }
 chain out { type nat hook output priority -100;
  ` + fam + ` daddr ` + s.remoteVIP + ` tcp dport 80 dnat to ` + to(s.bIP) + `
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
		testkit.Run(t, n.ns, "nft", "-f", f)
		// A node routes the Service addresses like any address, as a
		// default route would (the test's nodes have none).
		testkit.Run(t, n.ns, "ip", "route", "add", s.vipNet, "via", s.via)
	}
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if !testkit.Connects(s.a, net.JoinHostPort(s.remoteVIP, "80"), time.Second) {
			return fmt.Errorf("pod a (n1) does not reach the ClusterIP backed by pod b (n2)")
		}
		return nil
	}))
	if !testkit.Connects(s.a, net.JoinHostPort(s.selfVIP, "80"), time.Second) {
		t.Error("pod a does not reach itself through its ClusterIP (hairpin)")
	}
	if !testkit.Connects(c.nodes["n1"].ns, net.JoinHostPort(s.remoteVIP, "80"), time.Second) {
		t.Error("node n1 does not reach the ClusterIP backed by pod b (n2)")
	}
	for _, ip := range s.nodeIPs {
		if !testkit.Connects(c.ul, net.JoinHostPort(ip, "30080"), time.Second) {
			t.Errorf("the NodePort on %s (backend pod b on n2) does not answer the underlay", ip)
		}
	}

	other := testkit.New(t)
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"pods","type":"skiff-cni","network":"pods","socket":%q,"labels":{"app":"other"}}`, c.nodes["n1"].socket)
	if _, err := cniRun("ADD", "pod-other", testkit.Path(other), "eth0", conf); err != nil {
		t.Fatalf("ADD pod-other: %v", err)
	}
	if !testkit.Connects(other, net.JoinHostPort(s.remoteVIP, "80"), time.Second) {
		t.Fatal("before any policy, pod other does not reach the ClusterIP backed by pod b")
	}
	pol := filepath.Join(t.TempDir(), "web-only.yaml")
	if err := os.WriteFile(pol, []byte(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web-only, namespace: default}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress:
  - from: [{podSelector: {matchLabels: {app: web}}}]
    ports: [{protocol: TCP, port: 8080}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	c.mustCtl("policy", "apply", "-f", pol)
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if testkit.Connects(other, net.JoinHostPort(s.remoteVIP, "80"), time.Second) {
			return fmt.Errorf("pod other (app=other) still reaches pod b through the ClusterIP after the policy")
		}
		return nil
	}))
	if !testkit.Connects(s.a, net.JoinHostPort(s.remoteVIP, "80"), time.Second) {
		t.Error("pod a (app=web) no longer reaches pod b through the ClusterIP: the policy must match the DNATed port 8080, not the Service's 80")
	}
	if testkit.Connects(other, net.JoinHostPort(s.bIP, "8080"), time.Second) {
		t.Error("pod other reaches pod b directly despite the policy")
	}
}
