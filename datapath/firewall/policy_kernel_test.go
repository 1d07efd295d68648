package firewall_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/datapath/firewall"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestPolicyEnforcement builds a node (a namespace with a bridge and three
// pods) and checks with real TCP and ICMP that SetPolicy allows exactly
// what it says, that replies pass, and that re-applying writes nothing.
func TestPolicyEnforcement(t *testing.T) {
	node := testkit.New(t)
	testkit.Run(t, node, "ip", "link", "add", "skb100", "type", "bridge")
	testkit.Run(t, node, "ip", "link", "set", "skb100", "up")
	testkit.Run(t, node, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1")
	pods := map[string]string{}
	ips := map[string]string{"a": "198.51.100.11", "b": "198.51.100.12", "c": "198.51.100.13"}
	for _, p := range []string{"a", "b", "c"} {
		ns := testkit.New(t)
		pods[p] = ns
		testkit.Run(t, node, "ip", "link", "add", "skp"+p, "type", "veth", "peer", "name", "eth0", "netns", ns)
		testkit.Run(t, node, "ip", "link", "set", "skp"+p, "master", "skb100", "up")
		testkit.Run(t, ns, "ip", "addr", "add", ips[p]+"/24", "dev", "eth0")
		testkit.Run(t, ns, "ip", "link", "set", "eth0", "up")
	}
	iperfServer(t, pods["c"], ips["c"])
	tcp := func(from string) bool {
		_, err := testkit.Try(pods[from], "iperf3", "-c", ips["c"], "-t", "1", "--connect-timeout", "1000")
		return err == nil
	}
	ping := func(from, to string) bool {
		err := testkit.Ping(pods[from], ips[to], 1, time.Second)
		return err == nil
	}
	if !tcp("a") || !tcp("b") || !ping("b", "a") {
		t.Fatal("no connectivity before any policy")
	}
	fw := open(t, node)
	cfg := firewall.Policy{
		Groups: map[string][]netip.Addr{"web": {netip.MustParseAddr(ips["a"])}},
		Endpoints: []firewall.Endpoint{
			// c accepts TCP 5201 from the "web" set only.
			{Name: "c", Device: "skb100", IPs: []netip.Addr{netip.MustParseAddr(ips["c"])}, IngressIsolated: true,
				Ingress: []firewall.Rule{{Peers: []firewall.Peer{{Group: "web"}}, Ports: []firewall.Port{{Proto: unix.IPPROTO_TCP, From: 5201, To: 5201}}}}},
			// b may send nothing new.
			{Name: "b", Device: "skb100", IPs: []netip.Addr{netip.MustParseAddr(ips["b"])}, EgressIsolated: true},
		},
	}
	if err := fw.set(cfg); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name string
		got  bool
		want bool
	}{
		{"a -> c TCP 5201 (allowed, its replies pass)", tcp("a"), true},
		{"b -> c TCP 5201 (b not in the set, and b egress-isolated)", tcp("b"), false},
		{"a -> c ICMP (port not allowed)", ping("a", "c"), false},
		{"b -> a ICMP (b egress-isolated)", ping("b", "a"), false},
		{"a -> b ICMP (b's replies pass)", ping("a", "b"), true},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: reachable=%v, want %v", c.name, c.got, c.want)
		}
	}
	w := fw.k.Writes()
	if err := fw.set(cfg); err != nil {
		t.Fatal(err)
	}
	if fw.k.Writes() != w {
		t.Fatalf("re-applying the same policy wrote %d transactions", fw.k.Writes()-w)
	}
	// Lift b's egress isolation (the rules change: the table is
	// rewritten), then let b join the "web" group: only one set element
	// is added, and b reaches c.
	cfg.Endpoints = cfg.Endpoints[:1]
	if err := fw.set(cfg); err != nil {
		t.Fatal(err)
	}
	if !tcp("a") || tcp("b") {
		t.Fatal("b is not yet in the group, yet reaches c (or a lost c)")
	}
	cfg.Groups["web"] = []netip.Addr{netip.MustParseAddr(ips["a"]), netip.MustParseAddr(ips["b"])}
	counters, err := fw.counters()
	if err != nil {
		t.Fatal(err)
	}
	var allowed, dropped uint64
	for _, c := range counters {
		if c.Endpoint == "c" && c.Direction == datapath.Ingress && c.Rule == 0 {
			allowed = c.Packets
		}
		if c.Endpoint == "c" && c.Direction == datapath.Ingress && c.Rule == -1 {
			dropped = c.Packets
		}
	}
	if allowed == 0 || dropped == 0 {
		t.Fatalf("counters of c's ingress: allowed %d, dropped %d packets; want both > 0 (%+v)", allowed, dropped, counters)
	}
	if err := fw.set(cfg); err != nil {
		t.Fatal(err)
	}
	if got := fw.last; got.Rewritten || got.Elements != 1 {
		t.Fatalf("adding b to the group wrote %+v; want 1 element and no table", got)
	}
	if !tcp("b") {
		t.Fatal("b joined the group but does not reach c")
	}
	after, _ := fw.counters()
	for _, c := range after {
		if c.Endpoint == "c" && c.Direction == datapath.Ingress && c.Rule == 0 && c.Packets <= allowed {
			t.Fatalf("the allow rule's counter did not survive the set change or did not move: %d then %d", allowed, c.Packets)
		}
	}
	// A wider rule: c accepts everything from the /24 except a.
	cfg.Groups["web"] = cfg.Groups["web"][:1]
	cfg.Endpoints[0].Ingress = append(cfg.Endpoints[0].Ingress, firewall.Rule{Peers: []firewall.Peer{{CIDR: netip.MustParsePrefix("198.51.100.0/24"),
		Except: []netip.Prefix{netip.MustParsePrefix("198.51.100.11/32")}}}})
	if err := fw.set(cfg); err != nil {
		t.Fatal(err)
	}
	if !tcp("b") || !ping("b", "c") || ping("a", "c") {
		t.Fatalf("after adding the CIDR rule: b tcp %v, b ping %v, a ping %v; want true true false", tcp("b"), ping("b", "c"), ping("a", "c"))
	}
	if err := fw.set(firewall.Policy{}); err != nil {
		t.Fatal(err)
	}
	if out, _ := testkit.Try(node, "nft", "list", "table", "inet", firewall.PolicyTable); !strings.Contains(out, "No such file") && out != "" {
		t.Fatalf("policy table left after removing every policy:\n%s", out)
	}
	if !ping("a", "c") {
		t.Fatal("no connectivity after removing the policy")
	}
}

// TestPolicyLargeGroup checks that a group of 10,000 addresses reaches
// the kernel whole (a set sent in one netlink message is cut short), and
// that changing one member of it is two element writes.
func TestPolicyLargeGroup(t *testing.T) {
	node := testkit.New(t)
	fw := open(t, node)
	var group []netip.Addr
	for i := range 10000 {
		group = append(group, netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
	}
	cfg := firewall.Policy{Groups: map[string][]netip.Addr{"g": group}, Endpoints: []firewall.Endpoint{{
		Name: "server", Device: "skb100", IPs: []netip.Addr{netip.MustParseAddr("198.51.100.12")}, IngressIsolated: true,
		Ingress: []firewall.Rule{{Peers: []firewall.Peer{{Group: "g"}}}}}}}
	if err := fw.set(cfg); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		out := testkit.Run(t, node, "nft", "-j", "list", "set", "inet", firewall.PolicyTable, "g-4")
		return strings.Count(out, `"10.`)
	}
	if n := count(); n != len(group) {
		t.Fatalf("the kernel's set holds %d of %d addresses", n, len(group))
	}
	cfg.Groups["g"] = append(slices.Clone(group[1:]), netip.MustParseAddr("10.200.0.1"))
	if err := fw.set(cfg); err != nil {
		t.Fatal(err)
	}
	if got := fw.last; got.Rewritten || got.Elements != 2 {
		t.Fatalf("replacing one member wrote %+v; want 2 elements and no table", got)
	}
	if n := count(); n != len(group) {
		t.Fatalf("after the change the set holds %d addresses, want %d", n, len(group))
	}
}

// TestPolicyIPv6 checks the IPv6 side of the same rules: neighbour
// discovery passes an isolated endpoint's chain, the address family of a
// set and a CIDR is matched, and replies pass.
func TestPolicyIPv6(t *testing.T) {
	node := testkit.New(t)
	testkit.Run(t, node, "ip", "link", "add", "skb100", "type", "bridge")
	testkit.Run(t, node, "ip", "link", "set", "skb100", "up")
	ips := map[string]string{"a": "2001:db8::11", "b": "2001:db8::12", "c": "2001:db8::13"}
	pods := map[string]string{}
	for _, p := range []string{"a", "b", "c"} {
		ns := testkit.New(t)
		pods[p] = ns
		testkit.Run(t, node, "ip", "link", "add", "skp"+p, "type", "veth", "peer", "name", "eth0", "netns", ns)
		testkit.Run(t, node, "ip", "link", "set", "skp"+p, "master", "skb100", "up")
		testkit.Run(t, ns, "ip", "addr", "add", ips[p]+"/64", "dev", "eth0", "nodad")
		testkit.Run(t, ns, "ip", "link", "set", "eth0", "up")
	}
	fw := open(t, node)
	if err := firewall.EnableBridgeNetfilter(fw.k); err != nil {
		t.Fatal(err)
	}
	iperfServer(t, pods["c"], ips["c"])
	tcp := func(from string) bool {
		_, err := testkit.Try(pods[from], "iperf3", "-c", ips["c"], "-t", "1", "--connect-timeout", "1000")
		return err == nil
	}
	ping := func(from, to string) bool {
		err := testkit.Ping(pods[from], ips[to], 1, time.Second)
		return err == nil
	}
	if !tcp("a") || !tcp("b") || !ping("a", "c") {
		t.Fatal("no IPv6 connectivity before any policy")
	}
	// c admits TCP from the group {a}, and everything from b's /128 by
	// CIDR; an IPv4 CIDR must not let anything in.
	if err := fw.set(firewall.Policy{
		Groups: map[string][]netip.Addr{"web": {netip.MustParseAddr(ips["a"]), netip.MustParseAddr("198.51.100.11")}},
		Endpoints: []firewall.Endpoint{{Name: "c", Device: "skb100", IPs: []netip.Addr{netip.MustParseAddr(ips["c"])}, IngressIsolated: true,
			Ingress: []firewall.Rule{
				{Peers: []firewall.Peer{{Group: "web"}}, Ports: []firewall.Port{{Proto: unix.IPPROTO_TCP, From: 5201, To: 5201}}},
				{Peers: []firewall.Peer{{CIDR: netip.MustParsePrefix("198.51.100.0/24")}}},
			}}},
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want bool
	}{
		{"a -> c TCP 5201 (group)", tcp("a"), true},
		{"b -> c TCP 5201 (not in the group)", tcp("b"), false},
		{"a -> c ICMPv6 (port not allowed)", ping("a", "c"), false},
		{"c -> a ICMPv6 (replies pass, ND works)", ping("c", "a"), true},
		{"a -> b ICMPv6 (b not isolated)", ping("a", "b"), true},
	} {
		if c.got != c.want {
			t.Errorf("%s: reachable=%v, want %v", c.name, c.got, c.want)
		}
	}
	// The neighbour entries of c on a and b must have come from ND
	// through c's chain, not from before the policy: flush and retry.
	testkit.Run(t, pods["a"], "ip", "-6", "neigh", "flush", "dev", "eth0")
	testkit.Run(t, pods["c"], "ip", "-6", "neigh", "flush", "dev", "eth0")
	if !tcp("a") {
		t.Error("a -> c TCP 5201 fails once neighbours must be discovered again")
	}
}

// node is the firewall of a test node: its kernel, and what the last
// policy table write did.
type node struct {
	k    nl.Kernel
	last nl.NftChange
}

func open(t *testing.T, ns string) *node {
	t.Helper()
	k, err := nl.Open(testkit.Path(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return &node{k: k}
}

// set writes pol's table.
func (n *node) set(pol firewall.Policy) error {
	c, err := n.k.SetTable(pol.Table())
	n.last = c
	return err
}

func (n *node) counters() ([]datapath.PolicyCounter, error) {
	cs, err := n.k.TableCounters(nl.NftInet, firewall.PolicyTable)
	return firewall.PolicyCounters(cs), err
}

// iperfServer runs an iperf3 server on ip in namespace ns until the test
// ends.
func iperfServer(t testing.TB, ns, ip string) {
	t.Helper()
	pid := filepath.Join(t.TempDir(), "iperf.pid")
	testkit.Run(t, ns, "iperf3", "-s", "-D", "-B", ip, "-I", pid)
	t.Cleanup(func() {
		if b, err := os.ReadFile(pid); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(n, syscall.SIGKILL)
			}
		}
	})
	// iperf3 -D returns once it has forked, before the server listens:
	// a client right away may find no listener (seen under load).
	deadline := time.Now().Add(10 * time.Second)
	for {
		if out, _ := testkit.Try(ns, "ss", "-Hltn", "sport", "= :5201"); strings.Contains(out, "LISTEN") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("iperf3 in %s does not listen on %s:5201", ns, ip)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
