package eswitch

import (
	"fmt"
	"testing"

	"github.com/skiff-sdn/skiff/offload/eswitch/sysfstest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// sysTree is the shared fixture builder (package sysfstest).
type sysTree = sysfstest.Tree

func newTree(t *testing.T) *sysTree { return sysfstest.New(t) }

// devlink is the devlink of a kernel fake's host namespace holding the
// devices of modes ("bus/device" to an eswitch mode: testkit.Devlink);
// a device not there has no eswitch.
func devlink(t *testing.T, modes map[string]string) NetlinkDevlink {
	k, _ := testkit.Devlink(t, modes)
	return NetlinkDevlink{Kernel: k}
}

const (
	cx6Switch = "b8cef6030012a4b0" // shared by both ports of a ConnectX
	bf2Switch = "0c42a10300d1e2f4"
	bf3Switch = "a088c20300f0aa10"
)

// cx6Switchdev: a ConnectX-6 Dx host, port 0 in switchdev mode with 8 VFs
// bound to mlx5_core (netdevs ens1f0v0..7) and representors eth0..eth7
// (pf0vf0..pf0vf7, as named without udev rules); port 1 in legacy mode.
func cx6Switchdev(t *testing.T) (*sysTree, NetlinkDevlink) {
	tr := newTree(t)
	pf0 := tr.PF("0000:03:00.0", 8, 8, "03", "mlx5_core", func(i int) string { return fmt.Sprintf("ens1f0v%d", i) })
	tr.Netdev(pf0, "ens1f0np0", cx6Switch, "p0")
	for i := range 8 {
		// Representors are created in reverse to prove the mapping
		// does not depend on creation order or names.
		tr.Netdev(pf0, fmt.Sprintf("eth%d", 7-i), cx6Switch, fmt.Sprintf("pf0vf%d", i))
	}
	pf1 := tr.PCIDev("0000:03:00.1", "mlx5_core")
	tr.Write(pf1+"/sriov_totalvfs", "8")
	tr.Write(pf1+"/sriov_numvfs", "0")
	tr.Netdev(pf1, "ens1f1np1", cx6Switch, "p1")
	return tr, devlink(t, map[string]string{"pci/0000:03:00.0": "switchdev", "pci/0000:03:00.1": "legacy"})
}

// bluefield: the Arm side of a BlueField in DPU (embedded CPU) mode. Both
// ports p0/p1 are switchdev uplinks of ECPFs 0000:03:00.0/.1 with one
// switch id; host PF representors pf0hpf/pf1hpf; host VF representors
// <vfPrefix>pf0vfN (c1pf0vfN; pf0vfN on older firmware; numVFs on pf0, 2 on pf1); the Arm's own SF representor
// pf0sf0 (BlueField-3 only).
func bluefield(t *testing.T, switchID string, numVFs int, vfPrefix string, sf bool) (*sysTree, NetlinkDevlink) {
	tr := newTree(t)
	for pfn := range 2 {
		dev := tr.PCIDev(fmt.Sprintf("0000:03:00.%d", pfn), "mlx5_core")
		tr.Write(dev+"/sriov_totalvfs", "0")
		tr.Write(dev+"/sriov_numvfs", "0")
		tr.Netdev(dev, fmt.Sprintf("p%d", pfn), switchID, fmt.Sprintf("p%d", pfn))
		tr.Netdev(dev, fmt.Sprintf("pf%dhpf", pfn), switchID, fmt.Sprintf("pf%dhpf", pfn))
		n := numVFs
		if pfn == 1 {
			n = 2
		}
		for i := range n {
			name := fmt.Sprintf("pf%dvf%d", pfn, i)
			tr.Netdev(dev, name, switchID, fmt.Sprintf("%spf%dvf%d", vfPrefix, pfn, i))
		}
		if sf && pfn == 0 {
			tr.Netdev(dev, "en3f0pf0sf0", switchID, "pf0sf0")
		}
	}
	// The management interface of the Arm cores: no switch port.
	tr.Mkdir("devices/virtual/net/tmfifo_net0")
	tr.RelLink("class/net/tmfifo_net0", "devices/virtual/net/tmfifo_net0")
	return tr, devlink(t, map[string]string{"pci/0000:03:00.0": "switchdev", "pci/0000:03:00.1": "switchdev"})
}
