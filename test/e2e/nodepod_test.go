package e2e

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestNodeToPod: a node's own traffic reaches pods on every node of a
// network whose egress is not none, from its own (underlay) address,
// and gets the replies, while the anycast gateway stays the pods' first
// hop; a pod reaches another node's address through the overlay, with
// its own address. A network with egress none stays out of reach: from
// the other node, and from the snat network through the host ports; two
// snat networks stay apart. A node with no pod at all (n3: a
// control-plane node calling a webhook) reaches the snat network's pods
// on every node too, and not the none network's.
func TestNodeToPod(t *testing.T) {
	c := newCluster(t, "n1", "n2", "n3")
	c.mustCtl("network", "create", "pods", "--vni", "100", "--egress", "snat")
	c.mustCtl("subnet", "create", "pods-v4", "--network", "pods", "--cidr", "198.51.100.0/25")
	c.mustCtl("network", "create", "tenant", "--vni", "200")
	c.mustCtl("subnet", "create", "tenant-v4", "--network", "tenant", "--cidr", "198.51.100.128/25")
	c.mustCtl("network", "create", "other", "--vni", "300", "--egress", "snat")
	c.mustCtl("subnet", "create", "other-v4", "--network", "other", "--cidr", "203.0.113.0/25")
	c.waitCNI(t, "pods")
	// Strict reverse-path filtering (RHEL's default): the paths between
	// a node and pods are symmetric.
	for _, n := range c.nodes {
		testkit.Run(t, n.ns, "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=1", "net.ipv4.conf.default.rp_filter=1")
	}
	add := func(id, network, node string) (string, string) { return c.addPod(t, id, network, node) }
	a, aIP := add("pod-a", "pods", "n1")
	b, bIP := add("pod-b", "pods", "n2")
	t1, _ := add("tenant-1", "tenant", "n1")
	_, t2IP := add("tenant-2", "tenant", "n2")
	o1, o1IP := add("other-1", "other", "n1")
	_, o2IP := add("other-2", "other", "n2")
	n1, n2 := c.nodes["n1"].ns, c.nodes["n2"].ns
	const gw = "198.51.100.1"

	// Each node reaches the other's pod, which sees the node's own
	// address (not the gateway's, which the pod's node holds too).
	if seen := outsideSees(t, b, n1, bIP, "192.0.2.1", gw); seen != "192.0.2.1" {
		t.Errorf("pod b (n2) saw n1's ping from %q, want n1's address 192.0.2.1", seen)
	}
	if seen := outsideSees(t, a, n2, aIP, "192.0.2.2", gw); seen != "192.0.2.2" {
		t.Errorf("pod a (n1) saw n2's ping from %q, want n2's address 192.0.2.2", seen)
	}
	testkit.Serve(t, b, bIP+":8080", "ok")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if !testkit.Connects(n1, net.JoinHostPort(bIP, "8080"), time.Second) {
			return fmt.Errorf("n1 does not connect to pod b (n2) on %s:8080", bIP)
		}
		return nil
	}))
	// n3 has no pod: it reaches both nodes' pods all the same (ping,
	// TCP), from its own address, and not the none network's.
	n3 := c.nodes["n3"].ns
	if seen := outsideSees(t, a, n3, aIP, "192.0.2.3", gw); seen != "192.0.2.3" {
		t.Errorf("pod a (n1) saw n3's ping from %q, want n3's address 192.0.2.3", seen)
	}
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if !testkit.Connects(n3, net.JoinHostPort(bIP, "8080"), time.Second) {
			return fmt.Errorf("n3 (no pods) does not connect to pod b (n2) on %s:8080", bIP)
		}
		return nil
	}))
	if err := testkit.Ping(n3, t2IP, 1, time.Second); err == nil {
		t.Errorf("n3 reached the none network's pod %s on n2", t2IP)
	}
	// The node's local pods, as before, and the pods' first hop.
	testkit.MustPing(t, n1, aIP, 1, 2*time.Second)
	if out := testkit.Run(t, a, "ip", "route", "show", "default"); !strings.Contains(out, "via "+gw) {
		t.Errorf("pod a's default route is not the anycast gateway %s: %s", gw, out)
	}
	// A pod reaches the other node's address through the overlay, with
	// its own address.
	if seen := outsideSees(t, n1, b, "192.0.2.1", bIP, "192.0.2.2"); seen != bIP {
		t.Errorf("n1 saw pod b's ping from %q, want the pod's own %s", seen, bIP)
	}

	// Isolation: the node cannot reach the none network's pod on the
	// other node; the none pod cannot reach the snat network's pods
	// (through the host port routes) nor the other node.
	if err := testkit.Ping(n1, t2IP, 1, time.Second); err == nil {
		t.Errorf("n1 reached the none network's pod %s on n2", t2IP)
	}
	for _, dst := range []string{bIP, "192.0.2.2"} {
		if err := testkit.Ping(t1, dst, 1, time.Second); err == nil {
			t.Errorf("a pod of the none network reached %s", dst)
		}
	}
	if err := testkit.Ping(a, t2IP, 1, time.Second); err == nil {
		t.Errorf("the snat pod reached the none network's pod %s", t2IP)
	}
	// Two snat networks: each node has a host port on both, and routes
	// the other network's remote pods through it; a pod of one still
	// cannot reach the other's pods, across nodes or on its own.
	testkit.MustPing(t, n1, o2IP, 1, 2*time.Second)
	for _, x := range []struct{ from, to string }{{a, o2IP}, {a, o1IP}, {o1, bIP}} {
		if err := testkit.Ping(x.from, x.to, 1, time.Second); err == nil {
			t.Errorf("a pod of one snat network reached %s of another", x.to)
		}
	}
}
