package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// dualPod is a pod made by the CNI plugin on a dual-stack network.
type dualPod struct {
	ns       string
	v4, v6   string // addresses
	res      cniResult
	resultJS string
}

// addDualPod runs the CNI's ADD for a new pod namespace on network at
// node and returns the pod with its IPv4 and IPv6 addresses; the result
// must list both, each with its family's gateway and default route.
func (c *cluster) addDualPod(t testing.TB, id, network, node, gw4, gw6 string) dualPod {
	t.Helper()
	p := dualPod{ns: testkit.New(t)}
	out, err := cniRun("ADD", id, testkit.Path(p.ns), "eth0", cniConf(network, c.nodes[node].socket, "1.1.0"))
	if err != nil {
		t.Fatalf("ADD %s: %v", id, err)
	}
	p.resultJS = out
	if err := json.Unmarshal([]byte(out), &p.res); err != nil {
		t.Fatalf("ADD %s printed %q: %v", id, out, err)
	}
	routes := map[string]string{}
	for _, r := range p.res.Routes {
		routes[r.Dst] = r.GW
	}
	for _, ip := range p.res.IPs {
		a := netip.MustParsePrefix(ip.Address)
		want, dflt := gw4, "0.0.0.0/0"
		if a.Addr().Is6() {
			want, dflt = gw6, "::/0"
			p.v6 = a.Addr().String()
		} else {
			p.v4 = a.Addr().String()
		}
		if ip.Gateway != want || ip.Interface == nil || *ip.Interface != 1 {
			t.Errorf("ADD %s: address %s has gateway %q (interface %v), want %s on the pod's interface", id, ip.Address, ip.Gateway, ip.Interface, want)
		}
		if routes[dflt] != want {
			t.Errorf("ADD %s: default route %s via %q, want %s", id, dflt, routes[dflt], want)
		}
	}
	if p.v4 == "" || p.v6 == "" || len(p.res.IPs) != 2 {
		t.Fatalf("ADD %s: want one IPv4 and one IPv6 address, got %s", id, out)
	}
	return p
}

// TestDualStack: a network with an IPv4 and an IPv6 subnet gives every
// pod both addresses (the CNI result lists both, with their gateways);
// IPv6 ping and TCP work between pods on two nodes over the VXLAN overlay
// and on one node, each pod's IPv6 gateway answers on its own node, and
// neither the pods' nor the gateway's addresses are left tentative or
// failed by duplicate address detection (every node holds the gateway).
func TestDualStack(t *testing.T) {
	c := newCluster(t, "n1", "n2")
	c.mustCtl("network", "create", "ds", "--vni", "100")
	c.mustCtl("subnet", "create", "ds-v4", "--network", "ds", "--cidr", "198.51.100.0/24")
	c.mustCtl("subnet", "create", "ds-v6", "--network", "ds", "--cidr", "2001:db8:100::/64")
	const gw4, gw6 = "198.51.100.1", "2001:db8:100::1"
	// A mixed-up family is refused, naming the field, and nothing is
	// stored.
	for _, bad := range []struct {
		args         []string
		field, words string
	}{
		{[]string{"--cidr", "2001:db8:200::/64", "--gateway", "198.51.100.1"}, "gateway", "is an IPv4 address, but cidr 2001:db8:200::/64 is IPv6"},
		{[]string{"--cidr", "203.0.113.0/24", "--gateway", "2001:db8:200::1"}, "gateway", "is an IPv6 address, but cidr 203.0.113.0/24 is IPv4"},
		{[]string{"--cidr", "2001:db8:200::/64", "--exclude", "203.0.113.7"}, "exclusions[0]", "is an IPv4 address"},
	} {
		out, err := c.ctl(append([]string{"subnet", "create", "bad", "--network", "ds"}, bad.args...)...)
		if err == nil || !strings.Contains(out, bad.field+": ") || !strings.Contains(out, bad.words) {
			t.Errorf("subnet create %v: %v, want an error naming %s (%q):\n%s", bad.args, err, bad.field, bad.words, out)
		}
	}
	if out := c.mustCtl("get", "subnets"); strings.Contains(out, "bad") {
		t.Errorf("a refused subnet was stored:\n%s", out)
	}
	c.waitCNI(t, "ds")
	a := c.addDualPod(t, "pod-a", "ds", "n1", gw4, gw6)
	b := c.addDualPod(t, "pod-b", "ds", "n2", gw4, gw6)
	l := c.addDualPod(t, "pod-l", "ds", "n1", gw4, gw6)

	// The pod's interface: both addresses, a default route per family.
	if out := testkit.Run(t, a.ns, "ip", "-6", "route", "show", "default"); !strings.Contains(out, "via "+gw6) {
		t.Errorf("pod a's IPv6 default route is not via the gateway %s: %q", gw6, out)
	}
	for _, p := range []dualPod{a, b, l} {
		// Across nodes (a-b), on one node (a-l), and the gateway.
		for _, dst := range []string{gw6, b.v6, l.v6, a.v6} {
			if dst == p.v6 {
				continue
			}
			testkit.MustPing(t, p.ns, dst, 1, 2*time.Second)
		}
		testkit.MustPing(t, p.ns, gw4, 1, 2*time.Second)
	}
	testkit.MustPing(t, a.ns, b.v4, 1, 2*time.Second)
	testkit.Serve(t, b.ns, net.JoinHostPort(b.v6, "8080"), "ok")
	testkit.Serve(t, l.ns, net.JoinHostPort(l.v6, "8080"), "ok")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		for _, dst := range []string{b.v6, l.v6} {
			if !testkit.Connects(a.ns, net.JoinHostPort(dst, "8080"), time.Second) {
				return fmt.Errorf("pod a does not connect to [%s]:8080", dst)
			}
		}
		return nil
	}))
	// Duplicate address detection: the pods' and the gateway's global
	// addresses are never tentative (no DAD: every node holds the
	// gateway); once the link-local addresses' DAD is over (about a
	// second after a link comes up), none has failed, in the pods and on
	// the nodes (every node's bridge has the gateway MAC, so the same
	// link-local address).
	for _, ns := range []string{a.ns, b.ns, c.nodes["n1"].ns, c.nodes["n2"].ns} {
		if out := testkit.Run(t, ns, "ip", "-6", "addr", "show", "scope", "global"); strings.Contains(out, "tentative") {
			t.Errorf("a global IPv6 address is tentative (DAD was not turned off for it):\n%s", out)
		}
		testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
			out := testkit.Run(t, ns, "ip", "-6", "addr", "show")
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "tentative") && !strings.Contains(l, "dadfailed") {
					return fmt.Errorf("DAD still running:\n%s", out)
				}
			}
			return nil
		}))
		if out := testkit.Run(t, ns, "ip", "-6", "addr", "show"); strings.Contains(out, "dadfailed") {
			t.Errorf("an IPv6 address failed DAD:\n%s", out)
		}
	}
	// The gateway's IPv6 address is on each node's bridge, with the
	// network's gateway MAC answering for it.
	for _, n := range []string{"n1", "n2"} {
		if out := testkit.Run(t, c.nodes[n].ns, "ip", "-6", "addr", "show", "dev", "skb100"); !strings.Contains(out, gw6+"/64") {
			t.Errorf("%s: the bridge lacks the IPv6 gateway %s/64:\n%s", n, gw6, out)
		}
	}
}

// TestEgressIPv6: a network's egress decides what leaves the overlay over
// IPv6 too. The nodes and the underlay namespace (the outside world) also
// have IPv6 addresses (2001:db8:ff::/64); inet6, an address on the
// outside's loopback, is routed by the nodes through it; the outside has
// no route back to a pod subnet unless the test adds one.
//   - snat: a dual-stack pod reaches inet6, which sees the node's IPv6
//     address; the agent turned IPv6 forwarding on;
//   - none: nothing out over IPv6 even with a route back, nothing in;
//     the snat pod cannot reach the none network's pods over IPv6;
//   - routed: the pod's packets leave with its own IPv6 address.
func TestEgressIPv6(t *testing.T) {
	c := newCluster(t, "n1", "n2")
	c.mustCtl("network", "create", "pods", "--vni", "100", "--egress", "snat")
	c.mustCtl("subnet", "create", "pods-v4", "--network", "pods", "--cidr", "198.51.100.0/25")
	c.mustCtl("subnet", "create", "pods-v6", "--network", "pods", "--cidr", "2001:db8:100::/64")
	c.mustCtl("network", "create", "tenant", "--vni", "200")
	c.mustCtl("subnet", "create", "tenant-v4", "--network", "tenant", "--cidr", "198.51.100.128/25")
	c.mustCtl("subnet", "create", "tenant-v6", "--network", "tenant", "--cidr", "2001:db8:200::/64")
	c.mustCtl("network", "create", "flat", "--vni", "300", "--egress", "routed")
	c.mustCtl("subnet", "create", "flat-v4", "--network", "flat", "--cidr", "203.0.113.0/25")
	c.mustCtl("subnet", "create", "flat-v6", "--network", "flat", "--cidr", "2001:db8:300::/64")
	const inet6 = "2001:db8:ffff::200"
	testkit.Run(t, c.ul, "ip", "-6", "addr", "add", "2001:db8:ff::fe/64", "dev", "ul0", "nodad")
	testkit.Run(t, c.ul, "ip", "-6", "addr", "add", inet6+"/128", "dev", "lo")
	for name, n := range c.nodes {
		own := "2001:db8:ff::" + strings.TrimPrefix(name, "n")
		testkit.Run(t, n.ns, "ip", "-6", "addr", "add", own+"/64", "dev", "eth0", "nodad")
		testkit.Run(t, n.ns, "ip", "-6", "route", "add", inet6+"/128", "via", "2001:db8:ff::fe")
	}
	c.waitCNI(t, "pods")
	a := c.addDualPod(t, "snat-a", "pods", "n1", "198.51.100.1", "2001:db8:100::1")
	t1 := c.addDualPod(t, "tenant-1", "tenant", "n1", "198.51.100.129", "2001:db8:200::1")
	t2 := c.addDualPod(t, "tenant-2", "tenant", "n2", "198.51.100.129", "2001:db8:200::1")
	r := c.addDualPod(t, "routed-r", "flat", "n2", "203.0.113.1", "2001:db8:300::1")

	// snat: out, masqueraded to n1's IPv6 address.
	if seen := outsideSees(t, c.ul, a.ns, inet6, "2001:db8:ff::1", "2001:db8:ff::2", a.v6); seen != "2001:db8:ff::1" {
		t.Errorf("the outside saw the snat pod's IPv6 ping from %q, want n1's address 2001:db8:ff::1", seen)
	}
	for _, n := range []string{"n1", "n2"} {
		if v := strings.TrimSpace(testkit.Run(t, c.nodes[n].ns, "sysctl", "-n", "net.ipv6.conf.all.forwarding")); v != "1" {
			t.Errorf("%s: net.ipv6.conf.all.forwarding = %s: the agent did not turn IPv6 forwarding on for a snat or routed network with an IPv6 subnet", n, v)
		}
	}

	// none: nothing out, even with a route back; nothing in.
	testkit.Run(t, c.ul, "ip", "-6", "route", "add", "2001:db8:200::/64", "via", "2001:db8:ff::1")
	if err := testkit.Ping(t1.ns, inet6, 1, time.Second); err == nil {
		t.Error("a pod of a network with egress none reached the outside over IPv6")
	}
	if err := testkit.Ping(c.ul, t1.v6, 1, time.Second); err == nil {
		t.Error("the outside reached a pod of a network with egress none over IPv6")
	}
	for _, dst := range []string{t1.v6, t2.v6} {
		if err := testkit.Ping(a.ns, dst, 1, time.Second); err == nil {
			t.Errorf("the snat pod reached tenant pod %s over IPv6", dst)
		}
	}

	// routed: leaves with the pod's own IPv6 address; answered once the
	// outside routes the subnet back.
	if err := testkit.Ping(r.ns, inet6, 1, time.Second); err == nil {
		t.Error("a routed pod was answered over IPv6 by an outside with no route back: its address was translated")
	}
	testkit.Run(t, c.ul, "ip", "-6", "route", "add", "2001:db8:300::/64", "via", "2001:db8:ff::2")
	if seen := outsideSees(t, c.ul, r.ns, inet6, "2001:db8:ff::1", "2001:db8:ff::2", r.v6); seen != r.v6 {
		t.Errorf("the outside saw the routed pod's IPv6 ping from %q, want the pod's own %s", seen, r.v6)
	}
}

// newIPv6UnderlayCluster is a cluster of nodes n1 and n2 whose agents'
// underlay (VTEP) addresses are IPv6 ones, 2001:db8:ff::N on the
// underlay (the underlay namespace has 2001:db8:ff::fe); the control
// plane stays on IPv4. It returns the nodes' VTEPs by name.
func newIPv6UnderlayCluster(t testing.TB) (*cluster, map[string]string) {
	vtep := map[string]string{"n1": "2001:db8:ff::1", "n2": "2001:db8:ff::2"}
	args := map[string][]string{}
	for n, ip := range vtep {
		args[n] = []string{"--underlay-ip", ip}
	}
	c := newClusterArgs(t, args, []string{"n1", "n2"}, "n1", "n2")
	testkit.Run(t, c.ul, "ip", "-6", "addr", "add", "2001:db8:ff::fe/64", "dev", "ul0", "nodad")
	for n, ip := range vtep {
		testkit.Run(t, c.nodes[n].ns, "ip", "-6", "addr", "add", ip+"/64", "dev", "eth0", "nodad")
		c.startAgent(n)
	}
	return c, vtep
}

// TestIPv6Underlay: nodes whose VTEPs are IPv6 addresses (the agents'
// --underlay-ip) carry a dual-stack network's IPv4 and IPv6 pod traffic
// over VXLAN in IPv6: the VXLAN devices' local address and the remote
// VTEPs' forwarding entries are IPv6, and pods on two nodes reach each
// other over both families with full-size packets (the network's MTU
// 1430 leaves room for VXLAN's 70 bytes over IPv6 on a 1500-byte
// underlay). The control plane stays on IPv4.
func TestIPv6Underlay(t *testing.T) {
	c, vtep := newIPv6UnderlayCluster(t)
	c.mustCtl("network", "create", "ds", "--vni", "100", "--mtu", "1430")
	c.mustCtl("subnet", "create", "ds-v4", "--network", "ds", "--cidr", "198.51.100.0/24")
	c.mustCtl("subnet", "create", "ds-v6", "--network", "ds", "--cidr", "2001:db8:100::/64")
	c.waitCNI(t, "ds")
	const gw4, gw6 = "198.51.100.1", "2001:db8:100::1"
	a := c.addDualPod(t, "pod-a", "ds", "n1", gw4, gw6)
	b := c.addDualPod(t, "pod-b", "ds", "n2", gw4, gw6)
	if out := c.mustCtl("get", "nodes"); !strings.Contains(out, vtep["n1"]) || !strings.Contains(out, vtep["n2"]) {
		t.Errorf("the nodes did not register their IPv6 VTEPs:\n%s", out)
	}
	for n, other := range map[string]string{"n1": "n2", "n2": "n1"} {
		if out := testkit.Run(t, c.nodes[n].ns, "ip", "-d", "link", "show", "skv100"); !strings.Contains(out, "local "+vtep[n]) {
			t.Errorf("%s: skv100 is not on the IPv6 VTEP %s:\n%s", n, vtep[n], out)
		}
		// The flood entry comes with the delta bringing the other
		// node's pod, which n applies in its own time: pod-b's CNI ADD
		// returning on n2 says nothing of n1, which may not have the
		// entry yet.
		testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
			if out := c.fdb(n, 100); !strings.Contains(out, "00:00:00:00:00:00 "+vtep[other]) {
				return fmt.Errorf("%s: no flood entry to %s's IPv6 VTEP %s:\n%s", n, other, vtep[other], out)
			}
			return nil
		}))
	}
	// Full-size packets, not fragmented: 1430 bytes of IPv4 (1402 of
	// ICMP data) and of IPv6 (1382).
	testkit.Run(t, a.ns, "ping", "-c", "2", "-W", "2", "-M", "do", "-s", "1402", b.v4)
	testkit.Run(t, a.ns, "ping", "-6", "-c", "2", "-W", "2", "-M", "do", "-s", "1382", b.v6)
	testkit.MustPing(t, b.ns, gw6, 1, 2*time.Second)
	testkit.Serve(t, b.ns, net.JoinHostPort(b.v6, "8080"), "ok")
	testkit.Serve(t, b.ns, net.JoinHostPort(b.v4, "8080"), "ok")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		for _, dst := range []string{b.v6, b.v4} {
			if !testkit.Connects(a.ns, net.JoinHostPort(dst, "8080"), time.Second) {
				return fmt.Errorf("pod a does not connect to %s", net.JoinHostPort(dst, "8080"))
			}
		}
		return nil
	}))
	// The pods' traffic really crosses the underlay in IPv6: the
	// underlay's bridge counts VXLAN over IPv6 and over IPv4 while pod a
	// pings b over IPv4.
	rules := "table bridge ul6 {\n chain count {\n  type filter hook forward priority 0;\n" +
		"  ether type ip6 udp dport 4789 counter comment \"v6\"\n  ether type ip udp dport 4789 counter comment \"v4\"\n }\n}\n"
	f := filepath.Join(t.TempDir(), "ul6.nft")
	if err := os.WriteFile(f, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	testkit.Run(t, c.ul, "nft", "-f", f)
	testkit.Run(t, a.ns, "ping", "-c", "3", "-i", "0.2", "-W", "2", b.v4)
	out := testkit.Run(t, c.ul, "nft", "list", "table", "bridge", "ul6")
	count := func(family string) int {
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, `comment "`+family+`"`) {
				var n int
				_, after, _ := strings.Cut(l, "packets ")
				fmt.Sscan(after, &n)
				return n
			}
		}
		return -1
	}
	if v6, v4 := count("v6"), count("v4"); v6 < 6 || v4 != 0 {
		t.Errorf("the underlay carried %d VXLAN packets over IPv6 and %d over IPv4 while a pod pinged another 3 times; want at least 6 and none:\n%s", v6, v4, out)
	}
}

// TestNodeToPodBothFamilies: a node's own traffic reaches pods on every
// node of a network whose egress is not none over both families, on an
// IPv4 and on an IPv6 underlay: over the underlay's family from the
// node's underlay address, over the other from its host address (the
// agents' --host-ip, the nodes' address of the other family), through
// its host port, and gets the replies, while the anycast gateway stays
// the pods' first hop; a pod reaches another node's address of either
// family through the overlay, with its own address. A network with
// egress none stays out of reach.
func TestNodeToPodBothFamilies(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		name := "ipv4-underlay"
		if v6 {
			name = "ipv6-underlay"
		}
		t.Run(name, func(t *testing.T) {
			c, self := newHostAddrCluster(t, v6)
			c.mustCtl("network", "create", "pods", "--vni", "100", "--egress", "snat", "--mtu", "1430")
			c.mustCtl("subnet", "create", "pods-v4", "--network", "pods", "--cidr", "198.51.100.0/25")
			c.mustCtl("subnet", "create", "pods-v6", "--network", "pods", "--cidr", "2001:db8:100::/64")
			c.mustCtl("network", "create", "tenant", "--vni", "200", "--mtu", "1430")
			c.mustCtl("subnet", "create", "tenant-v4", "--network", "tenant", "--cidr", "198.51.100.128/25")
			c.mustCtl("subnet", "create", "tenant-v6", "--network", "tenant", "--cidr", "2001:db8:200::/64")
			c.waitCNI(t, "pods")
			pods := map[string]dualPod{
				"a":  c.addDualPod(t, "pod-a", "pods", "n1", "198.51.100.1", "2001:db8:100::1"),
				"b":  c.addDualPod(t, "pod-b", "pods", "n2", "198.51.100.1", "2001:db8:100::1"),
				"t1": c.addDualPod(t, "tenant-1", "tenant", "n1", "198.51.100.129", "2001:db8:200::1"),
				"t2": c.addDualPod(t, "tenant-2", "tenant", "n2", "198.51.100.129", "2001:db8:200::1"),
			}
			nodeToPod(t, c, pods, self, false, "198.51.100.1")
			nodeToPod(t, c, pods, self, true, "2001:db8:100::1")
		})
	}
}

// newHostAddrCluster starts two nodes on an IPv4 underlay (v6 false) or
// an IPv6 one, each agent with a host address of the other family
// (--host-ip), and returns the nodes' own addresses by family:
// self[false] IPv4, self[true] IPv6.
func newHostAddrCluster(t *testing.T, v6 bool) (*cluster, map[bool]map[string]string) {
	v4s := map[string]string{"n1": "192.0.2.1", "n2": "192.0.2.2"}
	v6s := map[string]string{"n1": "2001:db8:ff::1", "n2": "2001:db8:ff::2"}
	args := map[string][]string{}
	for n := range v4s {
		if v6 {
			args[n] = []string{"--underlay-ip", v6s[n], "--host-ip", v4s[n]}
		} else {
			args[n] = []string{"--host-ip", v6s[n]}
		}
	}
	c := newClusterArgs(t, args, []string{"n1", "n2"}, "n1", "n2")
	testkit.Run(t, c.ul, "ip", "-6", "addr", "add", "2001:db8:ff::fe/64", "dev", "ul0", "nodad")
	for n := range v4s {
		testkit.Run(t, c.nodes[n].ns, "ip", "-6", "addr", "add", v6s[n]+"/64", "dev", "eth0", "nodad")
		c.startAgent(n)
	}
	return c, map[bool]map[string]string{false: v4s, true: v6s}
}

// nodeToPod checks, over one family (v6), that each node reaches the
// other's snat pod with its own address of that family (self), and
// opens TCP to it; the node's local pod answers; the pods' default route
// is the anycast gateway gw; a pod reaches the other node's address with
// its own; isolation from the none network (pods t1, t2) holds.
func nodeToPod(t *testing.T, c *cluster, pods map[string]dualPod, self map[bool]map[string]string, v6 bool, gw string) {
	t.Helper()
	addr := func(p string) string {
		if v6 {
			return pods[p].v6
		}
		return pods[p].v4
	}
	ping, fam := []string{"ping"}, "-4"
	if v6 {
		ping, fam = []string{"ping", "-6"}, "-6"
	}
	me := self[v6]
	n1, n2 := c.nodes["n1"].ns, c.nodes["n2"].ns
	// Each node reaches the other's pod, which sees the node's own
	// address (not the gateway's, which the pod's node holds too).
	if seen := outsideSees(t, pods["b"].ns, n1, addr("b"), me["n1"], gw); seen != me["n1"] {
		t.Errorf("IPv%s: pod b (n2) saw n1's ping from %q, want n1's address %s", fam[1:], seen, me["n1"])
	}
	if seen := outsideSees(t, pods["a"].ns, n2, addr("a"), me["n2"], gw); seen != me["n2"] {
		t.Errorf("IPv%s: pod a (n1) saw n2's ping from %q, want n2's address %s", fam[1:], seen, me["n2"])
	}
	port := "8080"
	if v6 {
		port = "8086"
	}
	testkit.Serve(t, pods["b"].ns, net.JoinHostPort(addr("b"), port), "ok")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if !testkit.Connects(n1, net.JoinHostPort(addr("b"), port), time.Second) {
			return fmt.Errorf("n1 does not connect to pod b (n2) on %s", net.JoinHostPort(addr("b"), port))
		}
		return nil
	}))
	// The node's local pod, and the pods' first hop.
	testkit.Run(t, n1, append(ping, "-c", "1", "-W", "2", addr("a"))...)
	if out := testkit.Run(t, pods["a"].ns, "ip", fam, "route", "show", "default"); !strings.Contains(out, "via "+gw) {
		t.Errorf("pod a's IPv%s default route is not the anycast gateway %s: %s", fam[1:], gw, out)
	}
	// A pod reaches the other node's address through the overlay, with
	// its own address.
	if seen := outsideSees(t, n1, pods["b"].ns, me["n1"], addr("b"), me["n2"]); seen != addr("b") {
		t.Errorf("IPv%s: n1 saw pod b's ping from %q, want the pod's own %s", fam[1:], seen, addr("b"))
	}
	// Isolation: the node cannot reach the none network's pod on the
	// other node; the none pod cannot reach the snat pods nor the other
	// node; the snat pod cannot reach the none pods.
	if _, err := testkit.Try(n1, append(ping, "-c", "1", "-W", "1", addr("t2"))...); err == nil {
		t.Errorf("n1 reached the none network's pod %s on n2", addr("t2"))
	}
	for _, dst := range []string{addr("b"), me["n2"]} {
		if _, err := testkit.Try(pods["t1"].ns, append(ping, "-c", "1", "-W", "1", dst)...); err == nil {
			t.Errorf("a pod of the none network reached %s", dst)
		}
	}
	if _, err := testkit.Try(pods["a"].ns, append(ping, "-c", "1", "-W", "1", addr("t2"))...); err == nil {
		t.Errorf("the snat pod reached the none network's pod %s", addr("t2"))
	}
}

// BenchmarkDualStackThroughput: iperf3 TCP for 4 s from a dual-stack
// pod on n1 to one on n2, over IPv4 and over IPv6, on an IPv4 underlay
// (network MTU 1450) and on an IPv6 underlay (MTU 1430), against the
// raw underlay between the two nodes, in one run.
func BenchmarkDualStackThroughput(b *testing.B) {
	for _, v6 := range []bool{false, true} {
		var c *cluster
		mtu, under := "1450", "4"
		if v6 {
			c, _ = newIPv6UnderlayCluster(b)
			mtu, under = "1430", "6"
		} else {
			c = newCluster(b, "n1", "n2")
		}
		c.mustCtl("network", "create", "ds", "--vni", "100", "--mtu", mtu)
		c.mustCtl("subnet", "create", "ds-v4", "--network", "ds", "--cidr", "198.51.100.0/24")
		c.mustCtl("subnet", "create", "ds-v6", "--network", "ds", "--cidr", "2001:db8:100::/64")
		c.waitCNI(b, "ds")
		pa := c.addDualPod(b, "pod-a", "ds", "n1", "198.51.100.1", "2001:db8:100::1")
		pb := c.addDualPod(b, "pod-b", "ds", "n2", "198.51.100.1", "2001:db8:100::1")
		ulIP := c.nodes["n2"].ip
		if v6 {
			ulIP = "2001:db8:ff::2"
		}
		v4Bps := iperf(b, pa.ns, pb.ns, pb.v4)
		v6Bps := iperf(b, pa.ns, pb.ns, pb.v6)
		rawBps := iperf(b, c.nodes["n1"].ns, c.nodes["n2"].ns, ulIP)
		b.ReportMetric(v4Bps/1e9, "ipv"+under+"-underlay-pod-v4-Gbit/s")
		b.ReportMetric(v6Bps/1e9, "ipv"+under+"-underlay-pod-v6-Gbit/s")
		b.ReportMetric(rawBps/1e9, "ipv"+under+"-underlay-raw-Gbit/s")
		b.Logf("IPv%s underlay: pod IPv6/IPv4 %.2f, pod IPv4/raw %.2f, pod IPv6/raw %.2f", under, v6Bps/v4Bps, v4Bps/rawBps, v6Bps/rawBps)
	}
}
