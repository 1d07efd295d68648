package eswitch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// sysTree writes a sysfs-like tree with real symlinks, laid out as the
// kernel lays out /sys:
//
//	devices/pci0000:00/0000:00:02.0/<pf addr>/      PF device (sriov_*, virtfnN -> ../<vf addr>, subsystem, driver)
//	devices/pci0000:00/0000:00:02.0/<pf addr>/net/<name>/   netdev (phys_switch_id, phys_port_name, device -> ../../../<pf addr>)
//	class/net/<name> -> ../../devices/.../net/<name>
//	bus/pci/devices/<addr> -> ../../../devices/.../<addr>
//	bus/pci/drivers/<drv>/
type sysTree struct {
	t    *testing.T
	root string
}

const pciParent = "devices/pci0000:00/0000:00:02.0"

func newTree(t *testing.T) *sysTree {
	t.Helper()
	tr := &sysTree{t: t, root: t.TempDir()}
	tr.mkdir("class/net")
	tr.mkdir("bus/pci/devices")
	tr.mkdir("bus/netdevsim/devices")
	return tr
}

func (tr *sysTree) mkdir(rel string) string {
	tr.t.Helper()
	p := filepath.Join(tr.root, rel)
	if err := os.MkdirAll(p, 0o755); err != nil {
		tr.t.Fatal(err)
	}
	return p
}

func (tr *sysTree) write(rel, content string) {
	tr.t.Helper()
	p := filepath.Join(tr.root, rel)
	tr.mkdir(filepath.Dir(rel))
	if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
		tr.t.Fatal(err)
	}
}

// link makes rel a symlink whose target is target (relative to rel's dir,
// as sysfs links are).
func (tr *sysTree) link(rel, target string) {
	tr.t.Helper()
	p := filepath.Join(tr.root, rel)
	tr.mkdir(filepath.Dir(rel))
	_ = os.Remove(p)
	if err := os.Symlink(target, p); err != nil {
		tr.t.Fatal(err)
	}
}

// relLink links rel to the tree path to, with a relative target.
func (tr *sysTree) relLink(rel, to string) {
	tr.t.Helper()
	target, err := filepath.Rel(filepath.Dir(filepath.Join(tr.root, rel)), filepath.Join(tr.root, to))
	if err != nil {
		tr.t.Fatal(err)
	}
	tr.link(rel, target)
}

// pciDev creates a PCI device bound to driver (none when empty) and
// returns its tree path.
func (tr *sysTree) pciDev(addr, driver string) string {
	dev := pciParent + "/" + addr
	tr.mkdir(dev)
	tr.relLink(dev+"/subsystem", "bus/pci")
	tr.relLink("bus/pci/devices/"+addr, dev)
	if driver != "" {
		tr.mkdir("bus/pci/drivers/" + driver)
		tr.relLink(dev+"/driver", "bus/pci/drivers/"+driver)
	}
	return dev
}

// netdev creates a netdev of device dev. Empty switchID/portName leave the
// attribute out (the kernel answers EOPNOTSUPP for them).
func (tr *sysTree) netdev(dev, name, switchID, portName string) {
	nd := dev + "/net/" + name
	tr.mkdir(nd)
	tr.relLink(nd+"/device", dev)
	if switchID != "" {
		tr.write(nd+"/phys_switch_id", switchID)
	}
	if portName != "" {
		tr.write(nd+"/phys_port_name", portName)
	}
	tr.relLink("class/net/"+name, nd)
}

// pf creates an SR-IOV PF device with numVFs VFs (PCI addresses from
// vfBase, function numbers counting up) bound to vfDriver; VF netdevs are
// named by vfNetdev (no netdev when it returns "").
func (tr *sysTree) pf(addr string, total, numVFs int, vfBus string, vfDriver string, vfNetdev func(i int) string) string {
	dev := tr.pciDev(addr, "mlx5_core")
	tr.write(dev+"/sriov_totalvfs", fmt.Sprint(total))
	tr.write(dev+"/sriov_numvfs", fmt.Sprint(numVFs))
	for i := range numVFs {
		vfAddr := fmt.Sprintf("0000:%s:%02x.%d", vfBus, (i+2)/8, (i+2)%8)
		vf := tr.pciDev(vfAddr, vfDriver)
		tr.relLink(vf+"/physfn", dev)
		tr.relLink(fmt.Sprintf("%s/virtfn%d", dev, i), vf)
		if n := vfNetdev(i); n != "" {
			tr.netdev(vf, n, "", "")
		}
	}
	return dev
}

// fakeDevlink answers eswitch modes from a map keyed by handle; handles
// missing from the map have no eswitch.
type fakeDevlink struct {
	modes map[string]Mode
	sets  []string
}

func (f *fakeDevlink) EswitchMode(_ context.Context, h string) (Mode, error) {
	m, ok := f.modes[h]
	if !ok {
		return ModeNone, fmt.Errorf("devlink %s: %w", h, ErrNoEswitch)
	}
	return m, nil
}

func (f *fakeDevlink) SetEswitchMode(_ context.Context, h string, m Mode) error {
	if _, ok := f.modes[h]; !ok {
		return fmt.Errorf("devlink %s: %w", h, ErrNoEswitch)
	}
	f.modes[h] = m
	f.sets = append(f.sets, h+"="+string(m))
	return nil
}

const (
	cx6Switch = "b8cef6030012a4b0" // shared by both ports of a ConnectX
	bf2Switch = "0c42a10300d1e2f4"
	bf3Switch = "a088c20300f0aa10"
)

// cx6Switchdev: a ConnectX-6 Dx host, port 0 in switchdev mode with 8 VFs
// bound to mlx5_core (netdevs ens1f0v0..7) and representors eth0..eth7
// (pf0vf0..pf0vf7, as named without udev rules); port 1 in legacy mode.
func cx6Switchdev(t *testing.T) (*sysTree, *fakeDevlink) {
	tr := newTree(t)
	pf0 := tr.pf("0000:03:00.0", 8, 8, "03", "mlx5_core", func(i int) string { return fmt.Sprintf("ens1f0v%d", i) })
	tr.netdev(pf0, "ens1f0np0", cx6Switch, "p0")
	for i := range 8 {
		// Representors are created in reverse to prove the mapping
		// does not depend on creation order or names.
		tr.netdev(pf0, fmt.Sprintf("eth%d", 7-i), cx6Switch, fmt.Sprintf("pf0vf%d", i))
	}
	pf1 := tr.pciDev("0000:03:00.1", "mlx5_core")
	tr.write(pf1+"/sriov_totalvfs", "8")
	tr.write(pf1+"/sriov_numvfs", "0")
	tr.netdev(pf1, "ens1f1np1", cx6Switch, "p1")
	return tr, &fakeDevlink{modes: map[string]Mode{"pci/0000:03:00.0": ModeSwitchdev, "pci/0000:03:00.1": ModeLegacy}}
}

// bluefield: the Arm side of a BlueField in DPU (embedded CPU) mode. Both
// ports p0/p1 are switchdev uplinks of ECPFs 0000:03:00.0/.1 with one
// switch id; host PF representors pf0hpf/pf1hpf; host VF representors
// <vfPrefix>pf0vfN (c1pf0vfN; pf0vfN on older firmware; numVFs on pf0, 2 on pf1); the Arm's own SF representor
// pf0sf0 (BlueField-3 only).
func bluefield(t *testing.T, switchID string, numVFs int, vfPrefix string, sf bool) (*sysTree, *fakeDevlink) {
	tr := newTree(t)
	for pfn := range 2 {
		dev := tr.pciDev(fmt.Sprintf("0000:03:00.%d", pfn), "mlx5_core")
		tr.write(dev+"/sriov_totalvfs", "0")
		tr.write(dev+"/sriov_numvfs", "0")
		tr.netdev(dev, fmt.Sprintf("p%d", pfn), switchID, fmt.Sprintf("p%d", pfn))
		tr.netdev(dev, fmt.Sprintf("pf%dhpf", pfn), switchID, fmt.Sprintf("pf%dhpf", pfn))
		n := numVFs
		if pfn == 1 {
			n = 2
		}
		for i := range n {
			name := fmt.Sprintf("pf%dvf%d", pfn, i)
			tr.netdev(dev, name, switchID, fmt.Sprintf("%spf%dvf%d", vfPrefix, pfn, i))
		}
		if sf && pfn == 0 {
			tr.netdev(dev, "en3f0pf0sf0", switchID, "pf0sf0")
		}
	}
	// The management interface of the Arm cores: no switch port.
	tr.mkdir("devices/virtual/net/tmfifo_net0")
	tr.relLink("class/net/tmfifo_net0", "devices/virtual/net/tmfifo_net0")
	return tr, &fakeDevlink{modes: map[string]Mode{"pci/0000:03:00.0": ModeSwitchdev, "pci/0000:03:00.1": ModeSwitchdev}}
}
