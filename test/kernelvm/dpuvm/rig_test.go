// Package dpuvm runs DPU mode in the kernel VM: the real controller, the
// real skiff-agent in modes dpu, dpu-host, software and offload, and the
// real skiff-cni. Node h1 (namespace skdh, --mode dpu-host --dpu d1) is a
// host whose pods get VFs; d1 (namespace skdd, --mode dpu) is its DPU,
// with a netdevsim eswitch in switchdev mode, so its agent wraps the
// offload datapath: the host's endpoints are forwarded by tc-flower
// rules on their representors; n2 (namespace skdn, --mode software) is a
// second node whose pods are veths; o3 (namespace skdo, --mode offload)
// is a plain offload node with its own netdevsim eswitch, against which
// h1's pod creation is timed. All four are on an underlay bridge in the
// guest's root namespace, where the controller listens.
//
// What is stood in, and why (docs/kernelvm.md):
//   - the host's VFs: veth pairs, vfN in the host's namespace (the VF
//     netdev, which the dpu-host agent moves into the pod) and dwN in the
//     DPU's (the "wire": a netdevsim representor carries no frames to or
//     from a VF, so the offload datapath moves the wire's frames into the
//     representor's ingress, and sends the endpoint's frames to the wire;
//     a BlueField does this in silicon across PCIe). Both agents find
//     them through --vf-table files (datapath/vftable), the DPU's
//     naming the netdevsim representor of each VF and its wire; o3's
//     VF pods are veths standing in for its netdevsim VFs, as in
//     offloadvm;
//   - udev's naming of representors: the test renames netdevsim's VF
//     representors (phys_port_name pf0vfN) to drN, after each "boot";
//   - a DPU reboot: its agent killed, its netdevsim device deleted (the
//     representors and uplink with it), every other link the DPU's
//     kernel had but the underlay deleted, the wires with them, and so
//     every VF netdev of the host, in its pod or not (the PF's reset),
//     neighbours flushed; then the eswitch re-created in switchdev mode,
//     every VF re-created in the host's namespace (a new netdev, as after
//     a reset), and the DPU's agent started again on its state directory
//     (a DPU's disk survives its reboot). The host's agent keeps running
//     and moves the VFs of running pods back in.
package dpuvm

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

const (
	ipBin = guest.IP
	ctl   = "192.0.2.254:7400"
	// dd is the DPU's namespace, dh its host's, dn the second node's,
	// do the plain offload node's.
	dd, dh, dn, do = "skdd", "skdh", "skdn", "skdo"
	hostPF         = "0000:03:00.0"
	simID          = 140 // the DPU's netdevsim device
	offloadSimID   = 141 // the plain offload node's
	// flowVFs are the VFs TestDPU's flows use (0 and 1); the VFs after
	// them serve the CNI ADD comparison (rig.extra).
	flowVFs = 2
)

// vfPCI is VF i's (made-up) PCI address on the host: functions 2-7 of
// device 0, then on through the next devices' eight functions.
func vfPCI(i int) string { return fmt.Sprintf("0000:03:%02x.%d", (2+i)/8, (2+i)%8) }

type rig struct {
	t   *testing.T
	dir string
	// vfs is how many VFs the host has: flowVFs, then extra for the
	// ADD comparison (the plain offload node has extra VFs too).
	vfs, extra int
	// Sockets of the agents' local APIs.
	sockH, sockN, sockO string
	// offloadPF is the plain offload node's netdevsim uplink.
	offloadPF string
	dpuArgs   []string
	dpu       *guest.Daemon
}

// newRig starts the controller and four agents: h1 (dpu-host), d1 (its
// DPU), n2 (software) and o3 (a plain offload node: its own netdevsim
// eswitch, pods whose veths stand in for its VFs, as in offloadvm), with
// extra VFs on h1 and o3 beyond the flows' two.
func newRig(t *testing.T, extra int) *rig {
	guest.Require(t)
	r := &rig{t: t, dir: t.TempDir(), vfs: flowVFs + extra, extra: extra}
	guest.UnderlayBridge(t, "skdbr", "192.0.2.254/24")
	guest.StartIn(t, "", "skiff-controller", "--listen", ctl, "--data-dir", filepath.Join(r.dir, "etcd"))
	testkit.Eventually(t, "controller up", 90*time.Second, func() (bool, string) {
		out, err := r.skiffctl("get", "nodes")
		return err == nil, out
	})
	for ns, ip := range map[string]string{dd: "192.0.2.11", dh: "192.0.2.10", dn: "192.0.2.2", do: "192.0.2.3"} {
		guest.AddNetns(t, ns)
		guest.Run(t, ipBin, "link", "add", "u"+ns, "type", "veth", "peer", "name", "eth0", "netns", ns)
		t.Cleanup(func() { _ = exec.Command(ipBin, "link", "del", "u"+ns).Run() })
		guest.Run(t, ipBin, "link", "set", "u"+ns, "master", "skdbr", "up")
		guest.In(t, ns, ipBin, "addr", "add", ip+"/24", "dev", "eth0")
		guest.In(t, ns, ipBin, "link", "set", "eth0", "up")
	}
	var hostTab, dpuTab []map[string]any
	for i := range r.vfs {
		r.plugVF(i)
		hostTab = append(hostTab, map[string]any{"pf": hostPF, "index": i, "pci": vfPCI(i), "netdev": fmt.Sprintf("vf%d", i)})
		dpuTab = append(dpuTab, map[string]any{"pf": hostPF, "index": i, "netdev": fmt.Sprintf("dr%d", i), "wire": fmt.Sprintf("dw%d", i)})
	}
	r.bootEswitch()
	r.offloadPF = guest.SwitchdevEswitch(t, do, offloadSimID, extra)
	r.sockH, r.sockN, r.sockO = filepath.Join(r.dir, "h1.sock"), filepath.Join(r.dir, "n2.sock"), filepath.Join(r.dir, "o3.sock")
	r.dpuArgs = []string{"--controller", ctl, "--node", "d1", "--underlay-ip", "192.0.2.11", "--state-dir", filepath.Join(r.dir, "d1.state"),
		"--socket", filepath.Join(r.dir, "d1.sock"), "--mode", "dpu", "--vf-table", r.table("d1", dpuTab)}
	r.dpu = guest.StartIn(t, dd, "skiff-agent", r.dpuArgs...)
	guest.StartIn(t, dh, "skiff-agent", "--controller", ctl, "--node", "h1", "--underlay-ip", "192.0.2.10",
		"--state-dir", filepath.Join(r.dir, "h1.state"), "--socket", r.sockH, "--mode", "dpu-host", "--dpu", "d1", "--vf-table", r.table("h1", hostTab))
	guest.StartIn(t, dn, "skiff-agent", "--controller", ctl, "--node", "n2", "--underlay-ip", "192.0.2.2",
		"--state-dir", filepath.Join(r.dir, "n2.state"), "--socket", r.sockN, "--mode", "software")
	guest.StartIn(t, do, "skiff-agent", "--controller", ctl, "--node", "o3", "--underlay-ip", "192.0.2.3",
		"--state-dir", filepath.Join(r.dir, "o3.state"), "--socket", r.sockO, "--mode", "offload")
	testkit.Eventually(t, "four nodes registered", 60*time.Second, func() (bool, string) {
		out, err := r.skiffctl("get", "nodes", "-o", "json")
		return err == nil && strings.Count(out, `"underlayIp"`) == 4, out
	})
	r.mustCtl("network", "create", "blue", "--vni", "100")
	r.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")
	testkit.Eventually(t, "h1 ready (its DPU connected)", 60*time.Second, func() (bool, string) {
		_, _, err := r.cni("STATUS", pod{sock: r.sockH})
		return err == nil, fmt.Sprint(err)
	})
	return r
}

// bootEswitch makes the DPU's netdevsim eswitch in switchdev mode, its
// VF representors named drN (as udev would name them).
func (r *rig) bootEswitch() {
	guest.SwitchdevEswitch(r.t, dd, simID, r.vfs)
	reps := guest.Representors(r.t, dd)
	for i := range r.vfs {
		rep, ok := reps[fmt.Sprintf("pf0vf%d", i)]
		if !ok {
			r.t.Fatalf("no representor of VF %d in %s: %v", i, dd, reps)
		}
		guest.In(r.t, dd, ipBin, "link", "set", rep, "name", fmt.Sprintf("dr%d", i))
	}
}

// plugVF makes the host's VF i: vfN in the host's namespace, its wire dwN
// in the DPU's.
func (r *rig) plugVF(i int) {
	guest.In(r.t, dh, ipBin, "link", "add", fmt.Sprintf("vf%d", i), "type", "veth", "peer", "name", fmt.Sprintf("dw%d", i), "netns", dd)
	guest.In(r.t, dd, ipBin, "link", "set", fmt.Sprintf("dw%d", i), "up")
}

// reboot stands in for a DPU reboot (see the package comment): every
// kernel object of the DPU but its underlay is gone, the eswitch comes
// back in switchdev mode, and the PF's reset re-creates every VF of the
// host: each VF netdev is destroyed where it is (in its pod or in the
// host) and a new one appears in the host's namespace. The DPU's agent
// must be stopped; the host's keeps running.
func (r *rig) reboot() {
	t := r.t
	if err := os.WriteFile("/sys/bus/netdevsim/del_device", fmt.Appendf(nil, "%d", simID), 0); err != nil {
		t.Fatalf("netdevsim del_device %d: %v", simID, err)
	}
	for name := range links(t, dd) {
		switch {
		case name == "lo" || name == "eth0":
		default:
			// A veth pair goes with either end.
			_ = exec.Command(ipBin, "netns", "exec", dd, ipBin, "link", "del", name).Run()
		}
	}
	guest.In(t, dd, ipBin, "neigh", "flush", "all")
	if ls := links(t, dd); len(ls) != 2 {
		t.Fatalf("the DPU kept links through its reboot: %v", ls)
	}
	for name := range links(t, dh) {
		if strings.HasPrefix(name, "vf") {
			t.Fatalf("VF %s outlived its wire in the host", name)
		}
	}
	r.bootEswitch()
	for i := range r.vfs {
		r.plugVF(i)
	}
}

func (r *rig) startDPU() { r.dpu = guest.StartIn(r.t, dd, "skiff-agent", r.dpuArgs...) }

func (r *rig) stopDPU(sig syscall.Signal) { r.dpu.Signal(sig) }

func (r *rig) table(node string, vfs []map[string]any) string {
	b, err := json.Marshal(map[string]any{"vfs": vfs})
	if err != nil {
		r.t.Fatal(err)
	}
	p := filepath.Join(r.dir, node+".vfs.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		r.t.Fatal(err)
	}
	return p
}

func (r *rig) skiffctl(args ...string) (string, error) {
	return guest.Ctl{T: r.t, Addr: ctl}.Run(args...)
}

func (r *rig) mustCtl(args ...string) string {
	r.t.Helper()
	return guest.Ctl{T: r.t, Addr: ctl}.Must(args...)
}

// pod is one CNI invocation's identity.
type pod struct {
	id, netns string
	sock      string // the node's agent
	vf        int    // the host's VF index; -1: a veth pod
}

// cni runs the real skiff-cni and returns its stdout (or the error with
// both outputs) and how long it took.
func (r *rig) cni(cmd string, p pod) (string, time.Duration, error) {
	conf := fmt.Sprintf(`{"cniVersion": "1.1.0", "name": "blue", "type": "skiff-cni", "network": "blue", "socket": %q`, p.sock)
	if p.vf >= 0 && p.id != "" {
		conf += fmt.Sprintf(`, "deviceID": %q`, vfPCI(p.vf))
	}
	conf += "}"
	out, took, err := guest.CNI(r.t, cmd, conf, "CNI_CONTAINERID="+p.id, "CNI_NETNS="+p.netns, "CNI_IFNAME=eth0")
	if err != nil {
		// The agent's message, as the CNI result's JSON quotes it.
		err = fmt.Errorf("%s", strings.ReplaceAll(err.Error(), `\"`, `"`))
	}
	return out, took, err
}

// add runs ADD and returns the pod's address and how long it took.
func (r *rig) add(p pod) (string, time.Duration) {
	r.t.Helper()
	out, took, err := r.cni("ADD", p)
	if err != nil {
		r.t.Fatal(err)
	}
	var res struct{ IPs []struct{ Address string } }
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.IPs) == 0 {
		r.t.Fatalf("skiff-cni ADD %s: result %q: %v", p.id, out, err)
	}
	return strings.Split(res.IPs[0].Address, "/")[0], took
}

// link is a netdev as `ip -j link show` reports it.
type link struct {
	Name  string `json:"ifname"`
	Alias string `json:"ifalias"`
}

// links lists a namespace's links by iproute2, independently of the code
// under test; a dump the kernel interrupted is read again.
func links(t *testing.T, ns string) map[string]link {
	t.Helper()
	for attempt := 0; ; attempt++ {
		c := exec.Command(ipBin, "netns", "exec", ns, ipBin, "-j", "link", "show")
		var stderr strings.Builder
		c.Stderr = &stderr
		out, err := c.Output()
		if err != nil {
			t.Fatalf("ip -j link show in %s: %v\n%s", ns, err, stderr.String())
		}
		if strings.Contains(stderr.String(), "Dump was interrupted") && attempt < 10 {
			continue
		}
		var ls []link
		if err := json.Unmarshal(out, &ls); err != nil {
			t.Fatalf("ip -j link: %v\n%s", err, out)
		}
		m := map[string]link{}
		for _, l := range ls {
			m[l.Name] = l
		}
		return m
	}
}
