package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// cluster is an underlay namespace with a bridge, the controller inside it
// on 192.0.2.254, and nodes as namespaces with an address on the underlay.
type cluster struct {
	t       testing.TB
	ul      string
	ctrl    *exec.Cmd
	ctrlLog string
	data    string
	nodes   map[string]*node
}

type node struct {
	name, ns, ip, state, socket string
	agent                       *exec.Cmd
	log                         string
	args                        []string // the agent's flags beyond the cluster's own
}

const ctrlAddr = "192.0.2.254:7400"

func newCluster(t testing.TB, names ...string) *cluster {
	return newClusterArgs(t, nil, nil, names...)
}

// newClusterArgs is newCluster with more flags for some nodes' agents;
// the agents of the nodes in later are not started (startAgent does).
func newClusterArgs(t testing.TB, args map[string][]string, later []string, names ...string) *cluster {
	testkit.Require(t)
	c := &cluster{t: t, ul: testkit.New(t), data: t.TempDir(), nodes: map[string]*node{}}
	testkit.UnderlayBridge(t, c.ul, "ul0", "192.0.2.254/24")
	for i, n := range names {
		ns := testkit.New(t)
		ip := fmt.Sprintf("192.0.2.%d", i+1)
		peer := fmt.Sprintf("ulp%d", i)
		testkit.Run(t, c.ul, "ip", "link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", ns)
		testkit.Run(t, c.ul, "ip", "link", "set", peer, "master", "ul0")
		testkit.Run(t, c.ul, "ip", "link", "set", peer, "up")
		testkit.Run(t, ns, "ip", "addr", "add", ip+"/24", "dev", "eth0")
		testkit.Run(t, ns, "ip", "link", "set", "eth0", "up")
		dir := t.TempDir()
		c.nodes[n] = &node{name: n, ns: ns, ip: ip, state: dir, socket: filepath.Join(dir, "agent.sock"), args: args[n]}
	}
	c.startController()
	for _, n := range names {
		if !slices.Contains(later, n) {
			c.startAgent(n)
		}
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			stop(n.agent)
			if t.Failed() {
				b, _ := os.ReadFile(n.log)
				t.Logf("agent %s log:\n%s", n.name, tail(string(b), 30))
			}
		}
		stop(c.ctrl)
	})
	return c
}

func stop(cmd *exec.Cmd) {
	if cmd != nil && cmd.Process != nil && cmd.ProcessState == nil {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
}

func (c *cluster) startController() {
	c.ctrlLog = filepath.Join(c.t.TempDir(), "controller.log")
	logf, _ := os.Create(c.ctrlLog)
	c.ctrl = exec.Command("ip", "netns", "exec", c.ul, filepath.Join(binDir, "skiff-controller"), "--listen", ctrlAddr, "--data-dir", c.data)
	c.ctrl.Stdout, c.ctrl.Stderr = logf, logf
	if err := c.ctrl.Start(); err != nil {
		c.t.Fatal(err)
	}
	testkit.Eventually(c.t, "", 20*time.Second, testkit.NoError(func() error { _, err := c.ctl("get", "nodes"); return err }))
}

func (c *cluster) startAgent(name string) {
	n := c.nodes[name]
	n.log = filepath.Join(c.t.TempDir(), "agent.log")
	logf, _ := os.Create(n.log)
	n.agent = exec.Command("ip", "netns", "exec", n.ns, filepath.Join(binDir, "skiff-agent"), "--controller", ctrlAddr,
		"--node", name, "--underlay-ip", n.ip, "--state-dir", n.state, "--socket", n.socket, "--stats-interval", "1s",
		"--metrics-addr", n.ip+":9100", "--log-level", "debug")
	n.agent.Args = append(n.agent.Args, n.args...)
	n.agent.Stdout, n.agent.Stderr = logf, logf
	if err := n.agent.Start(); err != nil {
		c.t.Fatal(err)
	}
}

// ctl runs skiffctl inside the underlay namespace.
func (c *cluster) ctl(args ...string) (string, error) {
	return testkit.Try(c.ul, append([]string{filepath.Join(binDir, "skiffctl"), "--controller", ctrlAddr}, args...)...)
}

func (c *cluster) mustCtl(args ...string) string {
	c.t.Helper()
	out, err := c.ctl(args...)
	if err != nil {
		c.t.Fatalf("skiffctl %v: %v\n%s", args, err, out)
	}
	return out
}

// fdb returns a node's VXLAN forwarding entries of one VNI as "mac dst" lines.
func (c *cluster) fdb(name string, vni int) string {
	out, err := testkit.Try(c.nodes[name].ns, "bridge", "fdb", "show", "dev", fmt.Sprintf("skv%d", vni))
	if err != nil {
		return "absent"
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, " dst ") {
			f := strings.Fields(l)
			lines = append(lines, f[0]+" "+f[2])
		}
	}
	return strings.Join(lines, ",")
}

func (c *cluster) mac(ep string) string {
	out := c.mustCtl("get", "endpoint", ep, "-o", "json")
	i := strings.Index(out, `"mac": "`)
	return out[i+8 : i+25]
}

func TestAgentsFollowPlans(t *testing.T) {
	c := newCluster(t, "n1", "n2", "n3")
	c.mustCtl("network", "create", "blue", "--vni", "100")
	c.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")
	c.mustCtl("network", "create", "red", "--vni", "200")
	c.mustCtl("subnet", "create", "red-v4", "--network", "red", "--cidr", "203.0.113.0/24")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		out := c.mustCtl("get", "nodes")
		if strings.Count(out, "true") != 3 {
			return fmt.Errorf("not every agent connected:\n%s", out)
		}
		return nil
	}))
	start := time.Now()
	c.mustCtl("endpoint", "create", "b1", "--network", "blue", "--node", "n1")
	c.mustCtl("endpoint", "create", "b2", "--network", "blue", "--node", "n2")
	c.mustCtl("endpoint", "create", "r2", "--network", "red", "--node", "n2")
	c.mustCtl("endpoint", "create", "r3", "--network", "red", "--node", "n3")
	b1, b2, r2, r3 := c.mac("b1"), c.mac("b2"), c.mac("r2"), c.mac("r3")
	want := map[string]map[int]string{
		"n1": {100: fmt.Sprintf("00:00:00:00:00:00 192.0.2.2,%s 192.0.2.2", b2), 200: "absent"},
		"n2": {100: fmt.Sprintf("00:00:00:00:00:00 192.0.2.1,%s 192.0.2.1", b1), 200: fmt.Sprintf("00:00:00:00:00:00 192.0.2.3,%s 192.0.2.3", r3)},
		"n3": {100: "absent", 200: fmt.Sprintf("00:00:00:00:00:00 192.0.2.2,%s 192.0.2.2", r2)},
	}
	check := func() error {
		for n, byVNI := range want {
			for vni, w := range byVNI {
				if got := sortedCSV(c.fdb(n, vni)); got != sortedCSV(w) {
					return fmt.Errorf("%s vni %d: fdb %q, want %q", n, vni, got, w)
				}
			}
		}
		return nil
	}
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(check))
	t.Logf("endpoints created -> FDB entries on every relevant node: %v", time.Since(start))

	// Drift: the VXLAN device and an FDB entry deleted by hand come back.
	start = time.Now()
	testkit.Run(t, c.nodes["n1"].ns, "ip", "link", "del", "skv100")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(check))
	t.Logf("deleted VXLAN device restored in %v", time.Since(start))
	start = time.Now()
	testkit.Run(t, c.nodes["n2"].ns, "bridge", "fdb", "del", r3, "dev", "skv200", "dst", "192.0.2.3", "self")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(check))
	t.Logf("deleted FDB entry restored in %v", time.Since(start))

	// Restart with the controller down: nothing in n1's kernel changes.
	n1 := c.nodes["n1"]
	mon := monitor(t, n1.ns)
	stop(c.ctrl)
	stop(n1.agent)
	c.startAgent("n1")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		b, _ := os.ReadFile(n1.log)
		if !strings.Contains(string(b), "datapath applied") {
			return fmt.Errorf("restarted agent has not applied its saved plan yet")
		}
		return nil
	}))
	time.Sleep(500 * time.Millisecond)
	if ev := mon(); ev != "" {
		t.Fatalf("agent restart with the controller down changed the kernel:\n%s", ev)
	}
	if err := check(); err != nil {
		t.Fatal(err)
	}
	// The controller returns; the agent resumes without a snapshot.
	mon = monitor(t, n1.ns)
	c.startController()
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		b, _ := os.ReadFile(n1.log)
		if !strings.Contains(string(b), "plan in sync") {
			return fmt.Errorf("agent has not resumed its plan stream")
		}
		return nil
	}))
	time.Sleep(300 * time.Millisecond)
	if ev := mon(); ev != "" {
		t.Fatalf("reconnecting changed the kernel:\n%s", ev)
	}

	// A network deleted disappears from every node.
	c.mustCtl("delete", "endpoint", "b1")
	c.mustCtl("delete", "endpoint", "b2")
	c.mustCtl("delete", "network", "blue")
	want["n1"][100], want["n2"][100] = "absent", "absent"
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(check))
	for _, n := range []string{"n1", "n2", "n3"} {
		if out := testkit.Run(t, c.nodes[n].ns, "ip", "link", "show"); strings.Contains(out, "skb100") {
			t.Fatalf("%s still has skb100:\n%s", n, out)
		}
	}
}

func sortedCSV(s string) string {
	parts := strings.Split(s, ",")
	for i := range parts {
		for j := i + 1; j < len(parts); j++ {
			if parts[j] < parts[i] {
				parts[i], parts[j] = parts[j], parts[i]
			}
		}
	}
	return strings.Join(parts, ",")
}

// monitor records link, neighbour and FDB events (not addresses: the
// kernel adds IPv6 link-local addresses by itself) in ns until the
// returned function is called; it returns what was seen.
func monitor(t *testing.T, ns string) func() string {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var out strings.Builder
	var wg sync.WaitGroup
	for _, args := range [][]string{{"ip", "-o", "monitor", "link", "neigh"}, {"bridge", "monitor", "fdb"}} {
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, args...)...)
		w := &lockedWriter{mu: &mu, b: &out}
		cmd.Stdout, cmd.Stderr = w, w
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = cmd.Wait() }()
	}
	time.Sleep(200 * time.Millisecond) // let the monitors subscribe
	return func() string {
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return strings.TrimSpace(kernelNUD(out.String()))
	}
}

// kernelNUD drops the neighbour events of the underlay device (eth0)
// whose state is one of the kernel's own reachability states: the kernel
// moves a dynamic underlay entry through DELAY, PROBE and REACHABLE when
// it sends anything to a peer (here the multicast the bridge and VXLAN
// device flood to every remote VTEP), on its own timers. Skiff writes no
// underlay neighbour on software nodes; its neighbours are permanent
// entries on its own devices, and every event of those is kept.
func kernelNUD(events string) string {
	var keep []string
	for _, l := range strings.Split(events, "\n") {
		f := strings.Fields(l)
		if i := slices.Index(f, "dev"); i >= 0 && i+1 < len(f) && f[i+1] == "eth0" &&
			slices.Contains([]string{"REACHABLE", "STALE", "DELAY", "PROBE"}, f[len(f)-1]) {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n")
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
