// Package sysfstest builds sysfs-like trees with real symlinks in a test's
// temporary directory, for tests of eswitch discovery and of what is built
// on it (point eswitch.Options.SysRoot at Tree.Root).
package sysfstest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	return At(t, t.TempDir())
}

// At makes an empty tree at root (created when missing) rather than in a
// temporary directory of t: for a tree that must be in a given place,
// such as a test cluster node's directory. Whoever owns root removes it.
func At(t testing.TB, root string) *Tree {
	t.Helper()
	tr := &Tree{t: t, Root: root}
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
		vf := tr.PCIDev(VFAddr(vfBus, i), vfDriver)
		tr.RelLink(vf+"/physfn", dev)
		tr.RelLink(fmt.Sprintf("%s/virtfn%d", dev, i), vf)
		if n := vfNetdev(i); n != "" {
			tr.Netdev(vf, n, "", "")
		}
	}
	return dev
}

// VFAddr is the PCI address PF gives VF i on bus vfBus
// (0000:<bus>:00.2 for VF 0, functions counting up).
func VFAddr(vfBus string, i int) string {
	return fmt.Sprintf("0000:%s:%02x.%d", vfBus, (i+2)/8, (i+2)%8)
}

// PCIAttrs writes the PCI identity of the first n VFs PF made on bus:
// vendor and device IDs (4 hex digits, written 0x-prefixed as sysfs
// shows them) and NUMA node.
func (tr *Tree) PCIAttrs(bus string, n int, vendor, device string, numa int) {
	tr.t.Helper()
	for i := range n {
		dir := PCIParent + "/" + VFAddr(bus, i)
		tr.Write(dir+"/vendor", "0x"+vendor)
		tr.Write(dir+"/device", "0x"+device)
		tr.Write(dir+"/numa_node", fmt.Sprint(numa))
	}
}

// ConnectX6SwitchID is the phys_switch_id prefix of ConnectX6's PFs (the
// last two hex digits are the bus).
const ConnectX6SwitchID = "b8cef6030012a4b0"

// ConnectX6 adds the sysfs side of a ConnectX-6 Dx: PF pfName
// (0000:<bus>:00.0, mlx5_core, uplink port p0, link up) with n VFs on
// mlx5_core (vendor 15b3, device 101e, the given NUMA node; netdevs
// pfName without its "np0" and v<i>: ens1f0v0..), and their representors
// <bus>_rep<i> (pf0vf<i>). It returns the PF's device path. The eswitch
// mode is devlink's, not sysfs's: the caller's Devlink says it.
func (tr *Tree) ConnectX6(bus, pfName string, n, numa int) string {
	tr.t.Helper()
	base := strings.TrimSuffix(pfName, "np0")
	pf := tr.PF("0000:"+bus+":00.0", 8, n, bus, "mlx5_core", func(i int) string { return fmt.Sprintf("%sv%d", base, i) })
	sw := ConnectX6SwitchID[:14] + bus
	tr.Netdev(pf, pfName, sw, "p0")
	tr.Write("class/net/"+pfName+"/operstate", "up")
	for i := range n {
		tr.Netdev(pf, fmt.Sprintf("%s_rep%d", bus, i), sw, fmt.Sprintf("pf0vf%d", i))
	}
	tr.PCIAttrs(bus, n, "15b3", "101e", numa)
	return pf
}

// RemoveVF makes VF i of the PF at device path pf (made by PF on bus)
// disappear as a hot-unplugged function does: its netdev's class/net
// link, the PF's virtfn<i> link, the function's directory and its
// bus/pci/devices link.
func (tr *Tree) RemoveVF(pf, bus string, i int, netdev string) {
	tr.t.Helper()
	for _, p := range []string{
		"class/net/" + netdev,
		fmt.Sprintf("%s/virtfn%d", pf, i),
		PCIParent + "/" + VFAddr(bus, i),
		"bus/pci/devices/" + VFAddr(bus, i),
	} {
		if err := os.RemoveAll(filepath.Join(tr.Root, p)); err != nil {
			tr.t.Fatal(err)
		}
	}
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
