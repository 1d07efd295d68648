package offloadvm

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestOffloadDualStack: a dual-stack network on two offload nodes (two
// pods on n1 standing in for VFs 0 and 1, one on n2). IPv6 ping and TCP
// work across the nodes and on one node (neighbour discovery through the
// nodes' replication bridges, the only path multicast has; the rest by
// destination MAC), each pod's IPv6 gateway answers on its node, and
// each pod learnt its peers' MACs by neighbour discovery. IPv4 keeps
// working alongside.
func TestOffloadDualStack(t *testing.T) {
	guest.Require(t)
	dir := t.TempDir()
	guest.UnderlayBridge(t, "skdsbr", "203.0.113.254/24")
	ctl := "203.0.113.254:7400"
	guest.StartIn(t, "", "skiff-controller", "--listen", ctl, "--data-dir", filepath.Join(dir, "etcd"))
	nodesUp := func(n int) func() (bool, string) {
		return func() (bool, string) {
			out, err := exec.Command(guest.Bin(t, "skiffctl"), "--controller", ctl, "get", "nodes", "-o", "json").CombinedOutput()
			return err == nil && strings.Count(string(out), `"underlayIp"`) == n, string(out)
		}
	}
	testkit.Eventually(t, "controller up", 90*time.Second, nodesUp(0))
	type dsNode struct{ name, ns, ip, sock, pf string }
	nodes := []*dsNode{{name: "n1", ns: "skdsn1", ip: "203.0.113.1"}, {name: "n2", ns: "skdsn2", ip: "203.0.113.2"}}
	pods := []struct {
		name string
		node *dsNode
		vf   int
	}{{"skdsp1", nodes[0], 0}, {"skdsp1b", nodes[0], 1}, {"skdsp2", nodes[1], 0}}
	for _, p := range pods {
		guest.AddNetns(t, p.name) // before the agents: see offloadvm's TestOffloadNodes
	}
	for i, n := range nodes {
		guest.AddNetns(t, n.ns)
		run(t, ipBin, "link", "add", "skdsu"+n.name, "type", "veth", "peer", "name", "eth0", "netns", n.ns)
		run(t, ipBin, "link", "set", "skdsu"+n.name, "master", "skdsbr", "up")
		in(t, n.ns, ipBin, "addr", "add", n.ip+"/24", "dev", "eth0")
		in(t, n.ns, ipBin, "link", "set", "eth0", "up")
		n.pf = guest.SwitchdevEswitch(t, n.ns, 71+i, 2)
		n.sock = filepath.Join(dir, n.name+".sock")
		guest.StartIn(t, n.ns, "skiff-agent", "--controller", ctl, "--node", n.name, "--underlay-ip", n.ip,
			"--state-dir", filepath.Join(dir, n.name+".state"), "--socket", n.sock, "--mode", "offload", "--stats-interval", "1s")
	}
	testkit.Eventually(t, "two nodes registered", 60*time.Second, nodesUp(2))
	skiffctl := func(args ...string) string {
		return run(t, append([]string{guest.Bin(t, "skiffctl"), "--controller", ctl}, args...)...)
	}
	skiffctl("network", "create", "ds", "--vni", "300")
	skiffctl("subnet", "create", "ds-v4", "--network", "ds", "--cidr", "198.51.100.0/24")
	skiffctl("subnet", "create", "ds-v6", "--network", "ds", "--cidr", "2001:db8:300::/64")
	const gw6 = "2001:db8:300::1"

	v4, v6, macs := map[string]string{}, map[string]string{}, map[string]string{}
	for _, p := range pods {
		nsPath := guest.HoldNetns(t, p.name)
		vf := p.vf
		req := localapi.CreateRequest{Name: p.name, Network: "ds", NetNS: nsPath, IfName: "eth0", PF: p.node.pf, VF: &vf}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		resp, err := localapi.NewClient(p.node.sock).Create(ctx, req)
		cancel()
		if err != nil {
			t.Fatalf("create %s on %s: %v", p.name, p.node.name, err)
		}
		for _, a := range resp.IPs {
			pr := netip.MustParsePrefix(a)
			if pr.Addr().Is6() {
				v6[p.name] = pr.Addr().String()
			} else {
				v4[p.name] = pr.Addr().String()
			}
		}
		if v4[p.name] == "" || v6[p.name] == "" || !strings.Contains(strings.Join(resp.Gateways, " "), gw6) {
			t.Fatalf("%s: want an IPv4 and an IPv6 address and gateway %s, got %v gateways %v", p.name, gw6, resp.IPs, resp.Gateways)
		}
		macs[p.name] = resp.MAC
		t.Logf("%s on %s: %s %v gateways %v", p.name, p.node.name, resp.MAC, resp.IPs, resp.Gateways)
	}
	nss := []string{"skdsn1", "skdsn2", "skdsp1", "skdsp1b", "skdsp2"}
	// Traffic only once each node has programmed the other's endpoints:
	// each node's VXLAN device floods the network's VNI to the other
	// VTEP and sends the other node's pods' MACs to it (the first frames
	// take the replication bridge; the encap rules are learnt from
	// them, and carry the transfer below).
	testkit.Eventually(t, "each node's entries for the other node's pods", 60*time.Second, func() (bool, string) {
		for node, want := range map[string]struct {
			vtep string
			pods []string
		}{"skdsn1": {"203.0.113.2", []string{"skdsp2"}}, "skdsn2": {"203.0.113.1", []string{"skdsp1", "skdsp1b"}}} {
			fdb := in(t, node, guest.Bridge, "fdb", "show", "dev", "skvx")
			if !strings.Contains(fdb, "00:00:00:00:00:00 dst "+want.vtep+" ") || !strings.Contains(fdb, "src_vni 300") {
				return false, fmt.Sprintf("%s floods nothing of VNI 300 to %s:\n%s", node, want.vtep, fdb)
			}
			for _, pod := range want.pods {
				if !strings.Contains(fdb, macs[pod]+" dst "+want.vtep+" ") {
					return false, fmt.Sprintf("%s sends %s's MAC %s nowhere:\n%s", node, pod, macs[pod], fdb)
				}
			}
		}
		return true, ""
	})
	ping := func(from, to string) {
		t.Helper()
		if err := guest.Tools.Ping(from, to, 3, 3*time.Second); err != nil {
			t.Fatalf("%v\n%s", err, diagnoseIn(t, nss...))
		}
	}
	// The gateway's address is on skg<vni> (not tentative: no DAD), the
	// pods' default IPv6 route points at it.
	if out := in(t, "skdsn1", ipBin, "-6", "addr", "show", "dev", "skg300"); !strings.Contains(out, gw6+"/64") || strings.Contains(out, "tentative") {
		t.Fatalf("skg300 on n1:\n%s", out)
	}
	if out := in(t, "skdsp1", ipBin, "-6", "route", "show", "default"); !strings.Contains(out, "via "+gw6) {
		t.Fatalf("skdsp1's IPv6 default route: %q", out)
	}
	// Across the nodes, on one node, both ways; then each pod's gateway.
	ping("skdsp1", v6["skdsp2"])
	ping("skdsp2", v6["skdsp1"])
	ping("skdsp1", v6["skdsp1b"])
	ping("skdsp1b", v6["skdsp2"])
	for _, p := range pods {
		ping(p.name, gw6)
	}
	ping("skdsp1", v4["skdsp2"])
	ping("skdsp1b", v4["skdsp1"])
	// Each pod learnt its peers' and its gateway's MACs by neighbour
	// discovery (no static entries: Skiff writes none into pods).
	if out := in(t, "skdsp1", ipBin, "-6", "neigh", "show", gw6); !strings.Contains(out, "lladdr 02:73:6b:00:01:2c") {
		t.Errorf("skdsp1's neighbour entry of its gateway %s: %q (want the network's gateway MAC)", gw6, out)
	}

	const size = 4 << 20
	if got := guest.TCPTransfer(t, "skdsp1", "skdsp2", v6["skdsp2"], size); got != size {
		t.Fatalf("IPv6 TCP p1 -> p2 (across): %d of %d bytes\n%s", got, size, diagnoseIn(t, nss...))
	}
	if got := guest.TCPTransfer(t, "skdsp2", "skdsp1b", v6["skdsp1b"], size); got != size {
		t.Fatalf("IPv6 TCP p2 -> p1b (across): %d of %d bytes", got, size)
	}
	if got := guest.TCPTransfer(t, "skdsp1b", "skdsp1", v6["skdsp1"], size); got != size {
		t.Fatalf("IPv6 TCP p1b -> p1 (one node): %d of %d bytes", got, size)
	}

	// The encap rule to p2 carried the transfer.
	var eps map[string]endpoint
	testkit.Eventually(t, "encap counters at the controller", 20*time.Second, func() (bool, string) {
		eps = endpoints(t, ctl)
		var encap uint64
		for _, r := range eps["skdsp1"].OffloadRules {
			if r.Kind == "encap" && strings.Contains(r.Rule, "dst_ip 203.0.113.2 ") {
				encap = max(encap, pkts(r))
			}
		}
		return encap > 1000, fmt.Sprintf("encap %d: %+v", encap, eps["skdsp1"].OffloadRules)
	})
	t.Logf("%d rules for skdsp1", len(eps["skdsp1"].OffloadRules))
}
