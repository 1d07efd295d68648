package egressvm

import (
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestOffloadHostPort: a node's own traffic (its namespace here: what
// the kubelet, the API server or a NodePort would send) reaches pods on
// every node and gets the replies, on offload and software nodes alike,
// through the host ports (skn<VNI>), while the anycast gateway stays the
// pods' first hop. n1, n2 and n4 run --mode offload (netdevsim
// eswitches, pods standing in for VFs), n3 --mode software; network
// pods (snat) has a pod on n1, n2 and n3, network tenant (none) one on
// each offload node. n4 has no pod of network pods (a control-plane
// node calling a webhook): the planner makes it a member all the same
// and it has a host port without a gateway.
//   - every node pings every pods pod and opens TCP to it; a pod on
//     another node sees the node's underlay address (the node's packets
//     left through its host port, and the reply, routed by the pod's
//     node out of its gateway to the node's host port MAC, came back
//     through the overlay: the nodes filter reverse paths strictly, so
//     a reply over the underlay would be dropped);
//   - the tenant network (egress none) has no host port on any node,
//     and no node reaches a tenant pod on another node (its pods still
//     reach each other);
//   - over IPv6, from the nodes' host addresses (hostAddrs).
//
// Both networks are dual-stack; each node has a host address
// (2001:db8:ff::N, skiff-agent --host-ip).
func TestOffloadHostPort(t *testing.T) {
	guest.Require(t)
	nodes := []guest.RigNode{
		{Name: "n1", Mode: "offload", IP: "192.0.2.1", HostIP: "2001:db8:ff::1", Pods: []string{"a", "t1"}},
		{Name: "n2", Mode: "offload", IP: "192.0.2.2", HostIP: "2001:db8:ff::2", Pods: []string{"b", "t2"}},
		{Name: "n3", Mode: "software", IP: "192.0.2.3", HostIP: "2001:db8:ff::3", Pods: []string{"c"}},
		{Name: "n4", Mode: "offload", IP: "192.0.2.4", HostIP: "2001:db8:ff::4", Pods: []string{"t4"}},
	}
	r := guest.StartRig(t, "skhp", 7401, 81, nodes)
	ctl := r.Ctl
	ctl.Must("network", "create", "pods", "--vni", "100", "--egress", "snat")
	ctl.Must("subnet", "create", "pods-v4", "--network", "pods", "--cidr", "198.51.100.0/25")
	ctl.Must("subnet", "create", "pods-v6", "--network", "pods", "--cidr", "2001:db8:100::/64")
	ctl.Must("network", "create", "tenant", "--vni", "200")
	ctl.Must("subnet", "create", "tenant-v4", "--network", "tenant", "--cidr", "198.51.100.128/25")
	ctl.Must("subnet", "create", "tenant-v6", "--network", "tenant", "--cidr", "2001:db8:200::/64")

	network := map[string]string{"a": "pods", "b": "pods", "c": "pods", "t1": "tenant", "t2": "tenant", "t4": "tenant"}
	ips, home := map[string]string{}, map[string]string{}
	for _, n := range nodes {
		for _, p := range n.Pods {
			ips[p], home[p] = r.CreatePod(t, n, p, network[p]), n.Name
		}
	}
	ping := func(ns, addr string) bool { return guest.Tools.Ping(ns, addr, 1, time.Second) == nil }
	diag := func() string { return diagnoseNodes("skhpn1", "skhpn2", "skhpn3", "skhpn4") }

	// The overlay works in both networks.
	testkit.Eventually(t, "pods reach each other across the three nodes", 60*time.Second, func() (bool, string) {
		var failed []string
		for _, pr := range [][2]string{{"a", "b"}, {"b", "c"}, {"c", "a"}, {"t1", "t2"}, {"t4", "t1"}} {
			if !ping("skhpp"+pr[0], ips[pr[1]]) {
				failed = append(failed, pr[0]+"->"+pr[1])
			}
		}
		return len(failed) == 0, fmt.Sprintf("no answer %v\n%s", failed, diag())
	})

	// Every node reaches every pods pod: ping, then TCP, seen from the
	// node's underlay address when the pod is on another node.
	pods := []string{"a", "b", "c"}
	nodesPingPods(t, "", nodes, pods, ips, ping, diag)
	nodesReachPods(t, nodes, pods, home, ips, func(n guest.RigNode) string { return n.IP }, diag)

	// egress none: no host port, no node reaches another node's tenant
	// pod, whose network still works.
	for _, n := range nodes {
		if out, err := exec.Command(ipBin, "netns", "exec", "skhp"+n.Name, ipBin, "link", "show", "skn200").CombinedOutput(); err == nil {
			t.Errorf("%s has a host port on the tenant network (egress none):\n%s", n.Name, out)
		}
		if out, err := exec.Command(ipBin, "netns", "exec", "skhp"+n.Name, ipBin, "link", "show", "skn100").CombinedOutput(); err != nil {
			t.Errorf("%s has no host port on network pods: %v\n%s", n.Name, err, out)
		}
	}
	for from, to := range map[string]string{"n1": "t2", "n2": "t1", "n3": "t1", "n4": "t2"} {
		if ping("skhp"+from, ips[to]) {
			t.Errorf("%s reached the tenant pod %s on %s (egress none)", from, to, home[to])
		}
	}
	if !ping("skhppt2", ips["t1"]) {
		t.Errorf("the tenant pods no longer reach each other\n%s", diag())
	}
	hostAddrs(t, nodes, home, ping, diag)
}
