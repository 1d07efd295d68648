// Package egressvm shows a network's egress on offload nodes in the
// kernel VM: the real controller and two agents in --mode offload (a
// netdevsim eswitch in switchdev mode each, pods as veths standing in
// for VFs), and a namespace standing for the internet on the underlay,
// with no route back to pod addresses unless the test adds one.
package egressvm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

const ipBin = guest.IP

func in(t testing.TB, ns string, args ...string) string { t.Helper(); return guest.In(t, ns, args...) }

// Outside addresses, on the internet namespace's loopback.
const (
	denied   = "203.0.113.200" // excepted by the ipBlock policy below
	allowed  = "203.0.113.201"
	outside6 = "2001:db8:ee::200"
)

// TestOffloadEgress: on offload nodes,
//   - snat (network pods): a pod reaches the outside, which sees the
//     node's underlay address; the node forwards, the gateway skg100
//     forwards;
//   - none (network tenant, the default): a pod cannot reach the outside
//     even with a route back, the outside cannot reach it, and a snat
//     pod cannot reach it (on its node or the other) while the tenant
//     pods still reach each other across nodes;
//   - routed (network flat): a pod's connection leaves with its own
//     address (unanswered until the outside routes the subnet back);
//   - a NetworkPolicy egress ipBlock still applies to a snat pod's
//     traffic leaving the cluster (matched on the pod's own address, in
//     the flower policy chains, before the node masquerades it).
//
// n2 has one pod: a second stand-in VF pod plumbed while the agent
// applies was seen left with its stand-in veth down and its rules
// pointing at the bare representor (a pre-existing race of the offload
// datapath's stand-ins, not of egress; TestStandInPlumbedMidApply).
func TestOffloadEgress(t *testing.T) {
	guest.Require(t)
	nodes := []guest.RigNode{
		{Name: "n1", Mode: "offload", IP: "192.0.2.1", Pods: []string{"a", "t1", "r", "w"}},
		{Name: "n2", Mode: "offload", IP: "192.0.2.2", Pods: []string{"t2"}}, // one VF pod: see above
	}
	rig := guest.StartRig(t, "skeg", 7400, 71, nodes)
	ctl, dir := rig.Ctl, rig.Dir

	// The internet: on the underlay, no route to any pod subnet.
	inet := rig.Outside(t, "inet", "192.0.2.250")
	for _, a := range []string{denied, allowed} {
		in(t, inet, ipBin, "addr", "add", a+"/32", "dev", "lo")
		for _, n := range nodes {
			in(t, "skeg"+n.Name, ipBin, "route", "add", a+"/32", "via", "192.0.2.250")
		}
	}
	// The IPv6 internet: the underlay carries IPv6 too (the VTEPs stay
	// IPv4).
	in(t, inet, ipBin, "addr", "add", "2001:db8:ff::fe/64", "dev", "eth0", "nodad")
	in(t, inet, ipBin, "addr", "add", outside6+"/128", "dev", "lo")
	for i, n := range nodes {
		in(t, "skeg"+n.Name, ipBin, "addr", "add", fmt.Sprintf("2001:db8:ff::%d/64", i+1), "dev", "eth0", "nodad")
		in(t, "skeg"+n.Name, ipBin, "-6", "route", "add", outside6+"/128", "via", "2001:db8:ff::fe")
	}
	ctl.Must("network", "create", "pods", "--vni", "100", "--egress", "snat")
	ctl.Must("subnet", "create", "pods-v4", "--network", "pods", "--cidr", "198.51.100.0/25")
	ctl.Must("subnet", "create", "pods-v6", "--network", "pods", "--cidr", "2001:db8:100::/64")
	ctl.Must("network", "create", "tenant", "--vni", "200")
	ctl.Must("subnet", "create", "tenant-v4", "--network", "tenant", "--cidr", "198.51.100.128/25")
	ctl.Must("subnet", "create", "tenant-v6", "--network", "tenant", "--cidr", "2001:db8:200::/64")
	ctl.Must("network", "create", "flat", "--vni", "300", "--egress", "routed")
	ctl.Must("subnet", "create", "flat-v4", "--network", "flat", "--cidr", "203.0.113.0/25")

	network := map[string]string{"a": "pods", "w": "pods", "t1": "tenant", "t2": "tenant", "r": "flat"}
	ips := map[string]string{}
	for _, n := range nodes {
		for _, p := range n.Pods {
			ips[p] = rig.CreatePod(t, n, p, network[p])
		}
	}
	pings := func(from, addr string) bool { return guest.Tools.Ping("skegp"+from, addr, 1, time.Second) == nil }
	diag := func() string { return diagnose(inet) }

	// The overlay works in every network: the "cannot" checks below are
	// about egress, not a broken network.
	testkit.Eventually(t, "pods reach each other, across the offload nodes and on n1", 60*time.Second, func() (bool, string) {
		var failed []string
		for _, pr := range [][2]string{{"a", "w"}, {"t1", "t2"}, {"t2", "t1"}} {
			if !pings(pr[0], ips[pr[1]]) {
				failed = append(failed, pr[0]+"->"+pr[1])
			}
		}
		return len(failed) == 0, fmt.Sprintf("no answer %v\n%s", failed, diag())
	})

	// snat: out, masqueraded to n1's address.
	if seen, err := seenFrom(t, "skegpa", denied); err != nil || seen != "192.0.2.1" {
		t.Errorf("snat pod a -> outside: seen from %q (%v), want n1's 192.0.2.1\n%s", seen, err, diag())
	}
	for key, want := range map[string]string{"ipv4/ip_forward": "1", "ipv4/conf/skg100/forwarding": "1", "ipv4/conf/skg200/forwarding": "0", "ipv4/conf/skg300/forwarding": "1",
		"ipv6/conf/all/forwarding": "1", "ipv6/conf/skg100/forwarding": "1", "ipv6/conf/skg200/forwarding": "0"} {
		if v := strings.TrimSpace(in(t, "skegn1", "/bin/cat", "/proc/sys/net/"+key)); v != want {
			t.Errorf("n1: net.%s = %s, want %s", strings.ReplaceAll(key, "/", "."), v, want)
		}
	}
	// snat over IPv6: out, masqueraded to n1's IPv6 address; the pod's
	// packets leave the eswitch for n1's stack at the gateway, as IPv4's.
	if seen, err := seenFrom(t, "skegpa", outside6); err != nil || seen != "2001:db8:ff::1" {
		t.Errorf("snat pod a -> IPv6 outside: seen from %q (%v), want n1's 2001:db8:ff::1\n%s", seen, err, diag())
	}
	// Between networks over IPv6: w reaches a, the tenant pod t1 does
	// not (through the gateways: the isolation rules are inet).
	a6 := podIPv6(t, "skegpa")
	testkit.Eventually(t, "w reaches a over IPv6", 30*time.Second, func() (bool, string) {
		return pings("w", a6), "no answer from " + a6 + "\n" + diag()
	})
	if pings("t1", a6) {
		t.Errorf("tenant pod t1 reached the snat pod a (%s) over IPv6", a6)
	}

	// none: nothing out even with a route back, nothing in; no snat pod
	// reaches it, on its node or the other.
	in(t, inet, ipBin, "route", "add", "198.51.100.128/25", "via", "192.0.2.1")
	in(t, inet, ipBin, "-6", "route", "add", "2001:db8:200::/64", "via", "2001:db8:ff::1")
	if seen, err := seenFrom(t, "skegpt1", denied); err == nil {
		t.Errorf("a pod of a network with egress none reached the outside (seen from %s)", seen)
	}
	if seen, err := seenFrom(t, "skegpt1", outside6); err == nil {
		t.Errorf("a pod of a network with egress none reached the IPv6 outside (seen from %s)", seen)
	}
	if err := guest.Tools.Ping(inet, podIPv6(t, "skegpt1"), 1, time.Second); err == nil {
		t.Error("the IPv6 outside reached a pod of a network with egress none")
	}
	if err := guest.Tools.Ping(inet, ips["t1"], 1, time.Second); err == nil {
		t.Error("the outside reached a pod of a network with egress none")
	}
	for _, dst := range []string{"t1", "t2"} {
		if pings("a", ips[dst]) {
			t.Errorf("the snat pod a reached tenant pod %s (%s)", dst, ips[dst])
		}
	}
	if pings("r", ips["a"]) {
		t.Error("the routed pod r reached the snat pod a through n1")
	}

	// routed: the pod's own address, answered once the outside routes
	// the subnet back.
	if seen, err := seenFrom(t, "skegpr", denied); err == nil {
		t.Errorf("the routed pod was answered by an outside with no route back (seen from %s): translated", seen)
	}
	in(t, inet, ipBin, "route", "add", "203.0.113.0/25", "via", "192.0.2.1")
	if seen, err := seenFrom(t, "skegpr", denied); err != nil || seen != ips["r"] {
		t.Errorf("routed pod r -> outside: seen from %q (%v), want its own %s\n%s", seen, err, ips["r"], diag())
	}

	// NetworkPolicy: w may leave only to 203.0.113.0/24 except denied.
	file := filepath.Join(dir, "egress.yaml")
	if err := os.WriteFile(file, []byte(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: w-out, namespace: default}
spec:
  podSelector: {matchLabels: {app: w}}
  policyTypes: [Egress]
  egress:
  - to: [{ipBlock: {cidr: 203.0.113.0/24, except: [`+denied+`/32]}}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if seen, err := seenFrom(t, "skegpw", denied); err != nil || seen != "192.0.2.1" {
		t.Fatalf("before the policy, w -> %s: seen from %q (%v)", denied, seen, err)
	}
	ctl.Must("policy", "apply", "-f", file)
	testkit.Eventually(t, "w's egress policy in force", 30*time.Second, func() (bool, string) {
		return !pings("w", denied), "w still reaches " + denied
	})
	if seen, err := seenFrom(t, "skegpw", allowed); err != nil || seen != "192.0.2.1" {
		t.Errorf("w -> %s (inside its ipBlock): seen from %q (%v)\n%s", allowed, seen, err, diag())
	}
	if seen, err := seenFrom(t, "skegpw", denied); err == nil {
		t.Errorf("w -> %s (excepted) connected, seen from %s", denied, seen)
	}
	if seen, err := seenFrom(t, "skegpa", denied); err != nil || seen != "192.0.2.1" {
		t.Errorf("a (not selected) -> %s: seen from %q (%v)", denied, seen, err)
	}
	ctl.Must("delete", "policy", "w-out")
	testkit.Eventually(t, "w out again once the policy is gone", 30*time.Second, func() (bool, string) {
		return pings("w", denied), "w does not reach " + denied
	})
}

// seenFrom: the source address the internet namespace sees of a TCP
// connection from the named pod namespace to addr.
func seenFrom(t *testing.T, from, addr string) (string, error) {
	t.Helper()
	return testkit.SourceSeen(from, "skeginet", addr)
}

// diagnose renders the nodes' links, routes, neighbours and filters with
// counters, and the internet's addresses and routes.
func diagnose(inet string) string {
	var b strings.Builder
	b.WriteString(diagnoseNodes("skegn1", "skegn2"))
	out, _ := exec.Command(ipBin, "netns", "exec", inet, "/bin/sh", "-c", guest.IP+" -br addr; "+guest.IP+" route").CombinedOutput()
	fmt.Fprintf(&b, "==== %s\n%s\n", inet, out)
	return b.String()
}

// diagnoseNodes renders each node namespace's links, routes (every
// table), policy rules, neighbours and filters with counters.
func diagnoseNodes(nss ...string) string {
	var b strings.Builder
	const ip, tc = guest.IP, guest.TC // busybox sh prefers its own applets
	// bridge fdb: a software node's forwarding to remote MACs (its
	// VXLAN entries) and to its host port.
	node := ip + " -br link; " + ip + " -br addr; " + ip + " route show table all; " + ip + " rule; " + ip + " neigh; " +
		"/usr/sbin/bridge fdb show | grep -v -E '^33:33|^01:00:5e' ; for d in $(ls /sys/class/net); do " +
		tc + " -s filter show dev $d ingress 2>/dev/null | grep -E 'filter|dst_mac|arp_tip|redirect|Sent|chain|ct|not_in_hw' ; done"
	for _, ns := range nss {
		out, _ := exec.Command(ipBin, "netns", "exec", ns, "/bin/sh", "-c", node).CombinedOutput()
		fmt.Fprintf(&b, "==== %s\n%s\n", ns, out)
	}
	return b.String()
}

// podIPv6 is the global IPv6 address of eth0 in a pod namespace.
func podIPv6(t *testing.T, ns string) string {
	t.Helper()
	for _, f := range strings.Fields(in(t, ns, ipBin, "-6", "-br", "addr", "show", "dev", "eth0", "scope", "global")) {
		if a, _, ok := strings.Cut(f, "/"); ok {
			return a
		}
	}
	t.Fatalf("%s: no global IPv6 address on eth0", ns)
	return ""
}
