package egressvm

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
)

// TestOffloadHostPort: a node's own traffic (its namespace here: what
// the kubelet, the API server or a NodePort would send) reaches pods on
// every node and gets the replies, on offload and software nodes alike,
// through the host ports (skn<VNI>), while the anycast gateway stays the
// pods' first hop. n1 and n2 run --mode offload (netdevsim eswitches,
// pods standing in for VFs), n3 --mode software; network pods (snat)
// has a pod on each node, network tenant (none) one on each offload
// node.
//   - every node pings every pods pod and opens TCP to it; a pod on
//     another node sees the node's underlay address (the node's packets
//     left through its host port, and the reply, routed by the pod's
//     node out of its gateway to the node's host port MAC, came back
//     through the overlay: the nodes filter reverse paths strictly, so
//     a reply over the underlay would be dropped);
//   - the tenant network (egress none) has no host port on any node,
//     and no node reaches a tenant pod on another node (its pods still
//     reach each other).
func TestOffloadHostPort(t *testing.T) {
	guest.Require(t)
	dir := t.TempDir()
	guest.UnderlayBridge(t, "skhpbr", "192.0.2.254/24")
	ctlAddr := "192.0.2.254:7401"
	ctl := guest.StartController(t, ctlAddr, dir)

	type node struct{ name, mode, ip string }
	nodes := []node{{"n1", "offload", "192.0.2.1"}, {"n2", "offload", "192.0.2.2"}, {"n3", "software", "192.0.2.3"}}
	pods := map[string][]string{"n1": {"a", "t1"}, "n2": {"b", "t2"}, "n3": {"c"}} // in VF order
	network := map[string]string{"a": "pods", "b": "pods", "c": "pods", "t1": "tenant", "t2": "tenant"}
	socks, pfs := map[string]string{}, map[string]string{}
	for i, n := range nodes {
		ns := "skhp" + n.name
		for _, p := range pods[n.name] {
			guest.AddNetns(t, "skhpp"+p) // before the agent: see offloadvm
		}
		guest.AddNetns(t, ns)
		guest.Run(t, ipBin, "link", "add", "u"+n.name, "type", "veth", "peer", "name", "eth0", "netns", ns)
		guest.Run(t, ipBin, "link", "set", "u"+n.name, "master", "skhpbr", "up")
		in(t, ns, ipBin, "addr", "add", n.ip+"/24", "dev", "eth0")
		in(t, ns, ipBin, "link", "set", "eth0", "up")
		// Strict reverse-path filtering on the underlay, as on a real
		// node: a pod's reply that took the underlay (unNATed: its
		// node's conntrack has no entry for a reply whose request the
		// eswitch carried) instead of the overlay back to the node's
		// host port is dropped, so the checks below see only the
		// overlay path.
		in(t, ns, "/bin/sh", "-c", "echo 1 > /proc/sys/net/ipv4/conf/all/rp_filter && echo 1 > /proc/sys/net/ipv4/conf/eth0/rp_filter")
		if n.mode == "offload" {
			pfs[n.name] = guest.SwitchdevEswitch(t, ns, 81+i, len(pods[n.name]))
		}
		socks[n.name] = filepath.Join(dir, n.name+".sock")
		guest.StartIn(t, ns, "skiff-agent", "--controller", ctlAddr, "--node", n.name, "--underlay-ip", n.ip,
			"--state-dir", filepath.Join(dir, n.name+".state"), "--socket", socks[n.name], "--mode", n.mode)
	}
	guest.WaitFor(t, "three nodes registered", 60*time.Second, func() (bool, string) {
		out, err := ctl.Run("get", "nodes", "-o", "json")
		return err == nil && strings.Count(out, `"underlayIp"`) == 3, out
	})
	ctl.Must("network", "create", "pods", "--vni", "100", "--egress", "snat")
	ctl.Must("subnet", "create", "pods-v4", "--network", "pods", "--cidr", "198.51.100.0/25")
	ctl.Must("network", "create", "tenant", "--vni", "200")
	ctl.Must("subnet", "create", "tenant-v4", "--network", "tenant", "--cidr", "198.51.100.128/25")

	ips, home := map[string]string{}, map[string]string{}
	for _, n := range nodes {
		for vf, p := range pods[n.name] {
			req := localapi.CreateRequest{Name: p, Network: network[p], NetNS: guest.HoldNetns(t, "skhpp"+p), IfName: "eth0",
				Owner: "pod:default/" + p, Namespace: "default"}
			if n.mode == "offload" {
				req.PF, req.VF = pfs[n.name], &vf
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			resp, err := localapi.NewClient(socks[n.name]).Create(ctx, req)
			cancel()
			if err != nil {
				t.Fatalf("create %s on %s: %v", p, n.name, err)
			}
			ips[p], home[p] = strings.Split(resp.IPs[0], "/")[0], n.name
			t.Logf("%s (%s) on %s: %s", p, network[p], n.name, resp.IPs[0])
		}
	}
	ping := func(ns, addr string) bool {
		_, err := exec.Command(ipBin, "netns", "exec", ns, "/bin/ping", "-c", "1", "-W", "1", addr).CombinedOutput()
		return err == nil
	}
	diag := func() string { return diagnoseNodes("skhpn1", "skhpn2", "skhpn3") }

	// The overlay works in both networks.
	guest.WaitFor(t, "pods reach each other across the three nodes", 60*time.Second, func() (bool, string) {
		var failed []string
		for _, pr := range [][2]string{{"a", "b"}, {"b", "c"}, {"c", "a"}, {"t1", "t2"}} {
			if !ping("skhpp"+pr[0], ips[pr[1]]) {
				failed = append(failed, pr[0]+"->"+pr[1])
			}
		}
		return len(failed) == 0, fmt.Sprintf("no answer %v\n%s", failed, diag())
	})

	// Every node reaches every pods pod: ping, then TCP, seen from the
	// node's underlay address when the pod is on another node.
	guest.WaitFor(t, "every node pings every pod of network pods", 60*time.Second, func() (bool, string) {
		var failed []string
		for _, n := range nodes {
			for _, p := range []string{"a", "b", "c"} {
				if !ping("skhp"+n.name, ips[p]) {
					failed = append(failed, n.name+"->"+p)
				}
			}
		}
		return len(failed) == 0, fmt.Sprintf("no answer %v\n%s", failed, diag())
	})
	for _, n := range nodes {
		for _, p := range []string{"a", "b", "c"} {
			seen, err := guest.SourceSeen("/run/netns/skhp"+n.name, "/run/netns/skhpp"+p, ips[p])
			switch {
			case err != nil:
				t.Errorf("%s (%s) -> pod %s on %s: TCP: %v\n%s", n.name, n.mode, p, home[p], err, diag())
			case home[p] != n.name && seen != n.ip:
				t.Errorf("%s (%s) -> pod %s on %s: seen from %s, want the node's underlay address %s", n.name, n.mode, p, home[p], seen, n.ip)
			default:
				t.Logf("%s (%s) -> pod %s on %s: TCP, seen from %s", n.name, n.mode, p, home[p], seen)
			}
		}
	}

	// egress none: no host port, no node reaches another node's tenant
	// pod, whose network still works.
	for _, n := range nodes {
		if out, err := exec.Command(ipBin, "netns", "exec", "skhp"+n.name, ipBin, "link", "show", "skn200").CombinedOutput(); err == nil {
			t.Errorf("%s has a host port on the tenant network (egress none):\n%s", n.name, out)
		}
		if out, err := exec.Command(ipBin, "netns", "exec", "skhp"+n.name, ipBin, "link", "show", "skn100").CombinedOutput(); err != nil {
			t.Errorf("%s has no host port on network pods: %v\n%s", n.name, err, out)
		}
	}
	for from, to := range map[string]string{"n1": "t2", "n2": "t1", "n3": "t1"} {
		if ping("skhp"+from, ips[to]) {
			t.Errorf("%s reached the tenant pod %s on %s (egress none)", from, to, home[to])
		}
	}
	if !ping("skhppt2", ips["t1"]) {
		t.Errorf("the tenant pods no longer reach each other\n%s", diag())
	}
}
