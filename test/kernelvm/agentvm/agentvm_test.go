// Package agentvm runs the real skiff-agent, skiff-controller and skiffctl
// binaries inside the kernel VM against a netdevsim device in switchdev
// mode: capability discovery as an operator sees it (skiff-agent
// capabilities), the capabilities a registered node carries
// (skiffctl get nodes), mode auto on a switchdev node, and re-discovery
// after a VF count change.
package agentvm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/skiff-sdn/skiff/offload/eswitch"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// syncBuf is a bytes.Buffer safe for a process writing and a test reading.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a project binary running in the guest.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuf
	done chan struct{} // closed when it exited
	err  error         // its exit status, once done
	once sync.Once
}

// start runs a binary until the test ends; its output is logged then.
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, out: &syncBuf{}, done: make(chan struct{})}
	p.cmd = exec.Command(guest.Bin(t, name), args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop()
		t.Logf("---- %s %s (%v) ----\n%s", name, strings.Join(args, " "), p.err, p.out.String())
	})
	return p
}

// stop interrupts the process and waits for it; it returns the exit
// status.
func (p *proc) stop() error {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	<-p.done
	return p.err
}

// alive fails t when the process has exited.
func (p *proc) alive(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		t.Fatalf("%s exited: %v\n%s", p.name, p.err, p.out.String())
	default:
	}
}

// repsByVF reads, independently of the code under test, which netdev
// stands for which VF: phys_port_name pf0vfN under the switch id.
func repsByVF(t *testing.T, switchID string) map[uint32]string {
	t.Helper()
	ents, err := os.ReadDir("/sys/class/net")
	if err != nil {
		t.Fatal(err)
	}
	m := map[uint32]string{}
	for _, e := range ents {
		dir := filepath.Join("/sys/class/net", e.Name())
		sw, err1 := os.ReadFile(filepath.Join(dir, "phys_switch_id"))
		pn, err2 := os.ReadFile(filepath.Join(dir, "phys_port_name"))
		if err1 != nil || err2 != nil || strings.TrimSpace(string(sw)) != switchID {
			continue
		}
		var vf uint32
		if _, err := fmt.Sscanf(strings.TrimSpace(string(pn)), "pf0vf%d", &vf); err == nil {
			m[vf] = e.Name()
		}
	}
	return m
}

func uname(t *testing.T) string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	return unix.ByteSliceToString(u.Release[:])
}

// checkCaps checks capabilities against the netdevsim PF pfName in
// switchdev mode with numVFs VFs.
func checkCaps(t *testing.T, c *skiffv1.NodeCapabilities, pfName string, numVFs int) {
	t.Helper()
	if c.GetRole() != "host" {
		t.Errorf("role = %q, want host", c.GetRole())
	}
	if !slices.Contains(c.GetModes(), "software") || !slices.Contains(c.GetModes(), "offload") || slices.Contains(c.GetModes(), "dpu") {
		t.Errorf("modes = %v, want software and offload", c.GetModes())
	}
	if c.GetKernel() != uname(t) {
		t.Errorf("kernel = %q, want %q", c.GetKernel(), uname(t))
	}
	var pf *skiffv1.PhysicalFunction
	for _, p := range c.GetPfs() {
		if p.GetName() == pfName {
			pf = p
		}
	}
	if pf == nil {
		t.Fatalf("no PF %s in %v", pfName, c)
	}
	sw, err := os.ReadFile("/sys/class/net/" + pfName + "/phys_switch_id")
	if err != nil {
		t.Fatal(err)
	}
	switchID := strings.TrimSpace(string(sw))
	if pf.GetEswitchMode() != "switchdev" || pf.GetNumVfs() != uint32(numVFs) || pf.GetTotalVfs() != 0 ||
		pf.GetUplinkRepresentor() != pfName || pf.GetSwitchId() != switchID || pf.GetPciAddress() != "" {
		t.Errorf("PF = %v; want switchdev, %d VFs, total 0 (netdevsim does not say), uplink %s, switch %s, no PCI address", pf, numVFs, pfName, switchID)
	}
	reps := repsByVF(t, switchID)
	if len(pf.GetVfs()) != numVFs || len(reps) != numVFs {
		t.Fatalf("%d VFs reported, %d representors in sysfs, want %d: %v", len(pf.GetVfs()), len(reps), numVFs, pf.GetVfs())
	}
	for i, vf := range pf.GetVfs() {
		if vf.GetIndex() != uint32(i) || vf.GetRepresentor() == "" || vf.GetRepresentor() != reps[uint32(i)] {
			t.Errorf("VF %d = %v, want index %d and representor %q", i, vf, i, reps[uint32(i)])
		}
	}
}

func capabilitiesCmd(t *testing.T) *skiffv1.NodeCapabilities {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(guest.Bin(t, "skiff-agent"), "capabilities", "-o", "json")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("skiff-agent capabilities: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	t.Logf("skiff-agent capabilities -o json:\n%s%s", stdout.String(), stderr.String())
	// lowerCamelCase JSON names, every field shown (index 0 too).
	for _, k := range []string{`"eswitchMode"`, `"numVfs"`, `"totalVfs"`, `"uplinkRepresentor"`, `"switchId"`, `"pciAddress"`} {
		if !strings.Contains(stdout.String(), k) {
			t.Errorf("output lacks %s", k)
		}
	}
	c := &skiffv1.NodeCapabilities{}
	if err := protojson.Unmarshal(stdout.Bytes(), c); err != nil {
		t.Fatalf("capabilities output: %v", err)
	}
	return c
}

// getNode runs skiffctl get nodes -o json and returns the node name.
func getNode(t *testing.T, controller, name string) *skiffv1.Node {
	t.Helper()
	out, err := exec.Command(guest.Bin(t, "skiffctl"), "--controller", controller, "get", "nodes", "-o", "json").CombinedOutput()
	if err != nil {
		t.Logf("skiffctl get nodes: %v\n%s", err, out)
		return nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatalf("skiffctl get nodes -o json: %v\n%s", err, out)
	}
	for _, r := range raw {
		n := &skiffv1.Node{}
		if err := protojson.Unmarshal(r, n); err != nil {
			t.Fatalf("node %s: %v", r, err)
		}
		if n.GetName() == name {
			return n
		}
	}
	return nil
}

// waitNode polls skiffctl until ok accepts the node, while procs run.
func waitNode(t *testing.T, controller, name string, within time.Duration, ok func(*skiffv1.Node) bool, procs ...*proc) *skiffv1.Node {
	t.Helper()
	var last *skiffv1.Node
	testkit.Eventually(t, "node "+name+" as expected", within, func() (bool, string) {
		for _, p := range procs {
			p.alive(t)
		}
		if n := getNode(t, controller, name); n != nil {
			last = n
			if ok(n) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("last seen: %v", last)
	})
	return last
}

func waitLog(t *testing.T, p *proc, what string, within time.Duration) {
	t.Helper()
	testkit.Eventually(t, fmt.Sprintf("%q in %s's output", what, p.name), within, func() (bool, string) {
		if strings.Contains(p.out.String(), what) {
			return true, ""
		}
		p.alive(t)
		return false, ""
	})
}

func numVFs(c *skiffv1.NodeCapabilities, pf string) int {
	for _, p := range c.GetPfs() {
		if p.GetName() == pf {
			return len(p.GetVfs())
		}
	}
	return -1
}

func TestAgentCapabilitiesOnNetdevsim(t *testing.T) {
	guest.Require(t)
	ctx := context.Background()
	d := eswitch.New(eswitch.Options{})
	ns := guest.NewNetdevsim(t, 41, 1)
	pfName := ns.Netdevs(t)[0]
	t.Cleanup(func() {
		_ = d.SetMode(ctx, pfName, eswitch.ModeLegacy)
		_ = d.SetNumVFs(pfName, 0)
	})

	// Before switchdev: the PF is there, but the node is no offload host.
	before := capabilitiesCmd(t)
	if before.GetRole() != "none" || slices.Contains(before.GetModes(), "offload") {
		t.Fatalf("legacy netdevsim: %v", before)
	}
	if err := d.SetNumVFs(pfName, 2); err != nil {
		t.Fatal(err)
	}
	if err := d.SetMode(ctx, pfName, eswitch.ModeSwitchdev); err != nil {
		t.Fatal(err)
	}
	caps := capabilitiesCmd(t)
	checkCaps(t, caps, pfName, 2)
	if t.Failed() {
		t.FailNow()
	}

	// The controller and the agent, both real processes.
	tmp := t.TempDir()
	addr := testkit.FreeAddr(t)
	tStart := time.Now()
	ctl := start(t, "skiff-controller", "--listen", addr, "--data-dir", filepath.Join(tmp, "etcd"))
	// The agent would wait for the controller too, with backoff; waiting
	// here keeps the boot short.
	waitLog(t, ctl, "controller serving", 30*time.Second)
	agentArgs := []string{"--mode", "auto", "--controller", addr, "--node", "vm1", "--underlay-ip", "192.0.2.1",
		"--state-dir", filepath.Join(tmp, "agent"), "--socket", ""}
	agent := start(t, "skiff-agent", agentArgs...)
	n := waitNode(t, addr, "vm1", 30*time.Second, func(n *skiffv1.Node) bool { return n.GetCapabilities() != nil }, ctl, agent)
	t.Logf("node registered %s after start: %v", time.Since(tStart).Round(time.Millisecond), n)
	if n.GetMode() != "offload" || n.GetUnderlayIp() != "192.0.2.1" {
		t.Errorf("node mode %q underlay %q; want offload (auto on a switchdev eswitch), 192.0.2.1", n.GetMode(), n.GetUnderlayIp())
	}
	checkCaps(t, n.GetCapabilities(), pfName, 2)
	if !proto.Equal(n.GetCapabilities(), caps) {
		t.Errorf("registered capabilities differ from skiff-agent capabilities:\n%v\n%v", n.GetCapabilities(), caps)
	}
	waitLog(t, agent, " mode=offload", 5*time.Second) // the datapath line
	if t.Failed() {
		t.FailNow()
	}

	// VF count 2 -> 3 (through 0; eswitch mode restored by SetNumVFs):
	// the running agent re-discovers on the representor link events and
	// registers again.
	tChange := time.Now()
	if err := d.SetNumVFs(pfName, 3); err != nil {
		t.Fatal(err)
	}
	n = waitNode(t, addr, "vm1", 20*time.Second, func(n *skiffv1.Node) bool { return numVFs(n.GetCapabilities(), pfName) == 3 }, ctl, agent)
	t.Logf("VF count change seen by the controller after %s", time.Since(tChange).Round(time.Millisecond))
	checkCaps(t, n.GetCapabilities(), pfName, 3)
	if !proto.Equal(n.GetCapabilities(), capabilitiesCmd(t)) {
		t.Errorf("registered capabilities after the change differ from skiff-agent capabilities")
	}
	waitLog(t, agent, "capabilities changed; registering again", 5*time.Second)

	// A restart with unchanged capabilities writes nothing: the node's
	// revision stays.
	rev := n.GetRevision()
	if err := agent.stop(); err != nil {
		t.Fatalf("agent exit: %v", err)
	}
	agent2 := start(t, "skiff-agent", agentArgs...)
	waitLog(t, agent2, "plan stream open", 20*time.Second)
	if n2 := getNode(t, addr, "vm1"); n2 == nil || n2.GetRevision() != rev || !proto.Equal(n2.GetCapabilities(), n.GetCapabilities()) {
		t.Errorf("after an agent restart: revision %d -> %v (capabilities equal: %v)", rev, n2.GetRevision(), n2 != nil && proto.Equal(n2.GetCapabilities(), n.GetCapabilities()))
	}
}

func TestAgentModeOffloadWithoutSwitchdev(t *testing.T) {
	guest.Require(t)
	// No controller is needed: the agent refuses to start before
	// contacting one.
	out, err := exec.Command(guest.Bin(t, "skiff-agent"), "--mode", "offload", "--controller", "127.0.0.1:1", "--node", "vm2",
		"--underlay-ip", "192.0.2.2", "--state-dir", t.TempDir(), "--socket", "").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--mode offload") || !strings.Contains(string(out), "no eswitch in switchdev mode") {
		t.Fatalf("skiff-agent --mode offload on a node without switchdev: err %v\n%s", err, out)
	}
	t.Logf("refused as expected: %s", strings.TrimSpace(string(out)))
}
