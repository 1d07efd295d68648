package scale

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/agent/planfile"
	"github.com/skiff-sdn/skiff/internal/planpb"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// RealAgent is one real skiff-agent (software datapath) in a network
// namespace of its own, standing for one node of the workload. The
// controllers listen on loopback in the harness's namespace; inside the
// agent's namespace a forwarder listens on each controller's address and
// relays to it, so the agent dials the same --controller value as the
// simulated agents. Its underlay address sits on one end of a veth pair
// whose both ends stay in the namespace.
type RealAgent struct {
	Node, UnderlayIP, NS string
	dir                  string
	proc                 *Proc
	fwd                  []net.Listener
	addrs                []string        // the controller behind each forwarder
	open                 []*atomic.Int32 // connections each forwarder relays now
	mark                 int64           // log offset of the last Monitor
}

// StartRealAgent creates the namespace and starts the agent for node.
// It needs root.
func StartRealAgent(ctx context.Context, c *Cluster, node NodeSpec, dir string) (*RealAgent, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("the real agent needs root (network namespaces)")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	r := &RealAgent{Node: node.Name, UnderlayIP: node.UnderlayIP, NS: "sks-" + hex.EncodeToString(b), dir: dir}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if out, err := exec.Command("ip", "netns", "add", r.NS).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add: %v: %s", err, out)
	}
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "ul0", "type", "veth", "peer", "name", "ul1"},
		{"addr", "add", node.UnderlayIP + "/15", "dev", "ul0"},
		{"link", "set", "ul1", "up"},
		{"link", "set", "ul0", "up"},
	} {
		if out, err := exec.Command("ip", append([]string{"-n", r.NS}, args...)...).CombinedOutput(); err != nil {
			r.Close()
			return nil, fmt.Errorf("ip %v: %v: %s", args, err, out)
		}
	}
	// No IPv6 in the namespace: its bridges would send router
	// solicitations and MLD reports, flooded to the VTEPs, whose underlay
	// neighbour entries (nobody answers) would then show in the monitor.
	if out, err := exec.Command("ip", "netns", "exec", r.NS, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1",
		"net.ipv6.conf.default.disable_ipv6=1").CombinedOutput(); err != nil {
		r.Close()
		return nil, fmt.Errorf("sysctl: %v: %s", err, out)
	}
	for _, ct := range c.Controllers {
		l, err := listenIn(r.NS, ct.Addr)
		if err != nil {
			r.Close()
			return nil, err
		}
		n := &atomic.Int32{}
		r.fwd, r.addrs, r.open = append(r.fwd, l), append(r.addrs, ct.Addr), append(r.open, n)
		go forward(l, ct.Addr, n)
	}
	args := []string{"--controller", c.Target(), "--node", node.Name, "--underlay-ip", node.UnderlayIP,
		"--state-dir", filepath.Join(dir, "state"), "--socket", "", "--mode", "software", "--log-level", "debug"}
	if c.CA != nil {
		caf, cert, key, err := c.CA.Files(dir, "node:"+node.Name)
		if err != nil {
			r.Close()
			return nil, err
		}
		args = append(args, "--tls-ca", caf, "--tls-cert", cert, "--tls-key", key)
	}
	p, err := Start("agent "+node.Name, filepath.Join(dir, "agent.log"), []string{"ip", "netns", "exec", r.NS}, c.Bins.Agent, args...)
	if err != nil {
		r.Close()
		return nil, err
	}
	r.proc = p
	return r, nil
}

// Close stops the agent, the forwarders, and deletes the namespace (and
// with it every device the agent made).
func (r *RealAgent) Close() {
	r.proc.Stop()
	for _, l := range r.fwd {
		l.Close()
	}
	_ = exec.Command("ip", "netns", "del", r.NS).Run()
}

// Log returns the agent's log.
func (r *RealAgent) Log() string {
	b, _ := os.ReadFile(filepath.Join(r.dir, "agent.log"))
	return string(b)
}

// listenIn opens a TCP listener on addr inside namespace ns: the socket is
// made on a thread moved into ns, which is moved back before it runs
// anything else.
func listenIn(ns, addr string) (net.Listener, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, err
	}
	defer orig.Close()
	target, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		return nil, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("setns %s: %w", ns, err)
	}
	l, lerr := net.Listen("tcp", addr)
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		panic(fmt.Sprintf("cannot return to the harness's namespace: %v", err)) // this thread must not run anything else
	}
	if lerr != nil {
		return nil, fmt.Errorf("listen in %s: %w", ns, lerr)
	}
	return l, nil
}

// Replica returns the address of the controller the agent is connected to
// ("" when none).
func (r *RealAgent) Replica() string {
	for i, n := range r.open {
		if n.Load() > 0 {
			return r.addrs[i]
		}
	}
	return ""
}

// forward relays every connection accepted on l to addr until l closes,
// counting the open ones in n.
func forward(l net.Listener, addr string, n *atomic.Int32) {
	for {
		in, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			n.Add(1)
			defer n.Add(-1)
			defer in.Close()
			out, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer out.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
			go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
			<-done
		}()
	}
}

// InSync checks that the plan the agent saved equals the controller's plan
// for its node, and that its datapath holds one VXLAN FDB entry per
// remote endpoint of each network.
func (r *RealAgent) InSync(ctx context.Context, mgmt skiffv1.ManagementServiceClient) error {
	for {
		want, err := mgmt.GetPlan(ctx, &skiffv1.GetPlanRequest{Node: r.Node})
		if err == nil {
			if err = r.check(want); err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("real agent %s: %w", r.Node, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (r *RealAgent) check(want *skiffv1.Plan) error {
	// The agent's saved plan, as it reads it back when it restarts (a
	// record it is writing now is cut off: the next check sees it).
	saved, ok, err := planfile.Open(filepath.Join(r.dir, "state"), r.Node, slog.New(slog.DiscardHandler)).Load()
	if err != nil || !ok {
		return fmt.Errorf("no saved plan (%v)", err)
	}
	g, err := fromPlan(planpb.PlanPB(saved))
	if err != nil {
		return err
	}
	w, err := fromPlan(want)
	if err != nil {
		return err
	}
	if d := g.diff(w); d != "" {
		return fmt.Errorf("saved plan differs: %s", d)
	}
	remotes := map[string]int{}
	for _, re := range want.RemoteEndpoints {
		remotes[re.Network]++
	}
	for _, n := range want.Networks {
		out, err := exec.Command("ip", "netns", "exec", r.NS, "bridge", "fdb", "show", "dev", fmt.Sprintf("skv%d", n.Vni)).Output()
		if err != nil {
			return fmt.Errorf("network %s: no VXLAN device: %w", n.Name, err)
		}
		entries := 0
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, " dst ") && !strings.HasPrefix(l, "00:00:00:00:00:00") {
				entries++
			}
		}
		if entries != remotes[n.Name] {
			return fmt.Errorf("network %s: %d FDB entries, want %d", n.Name, entries, remotes[n.Name])
		}
	}
	return nil
}

// Monitor watches links, neighbours, routes and FDB entries in the agent's
// namespace (ip monitor, bridge monitor) until Stop.
type Monitor struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	out    strings.Builder
}

// Mark marks the agent's log: WaitResumed and ResumedWith look at what
// comes after.
func (r *RealAgent) Mark() {
	if st, err := os.Stat(filepath.Join(r.dir, "agent.log")); err == nil {
		r.mark = st.Size()
	}
}

// Monitor marks the log and starts watching.
func (r *RealAgent) Monitor() (*Monitor, error) {
	r.Mark()
	ctx, cancel := context.WithCancel(context.Background())
	m := &Monitor{cancel: cancel}
	for _, args := range [][]string{{"ip", "-o", "monitor", "link", "neigh", "route"}, {"bridge", "monitor", "fdb"}} {
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", r.NS}, args...)...)
		cmd.Stdout, cmd.Stderr = m, m
		if err := cmd.Start(); err != nil {
			cancel()
			return nil, err
		}
		m.wg.Add(1)
		go func() { defer m.wg.Done(); _ = cmd.Wait() }()
	}
	time.Sleep(300 * time.Millisecond) // let the monitors subscribe
	return m, nil
}

func (m *Monitor) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.out.Write(p)
}

// Stop ends the monitors and returns the lines they printed about what the
// agent programs, and how many lines were about neighbour entries the
// kernel learned by itself (the underlay's ARP for VTEPs: the agent's
// entries are all PERMANENT).
func (m *Monitor) Stop() (changes []string, learned int) {
	m.cancel()
	m.wg.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range strings.Split(strings.TrimSpace(m.out.String()), "\n") {
		switch {
		case l == "":
		case kernelLearned(l):
			learned++
		default:
			changes = append(changes, l)
		}
	}
	return changes, learned
}

// kernelLearned reports whether an ip monitor line is about a neighbour
// entry the kernel made, not one the agent wrote: a dynamic one (the
// kernel's ARP), or the NOARP entry of a multicast group an interface
// joined (IGMP and MLD reports: 224.0.0.22, ff02::16), which the kernel
// also ages out by itself.
func kernelLearned(l string) bool {
	if strings.Contains(l, "lladdr") && strings.Contains(l, "PERMANENT") {
		return false
	}
	if f := strings.Fields(strings.TrimPrefix(l, "Deleted ")); len(f) > 0 && strings.HasSuffix(strings.TrimSpace(l), "NOARP") {
		if a, err := netip.ParseAddr(f[0]); err == nil && a.IsMulticast() {
			return true
		}
	}
	for _, st := range []string{"INCOMPLETE", "REACHABLE", "STALE", "DELAY", "PROBE", "FAILED"} {
		if strings.HasSuffix(strings.TrimSpace(l), st) {
			return true
		}
	}
	return false
}

// logSince returns the agent's log after the last Mark.
func (r *RealAgent) logSince() string {
	l := r.Log()
	if int64(len(l)) < r.mark {
		return ""
	}
	return l[r.mark:]
}

// WaitResumed waits until the agent, since the last Mark, opened a plan
// stream and accepted its first update.
func (r *RealAgent) WaitResumed(ctx context.Context) error {
	for r.ResumedWith() == "" {
		select {
		case <-ctx.Done():
			return fmt.Errorf("real agent %s did not resume: %w\n%s", r.Node, ctx.Err(), r.logSince())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// ResumedWith says how the agent's first update since the last Mark
// came ("" when none came yet): "in sync (empty delta)", "delta" or
// "snapshot".
func (r *RealAgent) ResumedWith() string {
	l := r.logSince()
	i := strings.Index(l, "plan stream open")
	if i < 0 {
		return ""
	}
	l = l[i:]
	best, at := "", len(l)
	for msg, what := range map[string]string{"plan in sync": "in sync (empty delta)", "plan delta": "delta", "plan snapshot": "snapshot"} {
		if j := strings.Index(l, "msg=\""+msg+"\""); j >= 0 && j < at {
			best, at = what, j
		}
	}
	return best
}
