// Package sysfstest builds sysfs-like trees with real symlinks in a test's
// temporary directory, for tests of eswitch discovery and of what is built
// on it (point eswitch.Options.SysRoot at Tree.Root).
package sysfstest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Tree writes a sysfs-like tree with real symlinks, laid out as the
// kernel lays out /sys:
//
//	devices/pci0000:00/0000:00:02.0/<pf addr>/      PF device (sriov_*, virtfnN -> ../<vf addr>, subsystem, driver)
//	devices/pci0000:00/0000:00:02.0/<pf addr>/net/<name>/   netdev (phys_switch_id, phys_port_name, device -> ../../../<pf addr>)
//	class/net/<name> -> ../../devices/.../net/<name>
//	bus/pci/devices/<addr> -> ../../../devices/.../<addr>
//	bus/pci/drivers/<drv>/
type Tree struct {
	t    testing.TB
	Root string // the directory standing for /sys
}

// PCIParent is the tree path under which PCI devices are created.
const PCIParent = "devices/pci0000:00/0000:00:02.0"

// New makes an empty tree (class/net, bus/pci, bus/netdevsim) in a
// temporary directory of t.
func New(t testing.TB) *Tree {
	t.Helper()
	tr := &Tree{t: t, Root: t.TempDir()}
	tr.Mkdir("class/net")
	tr.Mkdir("bus/pci/devices")
	tr.Mkdir("bus/netdevsim/devices")
	return tr
}

// Mkdir creates a directory of the tree and returns its full path.
func (tr *Tree) Mkdir(rel string) string {
	tr.t.Helper()
	p := filepath.Join(tr.Root, rel)
	if err := os.MkdirAll(p, 0o755); err != nil {
		tr.t.Fatal(err)
	}
	return p
}

// Write writes an attribute file (content plus a newline, as sysfs shows it).
func (tr *Tree) Write(rel, content string) {
	tr.t.Helper()
	p := filepath.Join(tr.Root, rel)
	tr.Mkdir(filepath.Dir(rel))
	if err := os.WriteFile(p, []byte(content+"\n"), 0o644); err != nil {
		tr.t.Fatal(err)
	}
}

// link makes rel a symlink whose target is target (relative to rel's dir,
// as sysfs links are).
func (tr *Tree) Link(rel, target string) {
	tr.t.Helper()
	p := filepath.Join(tr.Root, rel)
	tr.Mkdir(filepath.Dir(rel))
	_ = os.Remove(p)
	if err := os.Symlink(target, p); err != nil {
		tr.t.Fatal(err)
	}
}

// relLink links rel to the tree path to, with a relative target.
func (tr *Tree) RelLink(rel, to string) {
	tr.t.Helper()
	target, err := filepath.Rel(filepath.Dir(filepath.Join(tr.Root, rel)), filepath.Join(tr.Root, to))
	if err != nil {
		tr.t.Fatal(err)
	}
	tr.Link(rel, target)
}

// pciDev creates a PCI device bound to driver (none when empty) and
// returns its tree path.
func (tr *Tree) PCIDev(addr, driver string) string {
	dev := PCIParent + "/" + addr
	tr.Mkdir(dev)
	tr.RelLink(dev+"/subsystem", "bus/pci")
	tr.RelLink("bus/pci/devices/"+addr, dev)
	if driver != "" {
		tr.Mkdir("bus/pci/drivers/" + driver)
		tr.RelLink(dev+"/driver", "bus/pci/drivers/"+driver)
	}
	return dev
}

// netdev creates a netdev of device dev. Empty switchID/portName leave the
// attribute out (the kernel answers EOPNOTSUPP for them).
func (tr *Tree) Netdev(dev, name, switchID, portName string) {
	nd := dev + "/net/" + name
	tr.Mkdir(nd)
	tr.RelLink(nd+"/device", dev)
	if switchID != "" {
		tr.Write(nd+"/phys_switch_id", switchID)
	}
	if portName != "" {
		tr.Write(nd+"/phys_port_name", portName)
	}
	tr.RelLink("class/net/"+name, nd)
}

// pf creates an SR-IOV PF device with numVFs VFs (PCI addresses from
// vfBase, function numbers counting up) bound to vfDriver; VF netdevs are
// named by vfNetdev (no netdev when it returns "").
func (tr *Tree) PF(addr string, total, numVFs int, vfBus string, vfDriver string, vfNetdev func(i int) string) string {
	dev := tr.PCIDev(addr, "mlx5_core")
	tr.Write(dev+"/sriov_totalvfs", fmt.Sprint(total))
	tr.Write(dev+"/sriov_numvfs", fmt.Sprint(numVFs))
	for i := range numVFs {
		vfAddr := fmt.Sprintf("0000:%s:%02x.%d", vfBus, (i+2)/8, (i+2)%8)
		vf := tr.PCIDev(vfAddr, vfDriver)
		tr.RelLink(vf+"/physfn", dev)
		tr.RelLink(fmt.Sprintf("%s/virtfn%d", dev, i), vf)
		if n := vfNetdev(i); n != "" {
			tr.Netdev(vf, n, "", "")
		}
	}
	return dev
}

// Remove deletes a netdev of device dev (its class/net link and its
// directory), as the kernel does when a representor goes away.
func (tr *Tree) Remove(dev, name string) {
	tr.t.Helper()
	for _, p := range []string{"class/net/" + name, dev + "/net/" + name} {
		if err := os.RemoveAll(filepath.Join(tr.Root, p)); err != nil {
			tr.t.Fatal(err)
		}
	}
}

// Virtual creates a netdev without a device (lo, bridges, tmfifo_net0).
func (tr *Tree) Virtual(name string) {
	tr.t.Helper()
	tr.Mkdir("devices/virtual/net/" + name)
	tr.RelLink("class/net/"+name, "devices/virtual/net/"+name)
}
