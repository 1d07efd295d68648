// Package offloadvm runs the real controller and agents in the kernel VM
// with the offload datapath: nodes are network namespaces on an underlay
// bridge, the offload nodes have a netdevsim eswitch in switchdev mode,
// pods are veths (standing in for VFs) made through the agent's local API,
// and a third node runs the software datapath on the same network.
package offloadvm

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

const (
	ipBin = guest.IP
	tcBin = guest.TC
)

func run(t testing.TB, args ...string) string { t.Helper(); return guest.Run(t, args...) }

func in(t testing.TB, ns string, args ...string) string { t.Helper(); return guest.In(t, ns, args...) }

// node is a worker namespace on the underlay.
type node struct {
	name, ns, ip, sock, state string
	pf                        string // the netdevsim uplink, offload nodes
	agent                     *guest.Daemon
	args                      []string
}

// rule is an offload rule as skiffctl shows it.
type rule struct {
	Device, Kind, Rule, State, Reason string
	Handle                            uint32
	Packets                           string // uint64 in protojson is a string
}

type endpoint struct {
	Name, Node   string
	Mac          string
	Ips          []string
	OffloadRules []rule
}

func endpoints(t *testing.T, ctl string) map[string]endpoint {
	t.Helper()
	out := run(t, guest.Bin(t, "skiffctl"), "--controller", ctl, "get", "endpoints", "-o", "json")
	var eps []endpoint
	if err := json.Unmarshal([]byte(out), &eps); err != nil {
		// A single object or a wrapper: try the list form.
		var w struct{ Endpoints []endpoint }
		if err2 := json.Unmarshal([]byte(out), &w); err2 != nil {
			t.Fatalf("skiffctl get endpoints: %v\n%s", err, out)
		}
		eps = w.Endpoints
	}
	m := map[string]endpoint{}
	for _, e := range eps {
		m[e.Name] = e
	}
	return m
}

func pkts(r rule) uint64 {
	var n uint64
	fmt.Sscan(r.Packets, &n)
	return n
}

// filterHandles lists, by iproute2, every flower filter of a node as
// device/pref/handle/proto.
func filterHandles(t *testing.T, ns string) []string {
	t.Helper()
	var out []string
	for _, dev := range strings.Fields(in(t, ns, "/bin/sh", "-c", "ls /sys/class/net")) {
		var fs []struct {
			Pref     int    `json:"pref"`
			Protocol string `json:"protocol"`
			Options  struct {
				Handle uint32 `json:"handle"`
			} `json:"options"`
		}
		raw := in(t, ns, tcBin, "-j", "filter", "show", "dev", dev, "ingress")
		if strings.TrimSpace(raw) == "" {
			continue
		}
		if err := json.Unmarshal([]byte(raw), &fs); err != nil {
			continue // no qdisc
		}
		for _, f := range fs {
			if f.Options.Handle != 0 {
				out = append(out, fmt.Sprintf("%s/%d/%s/%#x", dev, f.Pref, f.Protocol, f.Options.Handle))
			}
		}
	}
	slices.Sort(out)
	return out
}

func metric(t *testing.T, url, prefix string) []string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

// diagnose renders the nodes' flower rules with counters, links and
// neighbours, for a failure message.
func diagnose(t *testing.T) string { return diagnoseIn(t, "skoen1", "skoen2", "skoep1", "skoep2") }

// diagnoseIn renders the flower rules, links and neighbours of the
// namespaces nss.
func diagnoseIn(t *testing.T, nss ...string) string {
	var b strings.Builder
	for _, ns := range nss {
		// iproute2 by path: the shell's PATH finds busybox's ip first.
		out, _ := exec.Command(ipBin, "netns", "exec", ns, "/bin/sh", "-c", fmt.Sprintf(
			"%[1]s -br link; %[1]s neigh; for d in $(ls /sys/class/net); do %[2]s -s filter show dev $d ingress 2>/dev/null | grep -E 'filter|dst_mac|arp_tip|redirect|Sent' ; done", ipBin, tcBin)).CombinedOutput()
		fmt.Fprintf(&b, "==== %s\n%s\n", ns, out)
	}
	return b.String()
}

// TestOffloadNodes is the "must show": two offload nodes and one
// software node, pods pinging and a TCP transfer across, the flower rule
// counters moving, the hardware refusals reported per rule, underlay
// neighbours resolved ahead of traffic, and an agent SIGKILL + restart
// that leaves every filter handle in place.
func TestOffloadNodes(t *testing.T) {
	guest.Require(t)
	dir := t.TempDir()
	ctx := context.Background()

	// Underlay: a bridge in the guest's root namespace; the controller
	// listens on it.
	guest.UnderlayBridge(t, "skoebr", "192.0.2.254/24")
	ctl := "192.0.2.254:7400"
	guest.StartIn(t, "", "skiff-controller", "--listen", ctl, "--data-dir", filepath.Join(dir, "etcd"))
	testkit.Eventually(t, "controller up", 90*time.Second, func() (bool, string) {
		out, err := exec.Command(guest.Bin(t, "skiffctl"), "--controller", ctl, "get", "nodes", "-o", "json").CombinedOutput()
		return err == nil, string(out)
	})

	nodes := []*node{
		{name: "n1", ns: "skoen1", ip: "192.0.2.1"},
		{name: "n2", ns: "skoen2", ip: "192.0.2.2"},
		{name: "n3", ns: "skoen3", ip: "192.0.2.3"},
	}
	for i, n := range nodes {
		// Pod namespaces exist before the agents start: a namespace
		// file bound later does not show in the agents' mount
		// namespaces (ip netns exec makes one).
		guest.AddNetns(t, fmt.Sprintf("skoep%d", i+1))
		guest.AddNetns(t, n.ns)
		run(t, ipBin, "link", "add", "u"+n.name, "type", "veth", "peer", "name", "eth0", "netns", n.ns)
		run(t, ipBin, "link", "set", "u"+n.name, "master", "skoebr", "up")
		in(t, n.ns, ipBin, "addr", "add", n.ip+"/24", "dev", "eth0")
		in(t, n.ns, ipBin, "link", "set", "eth0", "up")
		n.sock, n.state = filepath.Join(dir, n.name+".sock"), filepath.Join(dir, n.name+".state")
		mode := "offload"
		if i == 2 {
			mode = "software"
		} else {
			// A netdevsim eswitch made from inside the node's namespace
			// lives there (its devlink instance too).
			n.pf = guest.SwitchdevEswitch(t, n.ns, 61+i, 2)
		}
		n.args = []string{"--controller", ctl, "--node", n.name, "--underlay-ip", n.ip, "--state-dir", n.state,
			"--socket", n.sock, "--mode", mode, "--stats-interval", "1s", "--metrics-addr", n.ip + ":9100"}
		n.agent = guest.StartIn(t, n.ns, "skiff-agent", n.args...)
	}
	skiffctl := func(args ...string) string {
		return run(t, append([]string{guest.Bin(t, "skiffctl"), "--controller", ctl}, args...)...)
	}
	testkit.Eventually(t, "three nodes registered", 60*time.Second, func() (bool, string) {
		out, err := exec.Command(guest.Bin(t, "skiffctl"), "--controller", ctl, "get", "nodes", "-o", "json").CombinedOutput()
		return err == nil && strings.Count(string(out), `"underlayIp"`) == 3, string(out)
	})
	nodesJSON := skiffctl("get", "nodes", "-o", "json")
	if strings.Count(nodesJSON, `"mode": "offload"`)+strings.Count(nodesJSON, `"mode":"offload"`) != 2 {
		t.Fatalf("want 2 nodes registered in mode offload:\n%s", nodesJSON)
	}
	skiffctl("network", "create", "blue", "--vni", "100")
	skiffctl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")

	// Pods through each node's local API.
	ips, gateways := map[string]string{}, map[string]string{}
	for i, n := range nodes {
		pod := fmt.Sprintf("skoep%d", i+1)
		// The pod's namespace by a process that holds it (guest.HoldNetns).
		nsPath := guest.HoldNetns(t, pod)
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		req := localapi.CreateRequest{Name: pod, Network: "blue", NetNS: nsPath, IfName: "eth0"}
		if n.pf != "" {
			// On the offload nodes the pod's veth stands in for VF 0:
			// its rules go on netdevsim's pf0vf0 representor.
			vf := 0
			req.PF, req.VF = n.pf, &vf
		}
		resp, err := localapi.NewClient(n.sock).Create(cctx, req)
		cancel()
		if err != nil {
			t.Fatalf("create %s on %s: %v", pod, n.name, err)
		}
		ips[pod] = strings.Split(resp.IPs[0], "/")[0]
		gateways[pod] = resp.Gateways[0]
		t.Logf("%s on %s: %s %s host side %s", pod, n.name, resp.MAC, resp.IPs, resp.HostIf)
	}
	// A VF endpoint on n1 whose representor is netdevsim's pf0vf0: the
	// NIC is asked for every rule and refuses.
	skiffctl("endpoint", "create", "skoevf", "--network", "blue", "--node", "n1", "--kind", "vf", "--pf", nodes[0].pf, "--vf-index", "1")

	// Underlay neighbours of the remote VTEPs are resolved before any
	// pod traffic (the nodes exchange nothing else over the underlay).
	testkit.Eventually(t, "n1 resolves the VTEPs of n2 and n3 ahead of traffic", 20*time.Second, func() (bool, string) {
		out := in(t, "skoen1", ipBin, "neigh", "show", "dev", "eth0")
		ok := true
		for _, v := range []string{"192.0.2.2", "192.0.2.3"} {
			found := false
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, v+" ") && (strings.Contains(l, "REACHABLE") || strings.Contains(l, "STALE") || strings.Contains(l, "DELAY")) {
					found = true
				}
			}
			ok = ok && found
		}
		return ok, out
	})

	// Pings in every direction, offload <-> offload and software <-> offload.
	ping := func(from, to string) {
		t.Helper()
		if err := guest.Tools.Ping(from, ips[to], 3, 3*time.Second); err != nil {
			t.Fatalf("%s: %v\n%s", to, err, diagnose(t))
		}
	}
	ping("skoep1", "skoep2")
	ping("skoep2", "skoep1")
	ping("skoep3", "skoep1")
	ping("skoep3", "skoep2")
	ping("skoep1", "skoep3")

	// Each pod's gateway answers on its own node, offload or software.
	for _, pod := range []string{"skoep1", "skoep2", "skoep3"} {
		if gateways[pod] == "" {
			t.Fatalf("%s has no gateway", pod)
		}
		if err := guest.Tools.Ping(pod, gateways[pod], 2, 3*time.Second); err != nil {
			t.Fatalf("%s's gateway: %v\n%s", pod, err, diagnose(t))
		}
	}

	// TCP across the two offload nodes.
	const size = 4 << 20
	if got := guest.TCPTransfer(t, "skoep1", "skoep2", ips["skoep2"], size); got != size {
		t.Fatalf("TCP transfer p1 -> p2: %d of %d bytes arrived", got, size)
	}

	// The rules' state and counters reach the controller.
	var eps map[string]endpoint
	testkit.Eventually(t, "rule counters at the controller", 20*time.Second, func() (bool, string) {
		eps = endpoints(t, ctl)
		var encap, decap uint64
		for _, r := range eps["skoep1"].OffloadRules {
			switch {
			case r.Kind == "encap" && strings.Contains(r.Rule, "dst_ip 192.0.2.2 "):
				encap = max(encap, pkts(r))
			case r.Kind == "decap":
				decap = max(decap, pkts(r))
			}
		}
		return encap > 1000 && decap > 10, fmt.Sprintf("encap to n2 %d packets, decap %d packets: %+v", encap, decap, eps["skoep1"].OffloadRules)
	})
	// skoep1's rules sit on netdevsim's representor, which refuses
	// hardware for each and says why; the software fallback of those
	// same rules carried the transfer (the encap counter above). The
	// veth's one rule moves its traffic into the representor.
	standin := 0
	for _, r := range eps["skoep1"].OffloadRules {
		t.Logf("skoep1 rule %s %s: %s packets, state %s (%s)", r.Device, r.Kind, r.Packets, r.State, r.Reason)
		switch {
		case r.Device == "skvx" && r.State != "refused":
			t.Errorf("decap rule %s: state %q, want refused (no NIC offloads this tunnel device here)", r.Rule, r.State)
		case strings.HasPrefix(r.Device, "skh"): // the gateway's port, a veth
			if r.State != "software" || !strings.Contains(r.Reason, "not a switchdev port") {
				t.Errorf("gateway rule %s: state %q reason %q", r.Rule, r.State, r.Reason)
			}
		case r.Kind == "standin":
			standin++
			if r.State != "software" || !strings.Contains(r.Reason, "not a switchdev port") || pkts(r) < 1000 {
				t.Errorf("stand-in rule %s: state %q reason %q packets %s", r.Rule, r.State, r.Reason, r.Packets)
			}
		case r.Device != "skvx" && (r.State != "refused" || !strings.Contains(r.Reason, "netdevsim: only offload of BPF classifiers supported")):
			t.Errorf("rule on the representor %s: state %q reason %q", r.Rule, r.State, r.Reason)
		}
	}
	if standin != 1 {
		t.Errorf("skoep1 has %d stand-in rules, want 1", standin)
	}
	vfRules := 0
	for _, r := range eps["skoevf"].OffloadRules {
		if r.Device == "skvx" || strings.HasPrefix(r.Device, "skh") {
			continue
		}
		vfRules++
		if r.State != "refused" || !strings.Contains(r.Reason, "netdevsim: only offload of BPF classifiers supported") {
			t.Errorf("VF rule on %s: state %q reason %q", r.Device, r.State, r.Reason)
		}
	}
	if vfRules == 0 {
		t.Errorf("the VF endpoint has no rules on its representor: %+v", eps["skoevf"])
	}
	t.Logf("skoevf: %d rules on netdevsim, e.g. %+v", vfRules, eps["skoevf"].OffloadRules[0])
	m := metric(t, "http://192.0.2.1:9100/metrics", "skiff_agent_offload_")
	if !slices.ContainsFunc(m, func(l string) bool {
		return strings.HasPrefix(l, `skiff_agent_offload_rules{endpoint="skoevf",state="refused"}`)
	}) ||
		!slices.ContainsFunc(m, func(l string) bool {
			return strings.HasPrefix(l, `skiff_agent_offload_rule_packets_total{endpoint="skoep1",kind="encap"}`)
		}) {
		t.Errorf("metrics lack offload rules:\n%s", strings.Join(m, "\n"))
	}

	// Restart without churn: SIGKILL the agent of n1, start it again; no
	// filter is deleted and re-added (every handle stays), traffic flows.
	before := filterHandles(t, "skoen1")
	if len(before) < 15 {
		t.Fatalf("n1 has only %d filters: %v", len(before), before)
	}
	monitor := exec.Command(ipBin, "netns", "exec", "skoen1", tcBin, "monitor")
	mon := &guest.Buffer{}
	monitor.Stdout, monitor.Stderr = mon, mon
	if err := monitor.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = monitor.Process.Kill(); _ = monitor.Wait() }()
	n1 := nodes[0]
	n1.agent.Signal(syscall.SIGKILL)
	n1.agent = guest.StartIn(t, n1.ns, "skiff-agent", n1.args...)
	testkit.Eventually(t, "restarted agent applied its plan", 30*time.Second, func() (bool, string) {
		resp, err := http.Get("http://192.0.2.1:9100/metrics")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `skiff_agent_datapath_applies_total{result="ok"}`) &&
			strings.Contains(string(b), "skiff_agent_controller_connected 1"), "no successful apply yet"
	})
	time.Sleep(2 * time.Second) // let a reconcile after the stream's snapshot run too
	after := filterHandles(t, "skoen1")
	if !slices.Equal(before, after) {
		t.Errorf("filters changed across the restart:\nbefore %v\nafter  %v", before, after)
	}
	ping("skoep1", "skoep2")
	ping("skoep3", "skoep1")
	if got := guest.TCPTransfer(t, "skoep2", "skoep1", ips["skoep1"], size); got != size {
		t.Fatalf("TCP transfer p2 -> p1 after the restart: %d of %d bytes", got, size)
	}
	if w := metric(t, "http://192.0.2.1:9100/metrics", "skiff_agent_offload_writes"); len(w) != 1 || !strings.HasSuffix(w[0], " 0") {
		t.Errorf("restarted agent wrote to tc: %v", w)
	}
	if strings.Contains(mon.String(), "filter") {
		t.Errorf("tc monitor saw filter changes across the restart:\n%s", mon.String())
	}
}
