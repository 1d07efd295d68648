package egressvm

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// hostAddrs is TestOffloadHostPort's IPv6 half: the nodes' host
// addresses (--host-ip; a /128 on eth0, so the underlay carries no IPv6
// between the nodes and only the overlay brings a reply back), on an
// IPv4 underlay, offload and software nodes alike:
//   - every node pings every pods pod's IPv6 address and opens TCP to
//     it; a pod on another node sees the node's host address (the
//     route through skn100 from it), not the gateway's, and its reply,
//     routed by its node out of the gateway (rule iif skg100/skb100,
//     IPv6) to the node's host port MAC, comes back through the
//     overlay;
//   - every pods pod pings every other node's host address and opens
//     TCP to it, seen there from the pod's own IPv6 address, and its
//     route to each stays through its gateway (no ICMPv6 redirect to a
//     host port MAC, which a pod's TCP socket would take: on an offload
//     node its representor has no rule for that MAC);
//   - no node reaches another node's tenant pod (egress none) over
//     IPv6, and the tenant pods still reach each other.
func hostAddrs(t *testing.T, nodes []guest.RigNode, home map[string]string, ping func(ns, addr string) bool, diag func() string) {
	ips6 := map[string]string{}
	for p := range home {
		ips6[p] = podIPv6(t, "skhpp"+p)
	}
	diag6 := func() string {
		s := diag()
		for _, n := range nodes {
			o, _ := exec.Command(ipBin, "netns", "exec", "skhp"+n.Name, "/bin/sh", "-c",
				ipBin+" -6 addr; "+ipBin+" -6 route show table all; "+ipBin+" -6 rule; "+ipBin+" -6 neigh").CombinedOutput()
			s += "==== skhp" + n.Name + " IPv6 addresses, routes, rules and neighbours\n" + string(o) + "\n"
		}
		return s
	}
	pods := []string{"a", "b", "c"}
	nodesPingPods(t, " over IPv6", nodes, pods, ips6, ping, diag6)
	nodesReachPods(t, nodes, pods, home, ips6, func(n guest.RigNode) string { return n.HostIP }, diag6)
	for _, p := range pods {
		for _, n := range nodes {
			if n.Name == home[p] {
				continue
			}
			if !ping("skhpp"+p, n.HostIP) {
				o, _ := exec.Command(ipBin, "netns", "exec", "skhpp"+p, "/bin/sh", "-c", ipBin+" -6 route get "+n.HostIP+"; "+ipBin+" -6 neigh; "+
					ipBin+" -6 route show table all; nstat -az Icmp6InRedirects Ip6InNoRoutes; /bin/ping -c 3 -i 0.5 "+n.HostIP).CombinedOutput()
				t.Errorf("pod %s on %s: no answer from %s's host address %s\n==== the pod\n%s\n%s", p, home[p], n.Name, n.HostIP, o, diag6())
				continue
			}
			sourceSeen(t, fmt.Sprintf("pod %s on %s -> %s (%s) at %s", p, home[p], n.Name, n.Mode, n.HostIP), "skhpp"+p, "skhp"+n.Name, n.HostIP, ips6[p], diag6)
		}
	}
	// The pods' first hop is still their gateway: no node redirected
	// a pod to another node's host port MAC (inet skiff noredirect; a
	// pod's representor has no rule for that MAC). The node routed
	// each pod's packets to the other nodes' host addresses back out
	// of the device they came in by, which sends a redirect unless
	// dropped: the pod counts it.
	for _, p := range pods {
		snmp, err := exec.Command(ipBin, "netns", "exec", "skhpp"+p, "cat", "/proc/net/snmp6").CombinedOutput()
		f := strings.Fields(string(snmp))
		switch i := slices.Index(f, "Icmp6InRedirects"); {
		case err != nil || i < 0 || i+1 >= len(f):
			t.Errorf("pod %s: /proc/net/snmp6: %v\n%s", p, err, snmp)
		case f[i+1] != "0":
			t.Errorf("pod %s on %s received %s ICMPv6 redirects", p, home[p], f[i+1])
		}
		for _, n := range nodes {
			out, err := exec.Command(ipBin, "netns", "exec", "skhpp"+p, ipBin, "-6", "route", "get", n.HostIP).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "via 2001:db8:100::1 ") {
				t.Errorf("pod %s on %s: its route to %s's host address is not its gateway's (redirected?): %v\n%s", p, home[p], n.Name, err, out)
			}
		}
	}
	for from, to := range map[string]string{"n1": "t2", "n2": "t1", "n3": "t1", "n4": "t2"} {
		if ping("skhp"+from, ips6[to]) {
			t.Errorf("%s reached the tenant pod %s on %s over IPv6 (egress none)", from, to, home[to])
		}
	}
	if !ping("skhppt2", ips6["t1"]) {
		t.Errorf("the tenant pods no longer reach each other over IPv6\n%s", diag6())
	}
}

// nodesPingPods waits until every node pings each of pods at its
// address in addrs.
func nodesPingPods(t *testing.T, over string, nodes []guest.RigNode, pods []string, addrs map[string]string, ping func(ns, addr string) bool, diag func() string) {
	t.Helper()
	testkit.Eventually(t, "every node pings every pod of network pods"+over, 60*time.Second, func() (bool, string) {
		var failed []string
		for _, n := range nodes {
			for _, p := range pods {
				if !ping("skhp"+n.Name, addrs[p]) {
					failed = append(failed, n.Name+"->"+p)
				}
			}
		}
		return len(failed) == 0, fmt.Sprintf("no answer %v\n%s", failed, diag())
	})
}

// nodesReachPods opens TCP from every node to each of pods at its
// address in addrs: a pod on another node must see the node's address
// own(n) (its underlay or its host address: not the gateway's).
func nodesReachPods(t *testing.T, nodes []guest.RigNode, pods []string, home, addrs map[string]string, own func(guest.RigNode) string, diag func() string) {
	t.Helper()
	for _, n := range nodes {
		for _, p := range pods {
			want := ""
			if home[p] != n.Name {
				want = own(n)
			}
			sourceSeen(t, fmt.Sprintf("%s (%s) -> pod %s on %s at %s", n.Name, n.Mode, p, home[p], addrs[p]), "skhp"+n.Name, "skhpp"+p, addrs[p], want, diag)
		}
	}
}

// sourceSeen opens TCP from namespace from to addr:8080 in namespace
// to, and checks the source the server saw is want (any when empty).
func sourceSeen(t *testing.T, what, from, to, addr, want string, diag func() string) {
	t.Helper()
	seen, err := testkit.SourceSeen(from, to, addr)
	switch {
	case err != nil:
		t.Errorf("%s: TCP: %v\n%s", what, err, diag())
	case want != "" && seen != want:
		t.Errorf("%s: seen from %s, want %s", what, seen, want)
	default:
		t.Logf("%s: TCP, seen from %s", what, seen)
	}
}
