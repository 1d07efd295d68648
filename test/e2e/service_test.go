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

	other := testns.New(t)
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"pods","type":"skiff-cni","network":"pods","socket":%q,"labels":{"app":"other"}}`, c.nodes["n1"].socket)
	if _, err := cniRun("ADD", "pod-other", testns.Path(other), "eth0", conf); err != nil {
		t.Fatalf("ADD pod-other: %v", err)
	}
	if !connects(other, remoteVIP, "80") {
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
	eventually(t, func() error {
		if connects(other, remoteVIP, "80") {
			return fmt.Errorf("pod other (app=other) still reaches pod b through the ClusterIP after the policy")
		}
		return nil
	})
	if !connects(a, remoteVIP, "80") {
		t.Error("pod a (app=web) no longer reaches pod b through the ClusterIP: the policy must match the DNATed port 8080, not the Service's 80")
	}
	if connects(other, bIP, "8080") {
		t.Error("pod other reaches pod b directly despite the policy")
	}
}
