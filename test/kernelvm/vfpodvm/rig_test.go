// Package vfpodvm runs pods with SR-IOV VFs in the kernel VM: the real
// controller, two agents and the real skiff-cni binary. Node n1 is the
// VM's root namespace (offload mode) with four netdevsim PFs in
// switchdev mode, four VFs each; node n2 is a network namespace on the
// underlay bridge (software mode) whose pods are veths.
//
// What is stood in, and why (docs/kernelvm.md):
//   - netdevsim VFs have no netdev and are not PCI functions: each VF's
//     netdev is the port of a one-port netdevsim device (which the kernel
//     moves between namespaces and gives back to the init namespace when
//     a namespace dies, as it does a VF's), mapped to PCI function
//     0000:7f:<pf>.<vf> by offload/vf/vftest's sysfs overlay, which n1's
//     agent reads (--sys-root). The PFs, their eswitch modes, the VF
//     settings set through the PFs and the representors are netdevsim's
//     own.
//   - a netdevsim representor carries no frames to or from its VF. For
//     the traffic test, the VF's stand-in is linked (netdevsim
//     link_device) to a second netdevsim port in the host, the "wire",
//     named as the endpoint's Port.Target: the offload datapath moves the
//     wire's frames into the representor's ingress (where the pod's
//     encap rules are) and sends the pod's frames to the wire. A NIC does
//     this in silicon.
//   - the kubelet's pod resources API is served by the test
//     (podresources/podrestest) on a socket given to skiff-cni.
package vfpodvm

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	api "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/skiff-sdn/skiff/deviceplugin/podresources/podrestest"
	"github.com/skiff-sdn/skiff/offload/vf"
	"github.com/skiff-sdn/skiff/offload/vf/vftest"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

const ipBin = guest.IP

// kubelet answers the pod resources API's List.
type kubelet struct {
	api.UnimplementedPodResourcesListerServer
	pods []*api.PodResources
}

func (k *kubelet) List(context.Context, *api.ListPodResourcesRequest) (*api.ListPodResourcesResponse, error) {
	return &api.ListPodResourcesResponse{PodResources: k.pods}, nil
}

type rig struct {
	t        *testing.T
	dir, ctl string
	pfs      []*vftest.VFs
	refs     []vf.Ref // every VF, PF by PF
	homes    []string // VF i's home name
	sock1    string   // n1's agent (root namespace, offload)
	sock2    string   // n2's agent (namespace skvfn2, software)
	podres   string   // the stand-in kubelet's pod resources socket
	agent1   *guest.Daemon
}

func newRig(t *testing.T, pods []*api.PodResources) *rig {
	guest.Require(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r := &rig{t: t, dir: t.TempDir(), ctl: "192.0.2.254:7400"}
	guest.UnderlayBridge(t, "skvfbr", "192.0.2.254/24")
	guest.StartIn(t, "", "skiff-controller", "--listen", r.ctl, "--data-dir", filepath.Join(r.dir, "etcd"))
	testkit.Eventually(t, "controller up", 90*time.Second, func() (bool, string) {
		out, err := r.skiffctl("get", "nodes")
		return err == nil, out
	})
	r.pfs = vftest.NewPFs(t, []int{81, 82, 83, 84}, 4, 91, "vfp", log)
	for _, p := range r.pfs {
		r.refs = append(r.refs, p.Refs...)
		r.homes = append(r.homes, p.Homes...)
	}
	r.podres = podrestest.Serve(t, &kubelet{pods: pods})
	r.sock1, r.sock2 = filepath.Join(r.dir, "n1.sock"), filepath.Join(r.dir, "n2.sock")
	r.agent1 = guest.StartIn(t, "", "skiff-agent", "--controller", r.ctl, "--node", "n1", "--underlay-ip", "192.0.2.254",
		"--state-dir", filepath.Join(r.dir, "n1.state"), "--socket", r.sock1, "--mode", "offload", "--sys-root", r.pfs[0].Root,
		"--stats-interval", "1s")
	guest.AddNetns(t, "skvfn2")
	guest.Run(t, ipBin, "link", "add", "uskvfn2", "type", "veth", "peer", "name", "eth0", "netns", "skvfn2")
	t.Cleanup(func() { _ = exec.Command(ipBin, "link", "del", "uskvfn2").Run() })
	guest.Run(t, ipBin, "link", "set", "uskvfn2", "master", "skvfbr", "up")
	guest.In(t, "skvfn2", ipBin, "addr", "add", "192.0.2.2/24", "dev", "eth0")
	guest.In(t, "skvfn2", ipBin, "link", "set", "eth0", "up")
	guest.StartIn(t, "skvfn2", "skiff-agent", "--controller", r.ctl, "--node", "n2", "--underlay-ip", "192.0.2.2",
		"--state-dir", filepath.Join(r.dir, "n2.state"), "--socket", r.sock2, "--mode", "software", "--stats-interval", "1s")
	testkit.Eventually(t, "two nodes registered", 60*time.Second, func() (bool, string) {
		out, err := r.skiffctl("get", "nodes", "-o", "json")
		return err == nil && strings.Count(out, `"underlayIp"`) == 2, out
	})
	r.mustCtl("network", "create", "blue", "--vni", "100")
	r.mustCtl("subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24")
	return r
}

func (r *rig) skiffctl(args ...string) (string, error) {
	return guest.Ctl{T: r.t, Addr: r.ctl}.Run(args...)
}

func (r *rig) mustCtl(args ...string) string {
	r.t.Helper()
	return guest.Ctl{T: r.t, Addr: r.ctl}.Must(args...)
}

// cniResult is what skiff-cni ADD prints (the parts checked).
type cniResult struct {
	Interfaces []struct {
		Name, Mac, Sandbox string
		Mtu                int
	}
	IPs []struct {
		Address, Gateway string
	}
}

// pod is one CNI invocation's identity.
type pod struct {
	id, netns, ifName string
	sock              string // the node's agent
	args              string // CNI_ARGS
	extra             string // more configuration keys (`"deviceID": "..."`)
}

// cni runs the real skiff-cni with the pod's configuration and returns
// its stdout (or the error and both outputs) and how long it took.
func (r *rig) cni(cmd string, p pod) (string, time.Duration, error) {
	conf := fmt.Sprintf(`{"cniVersion": "1.1.0", "name": "blue", "type": "skiff-cni", "network": "blue", "socket": %q, "podResourcesSocket": %q%s}`,
		p.sock, r.podres, p.extra)
	return guest.CNI(r.t, cmd, conf, "CNI_CONTAINERID="+p.id, "CNI_NETNS="+p.netns, "CNI_IFNAME="+p.ifName, "CNI_ARGS="+p.args)
}

func (r *rig) add(p pod) (cniResult, time.Duration) {
	r.t.Helper()
	out, took, err := r.cni("ADD", p)
	if err != nil {
		r.t.Fatal(err)
	}
	var res cniResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.IPs) == 0 {
		r.t.Fatalf("skiff-cni ADD %s: result %q: %v", p.id, out, err)
	}
	return res, took
}

func (r *rig) del(p pod) time.Duration {
	r.t.Helper()
	_, took, err := r.cni("DEL", p)
	if err != nil {
		r.t.Fatal(err)
	}
	return took
}

// podNS makes a pod's namespace (its path, for CNI_NETNS).
func podNS(t *testing.T, name string) string {
	t.Helper()
	guest.AddNetns(t, name)
	return "/run/netns/" + name
}

// link is a netdev as `ip -d -j link show` reports it.
type link struct {
	Name      string `json:"ifname"`
	Alias     string `json:"ifalias"`
	MTU       int    `json:"mtu"`
	Address   string `json:"address"`
	OperState string `json:"operstate"`
}

// links lists the links of a namespace ("" the root one) by iproute2,
// independently of the code under test. A dump the kernel interrupted
// (links changed meanwhile: iproute2 says so on stderr) is read again.
func links(t *testing.T, ns string) map[string]link {
	t.Helper()
	args := []string{ipBin, "-d", "-j", "link", "show"}
	if ns != "" {
		args = append([]string{ipBin, "netns", "exec", ns}, args...)
	}
	for attempt := 0; ; attempt++ {
		c := exec.Command(args[0], args[1:]...)
		var stderr strings.Builder
		c.Stderr = &stderr
		out, err := c.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		if strings.Contains(stderr.String(), "Dump was interrupted") && attempt < 10 {
			continue
		}
		var ls []link
		if err := json.Unmarshal(out, &ls); err != nil {
			t.Fatalf("ip -j link: %v\n%s\n%s", err, out, stderr.String())
		}
		m := map[string]link{}
		for _, l := range ls {
			m[l.Name] = l
		}
		return m
	}
}

// vfLine is what `ip link show PF` says of VF idx (its MAC, VLAN, spoof
// check, link state, trust), and its MAC.
func vfLine(t *testing.T, pf string, idx int) (line, mac string) {
	t.Helper()
	for _, l := range strings.Split(guest.Run(t, ipBin, "link", "show", pf), "\n") {
		f := strings.Fields(l)
		if len(f) > 3 && f[0] == "vf" && f[1] == fmt.Sprint(idx) && f[2] == "link/ether" {
			return strings.TrimSpace(l), strings.TrimSuffix(f[3], ",")
		}
	}
	t.Fatalf("PF %s reports no VF %d", pf, idx)
	return "", ""
}

// allHome checks that every VF's netdev is in the root namespace under
// its name, unmarked, and its MAC on the PF is cleared.
func (r *rig) allHome(t *testing.T) {
	t.Helper()
	root := links(t, "")
	for i, ref := range r.refs {
		l, ok := root[r.homes[i]]
		if !ok {
			t.Errorf("VF %s: %s is not in the host namespace", ref.PCI, r.homes[i])
			continue
		}
		if l.Alias != "" {
			t.Errorf("VF %s: %s still has alias %q", ref.PCI, r.homes[i], l.Alias)
		}
		if _, mac := vfLine(t, ref.PF, ref.Index); mac != "00:00:00:00:00:00" {
			t.Errorf("VF %s: MAC on PF %s is %s, want cleared", ref.PCI, ref.PF, mac)
		}
	}
}

// wire links VF i's stand-in netdev with a new netdevsim port in the
// host named target (the endpoint's Port.Target), both up: frames the
// pod sends arrive on the wire, and frames sent to the wire reach the
// pod. The VF must be at home.
func (r *rig) wire(t *testing.T, i, simID int, target string) {
	t.Helper()
	w := guest.NewNetdevsim(t, simID, 1)
	guest.Run(t, ipBin, "link", "set", w.Netdevs(t)[0], "name", target)
	guest.Run(t, ipBin, "link", "set", target, "up")
	fd, err := unix.Open("/proc/self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ifindex := func(name string) int {
		b, err := os.ReadFile("/sys/class/net/" + name + "/ifindex")
		if err != nil {
			t.Fatal(err)
		}
		var n int
		fmt.Sscan(string(b), &n)
		return n
	}
	if err := os.WriteFile("/sys/bus/netdevsim/link_device", fmt.Appendf(nil, "%d:%d %d:%d", fd, ifindex(r.homes[i]), fd, ifindex(target)), 0); err != nil {
		t.Fatalf("netdevsim link_device %s %s: %v", r.homes[i], target, err)
	}
}
