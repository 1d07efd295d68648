// Package vmportvm runs VM ports on offload nodes in the kernel VM: the
// real controller and agents, nodes as network namespaces on an underlay
// bridge, two offload nodes with netdevsim eswitches in switchdev mode and
// a software node.
//
// What is stood in, and why:
//   - the guest behind a tap port is a network namespace whose eth0 is
//     joined to the tap by guest.TapGuest (a frame pump attached to the tap
//     as qemu's tap backend attaches): qemu cannot run inside this VM at a
//     usable speed. A real qemu guest on a tap port runs on the host in
//     test/e2e (TestVMPortGuest).
//   - the VF of a vfio port is netdevsim's VF 0 (its settings through the
//     PF and its representor pf0vf0 are real), but netdevsim VFs are not
//     PCI functions: n1's agent reads sysfs through a tree
//     (sysfstest.Tree) that shows the VM's virtio-rng PCI function as
//     that VF's virtfn0. Binding to vfio-pci and back, and the IOMMU
//     group, are the kernel's, on that function. A guest using the VF,
//     and rules in hardware, need a real SR-IOV NIC: not shown.
package vmportvm

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/offload/eswitch/sysfstest"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

const ipBin = guest.IP

type node struct {
	name, ns, ip, sock string
	pf                 string // the netdevsim uplink (offload nodes)
	args               []string
	agent              *guest.Daemon
}

type portJSON struct {
	Name   string            `json:"name"`
	Node   string            `json:"node"`
	Kind   string            `json:"kind"`
	Mac    string            `json:"mac"`
	Ips    []string          `json:"ips"`
	Owner  string            `json:"owner"`
	Labels map[string]string `json:"labels"`
	PF     string            `json:"pf"`
	VF     *int              `json:"vfIndex"`
	Port   struct {
		HostIf     string `json:"hostIf"`
		PciAddress string `json:"pciAddress"`
		VfioGroup  string `json:"vfioGroup"`
		Ready      bool   `json:"ready"`
		Error      string `json:"error"`
	} `json:"port"`
	OffloadRules []struct {
		Device, Kind, Rule, State, Reason string
	} `json:"offloadRules"`
}

type rig struct {
	t     *testing.T
	ctl   string
	nodes map[string]*node
}

func (r *rig) skiffctl(args ...string) (string, error) {
	return guest.Ctl{T: r.t, Addr: r.ctl}.Run(args...)
}

func (r *rig) mustCtl(args ...string) string {
	r.t.Helper()
	return guest.Ctl{T: r.t, Addr: r.ctl}.Must(args...)
}

func (r *rig) port(args ...string) portJSON {
	r.t.Helper()
	var p portJSON
	out := r.mustCtl(append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		r.t.Fatalf("skiffctl %v: %v\n%s", args, err, out)
	}
	return p
}

// vfFixture writes the sysfs tree n1's agent reads: class/net shows the
// node's representors as they are and its netdevsim uplink as a PF whose
// virtfn0 is the VM's virtio-rng PCI function; bus/pci leads to the real
// functions and drivers, so binding goes to the kernel.
func vfFixture(t *testing.T, n *node, id int, pci string) string {
	tr := sysfstest.New(t)
	read := func(attr string) string {
		return strings.TrimSpace(guest.In(t, n.ns, "/bin/cat", "/sys/class/net/"+n.pf+"/"+attr))
	}
	dev := fmt.Sprintf("devices/netdevsim%d", id)
	tr.Mkdir(dev)
	tr.RelLink(dev+"/subsystem", "bus/netdevsim")
	tr.Link(dev+"/virtfn0", "/sys/bus/pci/devices/"+pci)
	tr.Write("class/net/"+n.pf+"/phys_switch_id", read("phys_switch_id"))
	tr.Write("class/net/"+n.pf+"/phys_port_name", read("phys_port_name"))
	tr.RelLink("class/net/"+n.pf+"/device", dev)
	for _, rep := range guest.Representors(t, n.ns) {
		tr.Link("class/net/"+rep, "/sys/class/net/"+rep)
	}
	tr.Link("bus/pci/devices/"+pci, "/sys/bus/pci/devices/"+pci)
	tr.Link("bus/pci/drivers", "/sys/bus/pci/drivers")
	tr.Link("bus/pci/drivers_probe", "/sys/bus/pci/drivers_probe")
	return tr.Root
}

func pciDriver(t *testing.T, addr string) string {
	l, err := os.Readlink("/sys/bus/pci/devices/" + addr + "/driver")
	if err != nil {
		return ""
	}
	return filepath.Base(l)
}

// newRig starts the controller and three agents: n1 and n2 offload, n3
// software. n1 reads sysfs through vfFixture.
func newRig(t *testing.T, rng string) *rig {
	dir := t.TempDir()
	guest.UnderlayBridge(t, "skvpbr", "192.0.2.254/24")
	r := &rig{t: t, ctl: "192.0.2.254:7400", nodes: map[string]*node{}}
	guest.StartIn(t, "", "skiff-controller", "--listen", r.ctl, "--data-dir", filepath.Join(dir, "etcd"))
	testkit.Eventually(t, "controller up", 90*time.Second, func() (bool, string) {
		out, err := r.skiffctl("get", "nodes")
		return err == nil, out
	})
	for i, name := range []string{"n1", "n2", "n3"} {
		n := &node{name: name, ns: "skvpn" + name[1:], ip: fmt.Sprintf("192.0.2.%d", i+1), sock: filepath.Join(dir, name+".sock")}
		r.nodes[name] = n
		guest.AddNetns(t, n.ns)
		guest.Run(t, ipBin, "link", "add", "u"+n.ns, "type", "veth", "peer", "name", "eth0", "netns", n.ns)
		guest.Run(t, ipBin, "link", "set", "u"+n.ns, "master", "skvpbr", "up")
		guest.In(t, n.ns, ipBin, "addr", "add", n.ip+"/24", "dev", "eth0")
		guest.In(t, n.ns, ipBin, "link", "set", "eth0", "up")
		mode := "software"
		if name != "n3" {
			mode = "offload"
			n.pf = guest.SwitchdevEswitch(t, n.ns, 71+i, 2)
		}
		n.args = []string{"--controller", r.ctl, "--node", n.name, "--underlay-ip", n.ip, "--state-dir", filepath.Join(dir, name+".state"),
			"--socket", n.sock, "--mode", mode, "--stats-interval", "1s", "--metrics-addr", n.ip + ":9100"}
		if name == "n1" {
			n.args = append(n.args, "--sys-root", vfFixture(t, n, 71, rng))
		}
		n.agent = guest.StartIn(t, n.ns, "skiff-agent", n.args...)
	}
	testkit.Eventually(t, "three nodes registered", 60*time.Second, func() (bool, string) {
		out, err := r.skiffctl("get", "nodes", "-o", "json")
		return err == nil && strings.Count(out, `"underlayIp"`) == 3, out
	})
	return r
}

// dhcpScript is udhcpc's script in a guest namespace: it configures the
// lease and writes it down.
const dhcpScript = `#!/bin/sh
case "$1" in
bound|renew)
	ip addr add $ip/$mask dev $interface
	[ -n "$mtu" ] && ip link set $interface mtu $mtu
	[ -n "$router" ] && ip route add default via $router
	echo "ip=$ip/$mask router=$router mtu=$mtu dns=$dns" > "$LEASE"
	;;
esac
`

// dhcp runs busybox udhcpc in a guest namespace and returns the lease.
func dhcp(t *testing.T, guestNS string) string {
	t.Helper()
	dir := t.TempDir()
	script, lease := filepath.Join(dir, "dhcp.sh"), filepath.Join(dir, "lease")
	if err := os.WriteFile(script, []byte(dhcpScript), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(ipBin, "netns", "exec", guestNS, "/bin/udhcpc", "-i", "eth0", "-f", "-q", "-n", "-t", "20", "-T", "1", "-O", "mtu", "-s", script)
	cmd.Env = append(os.Environ(), "LEASE="+lease)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("udhcpc in %s: %v\n%s", guestNS, err, out)
	}
	b, err := os.ReadFile(lease)
	if err != nil {
		t.Fatalf("no lease in %s: %v", guestNS, err)
	}
	return strings.TrimSpace(string(b))
}

// tcp sends 256 KiB from namespace from to a listener at to:5201 in
// namespace toNS; all must arrive.
func tcp(t *testing.T, from, toNS, to string) {
	t.Helper()
	const size = 256 << 10
	if n := guest.TCPTransfer(t, from, toNS, to, size); n != size {
		t.Fatalf("TCP %s -> %s: %d of %d bytes", from, to, n, size)
	}
}
