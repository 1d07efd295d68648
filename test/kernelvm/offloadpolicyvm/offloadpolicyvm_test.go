// Package offloadpolicyvm holds offload nodes to the NetworkPolicy truth
// table (package policytruth) inside the kernel VM: the real controller
// and three agents in mode offload, nodes as network namespaces on an
// underlay bridge, each with a netdevsim eswitch in switchdev mode, and
// the six pods of the layout as veths standing in for VFs (made through
// each agent's local API), so that their policy is tc-flower and act_ct
// rules on the VF representors. Every case's measured matrix must equal
// the reference; the offload nodes must have no nftables policy table,
// and an isolated endpoint's policy counters must move.
//
// TestPolicyTruthSoftware (control_test.go, build tag kernelvm_long: make
// test-kernel-long) is the control: the same on three software nodes;
// where it passes and the offload test fails, the harness is not the one
// to blame.
package offloadpolicyvm

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/internal/nl"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/policytruth"
	"github.com/skiff-sdn/skiff/test/testkit"
)

const (
	ctlAddr     = "192.0.2.254:7400"
	policyTable = "skiff-policy" // the software datapath's nftables table (family inet)
	// denyCase isolates web1 (n1) and db1 (n2) for ingress: whatever
	// reaches them is the default deny's.
	denyCase = "deny all ingress in a namespace"
)

// The probes in the VM: fewer than the e2e tier's (the VM emulates its
// CPUs), still one of each protocol, a port inside and one outside the
// cases' ranges; every case changes the matrix on them. The VM's kernel
// has SCTP (the development kernel has not): the SCTP probes too.
var probes = slices.Concat([]policytruth.Probe{{Proto: "TCP", Port: 80}, {Proto: "TCP", Port: 443}, {Proto: "TCP", Port: 8080}, {Proto: "UDP", Port: 53}, {Proto: "UDP", Port: 5353}, {Proto: "ICMP"}},
	policytruth.SCTPProbes)

type node struct {
	name, ns, ip, sock, pf string
	nsPath                 string
	vfs                    int               // VFs handed to pods so far
	hostIfs                map[string]string // pod -> its host side (the veth standing in for its VF)
}

type cluster struct {
	mode     string
	v6       bool // the IPv6 pass: a dual-stack network, pods probed on their IPv6 addresses
	nodes    map[string]*node
	skiffctl string        // a copy on the guest's tmpfs
	ctlTime  time.Duration // spent in skiffctl
	ctlCalls int
}

func (c *cluster) ctl(t *testing.T, args ...string) string {
	t.Helper()
	start := time.Now()
	defer func() { c.ctlTime += time.Since(start); c.ctlCalls++ }()
	return guest.Run(t, append([]string{c.skiffctl, "--controller", ctlAddr}, args...)...)
}

// newCluster starts the controller on an underlay bridge and one agent in
// mode mode per node; in mode offload each node has a netdevsim eswitch in
// switchdev mode with two VFs. With v6 the network is dual-stack.
func newCluster(t *testing.T, mode string, v6 bool) *cluster {
	dir := t.TempDir()
	guest.UnderlayBridge(t, "skpbr", "192.0.2.254/24")
	guest.StartIn(t, "", "skiff-controller", "--listen", ctlAddr, "--data-dir", filepath.Join(dir, "etcd"))
	nodesUp := func(n int) func() (bool, string) {
		return func() (bool, string) {
			out, err := exec.Command(guest.Bin(t, "skiffctl"), "--controller", ctlAddr, "get", "nodes", "-o", "json").CombinedOutput()
			return err == nil && strings.Count(string(out), `"underlayIp"`) == n, string(out)
		}
	}
	testkit.Eventually(t, "controller up", 90*time.Second, nodesUp(0))
	// skiffctl runs some hundred times: from the 9p share (no cache) each
	// start reads the whole binary again.
	c := &cluster{mode: mode, v6: v6, nodes: map[string]*node{}, skiffctl: filepath.Join(dir, "skiffctl")}
	guest.Run(t, "/bin/cp", guest.Bin(t, "skiffctl"), c.skiffctl)
	for i, name := range policytruth.Nodes {
		n := &node{name: name, ns: "skp" + name, ip: fmt.Sprintf("192.0.2.%d", i+1)}
		c.nodes[name] = n
		guest.AddNetns(t, n.ns)
		n.nsPath = guest.HoldNetns(t, n.ns)
		guest.Run(t, guest.IP, "link", "add", "skpu"+name, "type", "veth", "peer", "name", "eth0", "netns", n.ns)
		guest.Run(t, guest.IP, "link", "set", "skpu"+name, "master", "skpbr", "up")
		guest.In(t, n.ns, guest.IP, "addr", "add", n.ip+"/24", "dev", "eth0")
		guest.In(t, n.ns, guest.IP, "link", "set", "eth0", "up")
		if mode == "offload" {
			n.pf = guest.SwitchdevEswitch(t, n.ns, 81+i, 2)
		}
		n.sock = filepath.Join(dir, name+".sock")
		guest.StartIn(t, n.ns, "skiff-agent", "--controller", ctlAddr, "--node", name, "--underlay-ip", n.ip,
			"--state-dir", filepath.Join(dir, name+".state"), "--socket", n.sock, "--mode", mode,
			"--stats-interval", "1s", "--metrics-addr", n.ip+":9100")
	}
	testkit.Eventually(t, "three nodes registered", 60*time.Second, nodesUp(3))
	nodes := c.ctl(t, "get", "nodes", "-o", "json")
	if got := strings.Count(strings.ReplaceAll(nodes, " ", ""), `"mode":"`+mode+`"`); got != 3 {
		t.Fatalf("want 3 nodes registered in mode %s, got %d:\n%s", mode, got, nodes)
	}
	c.ctl(t, "network", "create", "blue", "--vni", "100")
	c.ctl(t, "subnet", "create", "blue-v4", "--network", "blue", "--cidr", policytruth.Subnet)
	if v6 {
		c.ctl(t, "subnet", "create", "blue-v6", "--network", "blue", "--cidr", policytruth.Subnet6)
	}
	return c
}

// env is how the truth table acts on this cluster: pods through the local
// API of their node's agent (on offload nodes standing in for the node's
// next VF), policies with skiffctl.
func (c *cluster) env() policytruth.Env {
	return policytruth.Env{
		LabelNamespace: func(t *testing.T, ns, k, v string) { c.ctl(t, "namespace", "label", ns, k+"="+v) },
		CreatePod: func(t *testing.T, p *policytruth.Pod) {
			n := c.nodes[p.Node]
			ns := "skpp" + p.Name
			guest.AddNetns(t, ns)
			path := guest.HoldNetns(t, ns)
			req := localapi.CreateRequest{Name: p.Name, Network: "blue", NetNS: path, IfName: "eth0",
				Labels: p.Labels, Owner: "pod:" + p.Namespace + "/" + p.Name, Namespace: p.Namespace}
			if n.pf != "" {
				vf := n.vfs
				n.vfs++
				req.PF, req.VF = n.pf, &vf
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			resp, err := localapi.NewClient(n.sock).Create(ctx, req)
			if err != nil {
				t.Fatalf("create %s on %s: %v", p.Name, n.name, err)
			}
			p.NetNS = path
			for _, a := range resp.IPs {
				if ip := strings.Split(a, "/")[0]; p.IP == "" || c.v6 && strings.Contains(ip, ":") {
					p.IP = ip
				}
			}
			if c.v6 && !strings.Contains(p.IP, ":") {
				t.Fatalf("pod %s: no IPv6 address in %v", p.Name, resp.IPs)
			}
			if n.hostIfs == nil {
				n.hostIfs = map[string]string{}
			}
			n.hostIfs[p.Name] = resp.HostIf
			t.Logf("pod %s/%s on %s: %s (probed on %s), host side %s", p.Namespace, p.Name, n.name, strings.Join(resp.IPs, " "), p.IP, resp.HostIf)
		},
		Apply: func(t *testing.T, doc string) {
			file := filepath.Join(t.TempDir(), "p.yaml")
			if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
			c.ctl(t, "policy", "apply", "-f", file)
		},
		Delete: func(t *testing.T, name string) { c.ctl(t, "delete", "policy", name) },
	}
}

// policyTables lists the inet nftables tables of a node's namespace.
func policyTables(t *testing.T, n *node) []string {
	t.Helper()
	k, err := nl.Open(n.nsPath)
	if err != nil {
		t.Fatalf("%s: %v", n.name, err)
	}
	defer k.Close()
	names, err := k.Tables(nl.NftInet)
	if err != nil {
		t.Fatalf("%s: %v", n.name, err)
	}
	return names
}

// endpoints decodes skiffctl get endpoints -o json (an array of the API's
// objects in protojson).
func (c *cluster) endpoints(t *testing.T) map[string]*skiffv1.Endpoint {
	t.Helper()
	out := c.ctl(t, "get", "endpoints", "-o", "json")
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("skiffctl get endpoints: %v\n%s", err, out)
	}
	m := map[string]*skiffv1.Endpoint{}
	for _, r := range raw {
		e := &skiffv1.Endpoint{}
		if err := protojson.Unmarshal(r, e); err != nil {
			t.Fatalf("skiffctl get endpoints: %v\n%s", err, r)
		}
		m[e.Name] = e
	}
	return m
}

// afterCase checks, once the deny case's matrix matched, where the
// enforcement comes from: on offload nodes no nftables policy table (on
// software nodes, the control, there is one), and the isolated web1's
// policy counters at the controller have moved.
func (c *cluster) afterCase(t *testing.T, cs policytruth.Case, _ []networkingv1.NetworkPolicy, _ []*policytruth.Pod) {
	if cs.Name != denyCase {
		return
	}
	for _, name := range policytruth.Nodes {
		n := c.nodes[name]
		has := slices.Contains(policyTables(t, n), policyTable)
		if c.mode == "offload" && has {
			t.Errorf("offload node %s has the nftables table inet %s: policy is not (only) in tc", n.name, policyTable)
		}
		if c.mode == "software" && !has && (name == "n1" || name == "n2") {
			t.Errorf("software node %s has no nftables table inet %s: the check cannot see it", n.name, policyTable)
		}
	}
	var last *skiffv1.Endpoint
	testkit.Eventually(t, "web1's policy counters at the controller", 20*time.Second, func() (bool, string) {
		last = c.endpoints(t)["web1"]
		var sum uint64
		for _, x := range last.GetPolicyCounters() {
			sum += x.Packets
		}
		return sum > 0, fmt.Sprintf("web1 on %s: %v", last.GetNode(), last.GetPolicyCounters())
	})
	t.Logf("web1 on %s, isolated by %q: policy counters %v", last.Node, cs.Name, last.PolicyCounters)
}

// diagnose shows, for the first mismatches, the policy counters and the
// filters (policy chains 0-2, forwarding chain 3) of every VF
// representor's ingress, and those of every pod's host side (the veth
// standing in for its VF: its one rule moves its traffic into the
// representor), with their statistics and the links' state, so that a
// pod found unreachable says why.
func (c *cluster) diagnose() func(t *testing.T, what string) string {
	shown := 0
	return func(t *testing.T, what string) string {
		if shown++; shown > 2 {
			return "(diagnostics shown for the first two mismatches)"
		}
		var b strings.Builder
		show := func(n *node, args ...string) {
			out, _ := exec.Command(guest.IP, append([]string{"netns", "exec", n.ns}, args...)...).CombinedOutput()
			fmt.Fprintf(&b, "==== %s: %s\n%s\n", n.name, strings.Join(args, " "), out)
		}
		for _, name := range policytruth.Nodes {
			n := c.nodes[name]
			reps := guest.Representors(t, n.ns)
			for _, port := range slices.Sorted(maps.Keys(reps)) {
				show(n, guest.TC, "-s", "filter", "show", "dev", reps[port], "ingress")
			}
			for _, pod := range slices.Sorted(maps.Keys(n.hostIfs)) {
				fmt.Fprintf(&b, "---- %s: pod %s's host side %s\n", n.name, pod, n.hostIfs[pod])
				show(n, guest.TC, "-s", "filter", "show", "dev", n.hostIfs[pod], "ingress")
				show(n, guest.IP, "-s", "-d", "link", "show", "dev", n.hostIfs[pod])
			}
		}
		eps := c.endpoints(t)
		for _, name := range slices.Sorted(maps.Keys(eps)) {
			fmt.Fprintf(&b, "policy counters of %s on %s: %v\n", name, eps[name].Node, eps[name].PolicyCounters)
		}
		return b.String()
	}
}

func truthTable(t *testing.T, mode string, v6 bool) {
	guest.Require(t)
	start := time.Now()
	c := newCluster(t, mode, v6)
	t.Logf("cluster of 3 %s nodes up in %v", mode, time.Since(start).Round(time.Millisecond))
	ps := probes
	if v6 {
		// The probes' SCTP sockets are IPv4 ones (policytruth.ListenSCTP).
		ps = slices.DeleteFunc(slices.Clone(probes), func(p policytruth.Probe) bool { return p.Proto == "SCTP" })
	}
	policytruth.Run(t, c.env(), policytruth.Options{
		Probes:        ps,
		Timeout:       2 * time.Second, // time for a TCP SYN retransmission (1 s) under emulation
		Settle:        30 * time.Second,
		SettleFailing: 5 * time.Second,
		Diagnose:      c.diagnose(),
		AfterCase:     c.afterCase,
	})
	t.Logf("truth table on %s nodes: %v, of which %d skiffctl calls %v", mode, time.Since(start).Round(time.Second), c.ctlCalls, c.ctlTime.Round(time.Second))
}

// TestPolicyTruthOffload: the truth table on three offload nodes.
func TestPolicyTruthOffload(t *testing.T) { truthTable(t, "offload", false) }

// TestPolicyTruthOffloadIPv6: the truth table's IPv6 pass on three
// offload nodes: a dual-stack network, the pods probed on their IPv6
// addresses (TCP, UDP, ICMPv6), the cases' ipBlocks IPv6 CIDRs. It needs
// neighbour discovery through the policy pipeline of isolated endpoints.
func TestPolicyTruthOffloadIPv6(t *testing.T) { truthTable(t, "offload", true) }
