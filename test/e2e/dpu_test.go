package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/cni"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// The DPU bench on the host kernel: node h1 runs the agent in mode
// dpu-host, d1 (its DPU) in mode dpu on the software datapath, n2 in mode
// software. The host's VFs are stood in by veth pairs: vfN in the host's
// namespace (the dpu-host agent moves it into the pod), repN in the DPU's
// (the "representor", adopted by the DPU agent); both agents find them
// through a --vf-table file (datapath/vftable) instead of sysfs.
const dpuHostPF = "0000:03:00.0"

// vfPCI is VF i's (made-up) PCI address: functions 0-7 of devices 1, 2...
func vfPCI(i int) string { return fmt.Sprintf("0000:03:%02x.%d", 1+i/8, i%8) }

// vfTable writes a --vf-table file for n VFs, netdev prefix "vf" (host)
// or "rep" (DPU).
func vfTable(t testing.TB, prefix string, n int) string {
	t.Helper()
	type entry struct {
		PF     string `json:"pf"`
		Index  int    `json:"index"`
		PCI    string `json:"pci"`
		Netdev string `json:"netdev"`
	}
	var tab struct {
		VFs []entry `json:"vfs"`
	}
	for i := range n {
		tab.VFs = append(tab.VFs, entry{PF: dpuHostPF, Index: i, PCI: vfPCI(i), Netdev: fmt.Sprintf("%s%d", prefix, i)})
	}
	b, _ := json.Marshal(tab)
	path := filepath.Join(t.TempDir(), prefix+".json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// unquoted is an error's text with the CNI result's JSON escapes of
// quotes undone.
func unquoted(err error) string {
	if err == nil {
		return ""
	}
	return strings.ReplaceAll(err.Error(), `\"`, `"`)
}

func vfConf(network, socket string, vf int) string {
	return fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"type":"skiff-cni","network":%q,"socket":%q,"deviceID":%q}`, network, network, socket, vfPCI(vf))
}

func TestDPUMode(t *testing.T) {
	const vfs = 4
	// The host has one VF more than the DPU has representors for.
	hostTable, dpuTable := vfTable(t, "vf", vfs+1), vfTable(t, "rep", vfs)
	c := newClusterArgs(t, map[string][]string{
		"h1": {"--mode", "dpu-host", "--dpu", "d1", "--vf-table", hostTable},
		"d1": {"--mode", "dpu", "--vf-table", dpuTable},
	}, nil, "h1", "d1", "n2")
	h1, d1, n2 := c.nodes["h1"], c.nodes["d1"], c.nodes["n2"]
	for i := range vfs {
		testkit.Run(t, h1.ns, "ip", "link", "add", fmt.Sprintf("vf%d", i), "type", "veth", "peer", "name", fmt.Sprintf("rep%d", i), "netns", d1.ns)
	}
	// ... whose stand-in has its peer in the host (no representor).
	testkit.Run(t, h1.ns, "ip", "link", "add", fmt.Sprintf("vf%d", vfs), "type", "veth", "peer", "name", "nrep")
	c.mustCtl("network", "create", "blue", "--vni", "100")
	c.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		for _, n := range []*node{h1, n2} {
			if _, err := cniRun("STATUS", "", "", "", cniConf("blue", n.socket, "1.1.0")); err != nil {
				return err
			}
		}
		return nil
	}))
	add := func(id, ns, conf string) (string, error) {
		out, err := cniRun("ADD", id, testkit.Path(ns), "eth0", conf)
		if err != nil {
			return "", err
		}
		var r cniResult
		if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.IPs) != 1 {
			return "", fmt.Errorf("ADD %s printed %q: %v", id, out, err)
		}
		return strings.Split(r.IPs[0].Address, "/")[0], nil
	}
	mustAdd := func(id, ns, conf string) string {
		t.Helper()
		ip, err := add(id, ns, conf)
		if err != nil {
			t.Fatalf("ADD %s: %v", id, err)
		}
		return ip
	}

	// A pod on the host (VF 0) reaches a pod on n2: ping and TCP.
	pa, pb := testkit.New(t), testkit.New(t)
	start := time.Now()
	ipa := mustAdd("pod-a", pa, vfConf("blue", h1.socket, 0))
	t.Logf("CNI ADD on the dpu-host node (DPU connected): %v", time.Since(start).Round(time.Millisecond))
	ipb := mustAdd("pod-b", pb, cniConf("blue", n2.socket, "1.1.0"))
	if _, err := testkit.Try(h1.ns, "ip", "link", "show", "vf0"); err == nil {
		t.Fatal("vf0 is still in the host's namespace after the ADD")
	}
	testkit.Run(t, pa, "ip", "link", "show", "eth0") // the VF, renamed, in the pod
	if out := c.mustCtl("get", "endpoints"); !strings.Contains(out, cni.EndpointName("pod-a", "eth0")) {
		t.Fatalf("skiffctl does not list pod-a's endpoint by its name (the checks of endpoints left behind below rely on it):\n%s", out)
	}
	if out := testkit.Run(t, d1.ns, "ip", "-o", "link", "show", "master", "skb100"); !strings.Contains(out, "skiff:rep ep=") {
		t.Fatalf("the DPU did not put the adopted representor on the network's bridge:\n%s", out)
	}
	testkit.MustPing(t, pa, ipb, 2, 2*time.Second)
	testkit.MustPing(t, pb, ipa, 1, 2*time.Second)
	testkit.Serve(t, pb, ipb+":8080", "ok")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if !testkit.Connects(pa, net.JoinHostPort(ipb, "8080"), time.Second) {
			return fmt.Errorf("no TCP from the host's pod to %s:8080", ipb)
		}
		return nil
	}))

	// A VF the DPU has no representor for: the DPU refuses it, the ADD
	// fails with its reason, the VF goes back home, no endpoint stays.
	px := testkit.New(t)
	start = time.Now()
	_, err := add("pod-x", px, vfConf("blue", h1.socket, vfs))
	t.Logf("CNI ADD of a VF the DPU has no representor for failed in %v: %v", time.Since(start).Round(time.Millisecond), err)
	if err == nil || !strings.Contains(unquoted(err), fmt.Sprintf("no representor for VF %d of PF %s on DPU d1", vfs, dpuHostPF)) {
		t.Fatalf("ADD of a VF without representor: %v", err)
	}
	testkit.Run(t, h1.ns, "ip", "link", "show", fmt.Sprintf("vf%d", vfs))
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		if out := c.mustCtl("get", "endpoints"); strings.Contains(out, cni.EndpointName("pod-x", "eth0")) {
			return fmt.Errorf("the refused endpoint stayed:\n%s", out)
		}
		return nil
	}))

	// The DPU agent stops: the host fails fast, running pods keep
	// forwarding.
	stopped := time.Now()
	stop(d1.agent)
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		_, err := cniRun("STATUS", "", "", "", cniConf("blue", h1.socket, "1.1.0"))
		if err == nil || !strings.Contains(unquoted(err), `DPU "d1" is not connected`) {
			return fmt.Errorf("STATUS on h1 with its DPU's agent stopped: %v", err)
		}
		return nil
	}))
	// Checked every 50 ms by a STATUS (a skiff-cni process): an upper
	// bound.
	t.Logf("DPU agent killed -> the host's STATUS says so: %v", time.Since(stopped).Round(time.Millisecond))
	pc := testkit.New(t)
	start = time.Now()
	_, err = add("pod-c", pc, vfConf("blue", h1.socket, 1))
	took := time.Since(start)
	t.Logf("CNI ADD on the dpu-host node with its DPU's agent stopped failed in %v: %v", took.Round(time.Millisecond), err)
	if err == nil || !strings.Contains(unquoted(err), `DPU "d1" is not connected`) || !strings.Contains(unquoted(err), "away for") {
		t.Fatalf("ADD with the DPU away: %v", err)
	}
	if took >= time.Second {
		t.Fatalf("ADD with the DPU away took %v, want under a second", took)
	}
	testkit.Run(t, h1.ns, "ip", "link", "show", "vf1") // nothing half-made: the VF stayed home
	if out := c.mustCtl("get", "endpoints"); strings.Contains(out, cni.EndpointName("pod-c", "eth0")) {
		t.Fatalf("an endpoint was created for the refused ADD:\n%s", out)
	}
	testkit.MustPing(t, pa, ipb, 2, 2*time.Second)
	if !testkit.Connects(pa, net.JoinHostPort(ipb, "8080"), time.Second) {
		t.Fatal("the host's pod lost TCP to n2 while its DPU's agent was down")
	}

	// The DPU agent is back: new pods work, old ones still do.
	c.startAgent("d1")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error { _, err := cniRun("STATUS", "", "", "", cniConf("blue", h1.socket, "1.1.0")); return err }))
	// Its restart changed nothing that matched: no representor adopted
	// again, the running pod's still on the bridge.
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		b, _ := os.ReadFile(d1.log)
		if !strings.Contains(string(b), "datapath applied") {
			return fmt.Errorf("the restarted DPU agent has not applied yet")
		}
		if strings.Contains(string(b), "representor adopted") {
			return fmt.Errorf("the restarted DPU agent adopted again:\n%s", b)
		}
		return nil
	}))
	testkit.MustPing(t, pa, ipb, 1, 2*time.Second)
	ipc := mustAdd("pod-c", pc, vfConf("blue", h1.socket, 1))
	testkit.MustPing(t, pc, ipb, 2, 2*time.Second)
	testkit.MustPing(t, pa, ipc, 1, 2*time.Second)
	if !testkit.Connects(pc, net.JoinHostPort(ipb, "8080"), time.Second) {
		t.Fatal("no TCP from the new pod on the host")
	}

	// The host's agent restarts (SIGKILL, then started again): nothing
	// that matches changes, on the host, in its pods or on the DPU.
	var seen []func() string
	for _, ns := range []string{h1.ns, pa, pc, d1.ns} {
		seen = append(seen, monitor(t, ns))
	}
	stop(h1.agent)
	c.startAgent("h1")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		b, _ := os.ReadFile(h1.log)
		if !strings.Contains(string(b), "datapath applied") {
			return fmt.Errorf("the restarted host agent has not applied yet")
		}
		_, err := cniRun("STATUS", "", "", "", cniConf("blue", h1.socket, "1.1.0"))
		return err
	}))
	testkit.MustPing(t, pa, ipb, 1, 2*time.Second)
	for i, ns := range []string{"h1", "pod a", "pod c", "d1"} {
		if ev := seen[i](); ev != "" {
			t.Errorf("the host agent's restart changed %s:\n%s", ns, ev)
		}
	}
	if b, _ := os.ReadFile(h1.log); strings.Contains(string(b), "moved back") {
		t.Errorf("the restarted host agent moved a VF that was in place:\n%s", b)
	}

	// DEL gives the VF back to the host and the representor back to
	// the DPU.
	if _, err := cniRun("DEL", "pod-c", testkit.Path(pc), "eth0", vfConf("blue", h1.socket, 1)); err != nil {
		t.Fatal(err)
	}
	testkit.Run(t, h1.ns, "ip", "link", "show", "vf1")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		_, err := testkit.Try(d1.ns, "ip", "link", "show", "rep1")
		return err
	}))
}

// A conflicting pairing, and a host naming a DPU that never registered:
// clear errors, nothing made.
func TestDPUPairingErrors(t *testing.T) {
	table := vfTable(t, "vf", 2)
	c := newClusterArgs(t, map[string][]string{
		"h1": {"--mode", "dpu-host", "--dpu", "d1", "--vf-table", table},
		"d1": {"--mode", "dpu", "--vf-table", vfTable(t, "rep", 2)},
		"h2": {"--mode", "dpu-host", "--dpu", "d1", "--vf-table", table},
		"h3": {"--mode", "dpu-host", "--dpu", "ghost", "--vf-table", table},
	}, []string{"h2"}, "h1", "d1", "h2", "h3")
	c.mustCtl("network", "create", "blue", "--vni", "100")
	c.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		_, err := cniRun("STATUS", "", "", "", cniConf("blue", c.nodes["h1"].socket, "1.1.0"))
		return err
	}))
	// h2 claims h1's DPU (once h1 holds it): its registration is
	// refused, naming the field and the holder.
	c.startAgent("h2")
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		b, _ := os.ReadFile(c.nodes["h2"].log)
		if !strings.Contains(string(b), `dpu: node \"d1\" is already the DPU of host \"h1\"`) {
			return fmt.Errorf("h2's log does not show the refused pairing:\n%s", tail(string(b), 10))
		}
		return nil
	}))
	if out := c.mustCtl("get", "nodes"); strings.Contains(out, "h2") {
		t.Fatalf("the refused host was stored:\n%s", out)
	}
	// h3 names a DPU that never registered: STATUS says so, and an ADD
	// fails at once.
	h3 := c.nodes["h3"]
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		_, err := cniRun("STATUS", "", "", "", cniConf("blue", h3.socket, "1.1.0"))
		if err == nil || !strings.Contains(unquoted(err), `DPU "ghost" has never registered`) {
			return fmt.Errorf("STATUS on h3: %v", err)
		}
		return nil
	}))
	pod := testkit.New(t)
	start := time.Now()
	_, err := cniRun("ADD", "pod-x", testkit.Path(pod), "eth0", vfConf("blue", h3.socket, 0))
	took := time.Since(start)
	t.Logf("CNI ADD on a host whose DPU never registered failed in %v: %v", took.Round(time.Millisecond), err)
	if err == nil || !strings.Contains(unquoted(err), `DPU "ghost" has never registered`) || took >= time.Second {
		t.Fatalf("ADD on h3: %v after %v", err, took)
	}
}
