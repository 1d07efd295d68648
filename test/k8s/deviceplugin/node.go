package deviceplugin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dp "github.com/skiff-sdn/skiff/deviceplugin"
	"github.com/skiff-sdn/skiff/deviceplugin/podresources"
	"github.com/skiff-sdn/skiff/offload/eswitch/sysfstest"
	"github.com/skiff-sdn/skiff/test/k8s/cluster"
)

// VFs is a node's stood-in SR-IOV NIC: a ConnectX-6 Dx-like sysfs tree
// under the node's directory and stand-in links (veth) in its network
// namespace named as the tree names the PF and VF netdevs.
type VFs struct {
	Node *cluster.Node
	Tree *sysfstest.Tree // the plugin's --sys-root is Tree.Root
	// PF is the PF's netdev (ens1f0np0), PFPCI its PCI address.
	PF, PFPCI string
	// IDs are the VFs' PCI addresses (the device IDs), Netdevs their
	// netdevs, by VF index.
	IDs, Netdevs []string
	bus, pfDev   string
}

// NewVFs gives node n a PF ens1f0np0 (0000:<bus>:00.0) with count VFs:
// the tree in n.Dir/sys and the stand-in links in n's namespace (up), the
// PF's operstate in the tree linked to its stand-in's. They go with the
// node's directory, mounts and namespace when the cluster stops.
func NewVFs(t testing.TB, n *cluster.Node, bus string, count int) *VFs {
	t.Helper()
	v := &VFs{Node: n, Tree: sysfstest.At(t, filepath.Join(n.Dir, "sys")), PF: "ens1f0np0", PFPCI: "0000:" + bus + ":00.0", bus: bus}
	v.pfDev = v.Tree.ConnectX6(bus, v.PF, count, 0)
	links := []string{v.PF}
	for i := range count {
		v.IDs = append(v.IDs, sysfstest.VFAddr(bus, i))
		v.Netdevs = append(v.Netdevs, fmt.Sprintf("ens1f0v%d", i))
		links = append(links, v.Netdevs[i])
	}
	// veth pairs, the host kernel having no dummy module; the peer
	// (p-<name>) stays in the node's namespace, up, so the link's
	// operstate is its own.
	for _, l := range links {
		n.MustRun(t, "ip", "link", "add", l, "type", "veth", "peer", "name", "p-"+l)
		n.MustRun(t, "ip", "link", "set", "p-"+l, "up")
		n.MustRun(t, "ip", "link", "set", l, "up")
	}
	// The PF's operstate is the kernel's, of its stand-in: a sysfs mounted
	// from the node's namespace shows that namespace's links (the
	// cluster unmounts it when it stops).
	netSys := filepath.Join(n.Dir, "netsys")
	if err := os.MkdirAll(netSys, 0o755); err != nil {
		t.Fatal(err)
	}
	n.MustRun(t, "mount", "-t", "sysfs", "sysfs", netSys)
	v.Tree.Link("class/net/"+v.PF+"/operstate", filepath.Join(netSys, "class", "net", v.PF, "operstate"))
	return v
}

// SetPFLink sets the stand-in PF's link down or up (its operstate in
// the tree follows: the plugin's link watch hears the change).
func (v *VFs) SetPFLink(t testing.TB, up bool) {
	t.Helper()
	v.Node.MustRun(t, "ip", "link", "set", v.PF, map[bool]string{true: "up", false: "down"}[up])
}

// Remove makes VF i disappear as a hot-unplugged function does: its
// sysfs entries, then its stand-in netdev (whose deletion is the
// netlink event the plugin's link watch hears).
func (v *VFs) Remove(t testing.TB, i int) {
	t.Helper()
	v.Tree.RemoveVF(v.pfDev, v.bus, i, v.Netdevs[i])
	v.Node.MustRun(t, "ip", "link", "del", v.Netdevs[i])
}

// Index is the VF index of a device ID, -1 when it is none of these VFs.
func (v *VFs) Index(id string) int {
	for i, x := range v.IDs {
		if x == id {
			return i
		}
	}
	return -1
}

// BuildPlugin builds cmd/skiff-deviceplugin into dir and returns its path.
func BuildPlugin(t testing.TB, dir string) string {
	t.Helper()
	Build(t, dir, "skiff-deviceplugin")
	return filepath.Join(dir, "skiff-deviceplugin")
}

// Build builds Skiff's commands (cmd/<name>) from this checkout into dir,
// statically.
func Build(t testing.TB, dir string, names ...string) {
	t.Helper()
	args := []string{"build", "-o", dir + "/"}
	for _, n := range names {
		args = append(args, "github.com/skiff-sdn/skiff/cmd/"+n)
	}
	build := exec.Command("go", args...)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building %v: %v\n%s", names, err, b)
	}
}

// Plugin is skiff-deviceplugin running on a node.
type Plugin struct{ *cluster.Process }

// DevInfoDir is where StartPlugin's plugins write device-info files on
// node n (the machine's /var/run is shared by every node).
func DevInfoDir(n *cluster.Node) string { return filepath.Join(n.Dir, "devinfo") }

// StartPlugin writes config to n.Dir/<name>.yaml and starts bin on node
// n as name (its log is n.LogFile(name)) with --sys-root at v's tree,
// --devinfo-dir DevInfoDir(n), the kubelet's default device plugin
// directory and socket (the node's own, in its mount namespace), and
// args. It is stopped (SIGTERM) when the test ends.
func StartPlugin(t testing.TB, v *VFs, bin, name, config string, args ...string) *Plugin {
	t.Helper()
	n := v.Node
	conf := filepath.Join(n.Dir, name+".yaml")
	if err := os.WriteFile(conf, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(DevInfoDir(n), 0o755); err != nil {
		t.Fatal(err)
	}
	return &Plugin{Process: StartOn(t, n, name, append([]string{bin, "--config", conf, "--sys-root", v.Tree.Root, "--devinfo-dir", DevInfoDir(n)}, args...)...)}
}

// StartOn starts a program on node n as name (cluster.Node.Start), stops
// it when the test ends, and then shows its log if the test failed.
func StartOn(t testing.TB, n *cluster.Node, name string, args ...string) *cluster.Process {
	t.Helper()
	p, err := n.Start(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("---- %s\n%s", name, p.Log())
		}
	})
	return p
}

// Registrations is how many times the plugin's log says a pool
// registered with the kubelet.
func (p *Plugin) Registrations() int { return strings.Count(p.Log(), "registered with the kubelet") }

// PodResourcesSocket is node n's kubelet pod resources socket (its
// /var/lib/kubelet/pod-resources/kubelet.sock), reachable from the test.
func PodResourcesSocket(n *cluster.Node) string {
	return filepath.Join(n.KubeletDir(), "pod-resources", "kubelet.sock")
}

// PodVFs asks node n's kubelet, through its pod resources API with the
// client the CNI uses (deviceplugin/podresources), which devices of
// resource it allocated to pod namespace/name: for skiff.io/vf, the VFs'
// PCI addresses. A CNI test checks the pod's VF against this answer.
func PodVFs(ctx context.Context, n *cluster.Node, namespace, name, resource string) ([]string, error) {
	c, err := podresources.Dial(PodResourcesSocket(n))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.DeviceIDs(ctx, namespace, name, resource)
}

// DevInfo reads the device-info file the plugin wrote on node n for a
// device of resource.
func DevInfo(n *cluster.Node, resource, id string) (dp.DevInfo, error) {
	return dp.ReadDevInfo(dp.DevInfoPath(DevInfoDir(n), resource, id))
}
