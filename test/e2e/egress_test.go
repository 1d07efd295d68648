package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestEgress: a network's egress decides what leaves the overlay, on
// nodes the agents made forward. The underlay namespace stands for the
// outside world: an address on its loopback (inet), which the nodes
// route through it; it has no route back to a pod subnet unless the
// test adds one.
//   - snat (network pods): a pod reaches inet, which sees the node's
//     underlay address; the agent turned forwarding on.
//   - none (network tenant, the default): a pod cannot reach inet even
//     with a route back in place, nor can the outside reach it; a snat
//     pod cannot reach it either, on its node or another.
//   - routed (network flat): a pod's packets leave with its own address:
//     inet answers once it routes the subnet back, and sees the pod's
//     address.
func TestEgress(t *testing.T) {
	c := newCluster(t, "n1", "n2")
	c.mustCtl("network", "create", "pods", "--vni", "100", "--egress", "snat")
	c.mustCtl("subnet", "create", "pods-v4", "--network", "pods", "--cidr", "198.51.100.0/25")
	c.mustCtl("network", "create", "tenant", "--vni", "200")
	c.mustCtl("subnet", "create", "tenant-v4", "--network", "tenant", "--cidr", "198.51.100.128/25")
	c.mustCtl("network", "create", "flat", "--vni", "300", "--egress", "routed")
	c.mustCtl("subnet", "create", "flat-v4", "--network", "flat", "--cidr", "203.0.113.0/25")
	if out := c.mustCtl("get", "networks"); !strings.Contains(out, "EGRESS") || !strings.Contains(out, "tenant  200  default  none") {
		t.Errorf("skiffctl get networks does not show tenant's egress as none:\n%s", out)
	}
	const inet = "203.0.113.200"
	testkit.Run(t, c.ul, "ip", "addr", "add", inet+"/32", "dev", "lo")
	for _, n := range c.nodes {
		testkit.Run(t, n.ns, "ip", "route", "add", inet+"/32", "via", "192.0.2.254")
	}
	c.waitCNI(t, "pods")
	add := func(id, network, node string) (string, string) { return c.addPod(t, id, network, node) }
	a, aIP := add("snat-a", "pods", "n1")
	t1, t1IP := add("tenant-1", "tenant", "n1")
	_, t2IP := add("tenant-2", "tenant", "n2")
	r, rIP := add("routed-r", "flat", "n2")

	// snat: out, masqueraded to n1's address.
	if seen := outsideSees(t, c.ul, a, inet, "192.0.2.1", "192.0.2.2", aIP); seen != "192.0.2.1" {
		t.Errorf("the outside saw the snat pod's connection from %q, want n1's address 192.0.2.1", seen)
	}
	for _, n := range []string{"n1", "n2"} {
		if v := strings.TrimSpace(testkit.Run(t, c.nodes[n].ns, "sysctl", "-n", "net.ipv4.ip_forward")); v != "1" {
			t.Errorf("%s: net.ipv4.ip_forward = %s: the agent did not turn forwarding on for a snat or routed network", n, v)
		}
	}
	if out := testkit.Run(t, c.nodes["n1"].ns, "nft", "list", "table", "inet", "skiff"); !strings.Contains(out, "masquerade") {
		t.Errorf("n1's table has no masquerade rule:\n%s", out)
	}

	// none: nothing out, even with a route back; nothing in.
	testkit.Run(t, c.ul, "ip", "route", "add", "198.51.100.128/25", "via", "192.0.2.1")
	if err := testkit.Ping(t1, inet, 1, time.Second); err == nil {
		t.Error("a pod of a network with egress none reached the outside")
	}
	if err := testkit.Ping(c.ul, t1IP, 1, time.Second); err == nil {
		t.Error("the outside reached a pod of a network with egress none")
	}
	for _, dst := range []string{t1IP, t2IP} {
		if err := testkit.Ping(a, dst, 1, time.Second); err == nil {
			t.Errorf("the snat pod reached tenant pod %s", dst)
		}
	}

	// routed: leaves with the pod's address; answered once the outside
	// routes the subnet back.
	if err := testkit.Ping(r, inet, 1, time.Second); err == nil {
		t.Error("a routed pod was answered by an outside with no route back: its address was translated")
	}
	testkit.Run(t, c.ul, "ip", "route", "add", "203.0.113.0/25", "via", "192.0.2.2")
	if seen := outsideSees(t, c.ul, r, inet, "192.0.2.1", "192.0.2.2", rIP); seen != rIP {
		t.Errorf("the outside saw the routed pod's connection from %q, want the pod's own %s", seen, rIP)
	}
}

// outsideSees pings addr (IPv4 or IPv6) in namespace outside from
// namespace from, and returns the source address the outside saw: each candidate is counted
// by an nftables rule of a table the test adds to the outside.
func outsideSees(t *testing.T, outside, from, addr string, candidates ...string) string {
	t.Helper()
	rules := "table inet egresstest {\n chain in {\n  type filter hook input priority 0;\n"
	ip, icmp, ping := "ip", "icmp", []string{"ping"}
	if strings.Contains(addr, ":") {
		ip, icmp, ping = "ip6", "icmpv6", []string{"ping", "-6"}
	}
	for _, c := range candidates {
		rules += fmt.Sprintf("  %s saddr %s %s daddr %s %s type echo-request counter comment \"%s\"\n", ip, c, ip, addr, icmp, c)
	}
	rules += " }\n}\n"
	f := filepath.Join(t.TempDir(), "egresstest.nft")
	if err := os.WriteFile(f, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	testkit.Run(t, outside, "nft", "-f", f)
	defer testkit.Run(t, outside, "nft", "delete", "table", "inet", "egresstest")
	testkit.Run(t, from, append(ping, "-c", "3", "-i", "0.2", "-W", "2", addr)...)
	out := testkit.Run(t, outside, "nft", "list", "table", "inet", "egresstest")
	var seen []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "packets 3 ") {
			_, c, _ := strings.Cut(l, "comment \"")
			seen = append(seen, strings.TrimSuffix(strings.TrimSpace(c), "\""))
		}
	}
	if len(seen) != 1 {
		t.Fatalf("the outside counted the pings from %v, want exactly one of %v:\n%s", seen, candidates, out)
	}
	return seen[0]
}

// waitCNI waits until every node's agent answers the CNI's STATUS for
// network.
func (c *cluster) waitCNI(t testing.TB, network string) {
	t.Helper()
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		for n := range c.nodes {
			if _, err := cniRun("STATUS", "", "", "", cniConf(network, c.nodes[n].socket, "1.1.0")); err != nil {
				return err
			}
		}
		return nil
	}))
}

// addPod runs the CNI's ADD for a new pod namespace on network at node,
// returning the namespace and the pod's first address.
func (c *cluster) addPod(t *testing.T, id, network, node string) (ns, ip string) {
	t.Helper()
	ns = testkit.New(t)
	out, err := cniRun("ADD", id, testkit.Path(ns), "eth0", cniConf(network, c.nodes[node].socket, "1.1.0"))
	if err != nil {
		t.Fatalf("ADD %s: %v", id, err)
	}
	var r cniResult
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.IPs) == 0 {
		t.Fatalf("ADD %s printed %q: %v", id, out, err)
	}
	return ns, strings.Split(r.IPs[0].Address, "/")[0]
}
