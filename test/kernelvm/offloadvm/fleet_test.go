package offloadvm

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// fleetSize is TestOffloadFleet's size: local endpoints on n1 and
// stand-in nodes. The short form (make test-kernel) is a tenth of the
// whole one (make test-offload-fleet, make test-kernel-long).
func fleetSize() (locals, standIns int) {
	if testing.Short() {
		return 25, 100
	}
	return 250, 1000
}

// TestOffloadFleet: three offload nodes on one network whose plans also
// list the VTEPs of 1,000 stand-in nodes registered through the
// controller (one endpoint each, remote in every plan; their VTEPs are
// routed to a sink namespace), with 250 local endpoints on n1 (veths
// standing in for netdevsim's VFs), n2 and n3 one each. Unicast and
// neighbour resolution across the real nodes, IPv4 and IPv6; an ARP
// probe to the broadcast MAC, a tap port's DHCP discover and an IPv6
// multicast each reach every local endpoint and each real remote node
// exactly once; a second network that the nodes cannot offload (a
// stand-in node of it has an IPv6 VTEP) is refused on its own, with its
// reason at the controller, its pods forwarded in software between the
// nodes, while the first keeps forwarding.
func TestOffloadFleet(t *testing.T) {
	guest.Require(t)
	nLocals, nStandIns := fleetSize()
	var n1Pods []string
	for i := range nLocals {
		n1Pods = append(n1Pods, fmt.Sprintf("l%03d", i))
	}
	n1Pods = append(n1Pods, "o1")
	r := guest.StartRig(t, "skfl", 7410, 81, []guest.RigNode{
		{Name: "n1", Mode: "offload", IP: "192.0.2.1", Pods: n1Pods},
		{Name: "n2", Mode: "offload", IP: "192.0.2.2", Pods: []string{"r2", "o2"}},
		{Name: "n3", Mode: "offload", IP: "192.0.2.3", Pods: []string{"r3"}},
	})
	n1, n2, n3 := r.Nodes[0], r.Nodes[1], r.Nodes[2]
	// Room in the underlay's backlog for a broadcast's copy to every
	// VTEP (guest.Backlog says why).
	guest.Backlog(t, 4*nStandIns)
	// The stand-ins' VTEPs (198.19.0.0/16) lie behind a sink on the
	// underlay, which drops what it gets.
	r.Outside(t, "sink", "192.0.2.200")
	for _, n := range r.Nodes {
		guest.In(t, r.Prefix+n.Name, ipBin, "route", "add", "198.19.0.0/16", "via", "192.0.2.200")
	}
	r.Ctl.Must("network", "create", "fleet", "--vni", "400")
	r.Ctl.Must("subnet", "create", "fleet-v4", "--network", "fleet", "--cidr", "198.18.0.0/20")
	r.Ctl.Must("subnet", "create", "fleet-v6", "--network", "fleet", "--cidr", "2001:db8:400::/64")

	// The stand-in nodes, registered as agents register, and their
	// endpoints, through the controller's API.
	conn, err := grpc.NewClient(r.Ctl.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	agents, mgmt := skiffv1.NewAgentServiceClient(conn), skiffv1.NewManagementServiceClient(conn)
	standIn := func(name, underlay, network string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := agents.Register(ctx, &skiffv1.RegisterRequest{Node: &skiffv1.Node{Name: name, UnderlayIp: underlay, Mode: "software", AgentVersion: "stand-in"}}); err != nil {
			t.Fatalf("register %s: %v", name, err)
		}
		if _, err := mgmt.CreateEndpoint(ctx, &skiffv1.CreateEndpointRequest{Endpoint: &skiffv1.Endpoint{Name: "e-" + name, Network: network, Node: name}}); err != nil {
			t.Fatalf("endpoint on %s: %v", name, err)
		}
	}
	start := time.Now()
	for i := range nStandIns {
		standIn(fmt.Sprintf("s%04d", i), netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}).String(), "fleet")
	}
	t.Logf("FIGURE fleet: %d stand-in nodes and their endpoints registered in %v", nStandIns, time.Since(start).Round(time.Millisecond))

	start = time.Now()
	resp := r.CreatePods(t, n1, n1Pods[:nLocals], "fleet", 16)
	t.Logf("FIGURE fleet: %d pods on n1 created in %v", nLocals, time.Since(start).Round(time.Millisecond))
	for p, c := range r.CreatePods(t, n2, []string{"r2"}, "fleet", 1) {
		resp[p] = c
	}
	for p, c := range r.CreatePods(t, n3, []string{"r3"}, "fleet", 1) {
		resp[p] = c
	}
	// Every node forwards for r2 and r3 once its agent applied them (on
	// n1, with the 250 pods, that follows its last pods' whole Apply).
	start = time.Now()
	for _, n := range r.Nodes {
		r.WaitApplied(t, n.Name, resp["r3"].Revision, 10*time.Minute)
	}
	t.Logf("FIGURE fleet: r2 and r3 applied on every node %v after their creation", time.Since(start).Round(time.Millisecond))
	addr := func(pod string, v6 bool) string {
		for _, a := range resp[pod].IPs {
			if pr := netip.MustParsePrefix(a); pr.Addr().Is6() == v6 {
				return pr.Addr().String()
			}
		}
		t.Fatalf("%s has no address of that family: %v", pod, resp[pod].IPs)
		return ""
	}
	nodesOf := func() []string { return []string{r.Prefix + n1.Name, r.Prefix + n2.Name, r.Prefix + n3.Name} }

	// Unicast across the real nodes; neighbour discovery resolves first.
	first, last := n1Pods[0], n1Pods[nLocals-1]
	for _, v6 := range []bool{false, true} {
		for _, c := range [][2]string{{first, "r2"}, {first, "r3"}, {"r2", last}, {"r3", "r2"}, {last, first}} {
			if err := guest.Tools.Ping(r.Prefix+"p"+c[0], addr(c[1], v6), 2, 5*time.Second); err != nil {
				t.Fatalf("%s -> %s (%s): %v\n%s", c[0], c[1], addr(c[1], v6), err, diagnoseIn(t, nodesOf()...))
			}
		}
		got := guest.In(t, r.Prefix+"p"+first, ipBin, family(v6), "neigh", "show", addr("r2", v6), "dev", "eth0")
		if !strings.Contains(got, resp["r2"].MAC) {
			t.Errorf("%s resolved r2's %s as %q, want %s", first, addr("r2", v6), got, resp["r2"].MAC)
		}
	}
	// The first pod's representor holds an encap rule for the two
	// remote endpoints it sent to, none for the stand-ins' endpoints:
	// learnt from its first frames, which the node's bridge forwarded.
	want := []string{resp["r2"].MAC, resp["r3"].MAC}
	slices.Sort(want)
	rep := repOf(t, r.Prefix+n1.Name, resp[first].HostIf)
	testkit.Eventually(t, first+"'s representor with encap rules for r2 and r3 alone", 30*time.Second, func() (bool, string) {
		got := encapDsts(t, r.Prefix+n1.Name, rep)
		return slices.Equal(got, want), fmt.Sprintf("encap rules on %s to %v, want %v", rep, got, want)
	})
	reportFilters(t, r.Prefix+n1.Name, rep)
	// The agents' memory where they run: n1's with the pods, beside
	// n3's, whose plan lists the same remote endpoints and one pod.
	for _, n := range []string{n1.Name, n3.Name} {
		rss, peak, err := testkit.Memory(r.Agents[n].Cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("FIGURE fleet: %s's skiff-agent RSS %d MiB (peak %d MiB)", n, rss>>10, peak>>10)
	}

	// A tap port on n1 (a VM's) and its guest.
	var port struct {
		Mac  string
		Port struct{ HostIf string }
	}
	mustJSON(t, r.Ctl.Must("port", "create", "--vm", "vm1", "--network", "fleet", "--node", "n1", "-o", "json"), &port)
	guest.TapGuest(t, r.Prefix+n1.Name, port.Port.HostIf, "skflvm1", port.Mac)

	// Every endpoint but the sender listens on its eth0.
	receivers := map[string]string{"vm1": "skflvm1"}
	for _, p := range append(n1Pods[:nLocals], "r2", "r3") {
		receivers[p] = r.Prefix + "p" + p
	}
	floods := []struct {
		name, from string
		dst        string
		ethertype  uint16
		payload    []byte
	}{
		{"ARP probe", first, "ff:ff:ff:ff:ff:ff", 0x0806, arpProbe(resp[first].MAC, netip.MustParseAddr("198.18.15.250"))},
		{"DHCP discover", "vm1", "ff:ff:ff:ff:ff:ff", 0x0800, dhcpDiscover(port.Mac, 0x5ca1ab1e)},
		{"IPv6 multicast to ff02::1", first, "33:33:00:00:00:01", 0x86dd, allNodesUDP(netip.MustParseAddr(addr(first, true)), []byte("skiff fleet multicast"))},
	}
	for _, f := range floods {
		listeners := map[string]*testkit.Frames{}
		for p, ns := range receivers {
			if p != f.from {
				listeners[p] = testkit.ListenFrames(t, ns, "eth0", f.ethertype)
			}
		}
		testkit.SendFrame(t, receivers[f.from], "eth0", mustMAC(t, f.dst), f.ethertype, f.payload)
		time.Sleep(3 * time.Second)
		var wrong []string
		for p, l := range listeners {
			if n := l.Count(f.payload, 10*time.Millisecond); n != 1 {
				wrong = append(wrong, fmt.Sprintf("%s %d", p, n))
			}
		}
		if len(wrong) > 0 {
			t.Errorf("%s from %s: %d of %d endpoints did not receive it exactly once: %v", f.name, f.from, len(wrong), len(listeners), wrong)
		} else {
			t.Logf("%s from %s: every one of %d endpoints (%d on n1, r2 on n2, r3 on n3) received it once", f.name, f.from, len(listeners), len(listeners)-2)
		}
	}

	// A network the offload datapath cannot express on n1 and n2: a
	// stand-in node of it has an IPv6 VTEP, which their IPv4 tunnel
	// cannot reach.
	r.Ctl.Must("network", "create", "odd", "--vni", "401")
	r.Ctl.Must("subnet", "create", "odd-v4", "--network", "odd", "--cidr", "203.0.113.0/24")
	for p, c := range r.CreatePods(t, n1, []string{"o1"}, "odd", 1) {
		resp[p] = c
	}
	for p, c := range r.CreatePods(t, n2, []string{"o2"}, "odd", 1) {
		resp[p] = c
	}
	standIn("sv6", "2001:db8:ffff::1", "odd")
	// The rule states reach the controller with the agents' counters
	// (every 10 s), after the Apply that refuses the network: at the
	// whole size, n1's whole Apply (250 pods) and its read of 125,000
	// rules' counters take minutes in the VM.
	reported := time.Minute
	if !testing.Short() {
		reported = 5 * time.Minute
	}
	for _, pod := range []string{"o1", "o2"} {
		testkit.Eventually(t, pod+"'s network refused on its node, with the reason", reported, func() (bool, string) {
			e := endpoints(t, r.Ctl.Addr)[pod]
			for _, rl := range e.OffloadRules {
				if rl.State == "software" && strings.Contains(rl.Reason, "network odd is not offloaded on this node") && strings.Contains(rl.Reason, "vtep") {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%+v", e.OffloadRules)
		})
	}
	for _, c := range [][2]string{{first, "r2"}, {"r3", last}, {"r2", first}, {"o1", "o2"}, {"o2", "o1"}} {
		if err := guest.Tools.Ping(r.Prefix+"p"+c[0], addr(c[1], false), 2, 5*time.Second); err != nil {
			diag := diagnoseIn(t, nodesOf()...)
			if strings.HasPrefix(c[0], "o") {
				diag = softPath(r.Prefix+n1.Name, resp["o1"].HostIf, resp["o2"].MAC) + softPath(r.Prefix+n2.Name, resp["o2"].HostIf, resp["o1"].MAC)
			}
			t.Fatalf("with odd refused, %s -> %s: %v\n%s", c[0], c[1], err, diag)
		}
	}
}

// softPath shows what forwards pod's frames in software on its node
// (namespace ns): the stand-in's ingress and its representor's egress
// filters with their counters, both links' counters, and the bridge's
// entries for the peer's MAC.
func softPath(ns, hostIf, peerMAC string) string {
	out, _ := exec.Command(ipBin, "netns", "exec", ns, "/bin/sh", "-c", fmt.Sprintf(
		"%[1]s -s filter show dev %[3]s ingress; rep=$(%[1]s filter show dev %[3]s ingress | sed -n 's/.*Redirect to device \\([^ )]*\\).*/\\1/p' | head -1); echo rep $rep; "+
			"%[1]s -s filter show dev $rep egress; %[1]s -s filter show dev $rep ingress | head -40; %[2]s -s link show dev %[3]s; %[2]s -s link show dev $rep; "+
			"%[4]s fdb show | grep -i %[5]s; %[4]s vlan show; %[2]s neigh show | grep -i %[5]s",
		tcBin, ipBin, hostIf, guest.Bridge, peerMAC)).CombinedOutput()
	return fmt.Sprintf("==== %s %s\n%s", ns, hostIf, out)
}
