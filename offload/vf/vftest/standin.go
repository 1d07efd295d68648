// Package vftest gives kernel VM tests SR-IOV VFs with netdevs, which
// netdevsim alone cannot: a netdevsim PF in switchdev mode (its VF
// settings and representors are real) whose VFs' netdevs are stood in by
// the ports of one-port netdevsim devices, mapped to PCI functions by a
// sysfs overlay tree.
//
// Why netdevsim ports: a port is a device netdev (no rtnl_link_ops), so
// the kernel moves it between namespaces and returns it to the init
// namespace when its namespace is destroyed, as it does a real VF; a veth
// or dummy would be deleted with the namespace instead.
//
// The overlay (point SysRoot options at Root): class/net/<pf> is the
// overlay's, with the real uplink's phys_switch_id and phys_port_name and
// a link to its real operstate; its device devices/netdevsim<ID> has
// sriov_numvfs and virtfnN links to functions 0000:7f:00.N (vendor 15b3,
// device 101e, no NUMA node, a driver link to an overlay directory
// bus/pci/drivers/mlx5_core), whose net/ links to the stand-in device's
// real net/ directory in /sys (so the names sysfs shows, and hides while
// the netdev is in another namespace, are the kernel's); class/net/<rep>
// links to each real representor.
package vftest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/offload/eswitch"
	"github.com/skiff-sdn/skiff/offload/eswitch/sysfstest"
	"github.com/skiff-sdn/skiff/offload/vf"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
)

// VFs is a PF with stood-in VF netdevs.
type VFs struct {
	PF    string   // the netdevsim uplink (PF netdev)
	ID    int      // its netdevsim ID
	Homes []string // VF i's netdev name in the host (sk<prefix><i>)
	Refs  []vf.Ref
	Reps  []string // VF i's representor
	Root  string   // the overlay sysfs tree
	tr    *sysfstest.Tree
}

// New makes netdevsim PF pfID with n VFs (at most 4: netdevsim's limit)
// in switchdev mode in the VM's root namespace, n stand-in devices
// (netdevsim simID..simID+n-1, their ports renamed <prefix>0..), and the
// overlay. Everything is removed when the test ends.
func New(t *testing.T, pfID, n, simID int, prefix string, log *slog.Logger) *VFs {
	t.Helper()
	return add(t, sysfstest.New(t), 0, pfID, n, simID, prefix, 0, log)
}

// NewPFs makes one PF per ID of pfIDs, each with n VFs, in one overlay
// (one node with several PFs): PF i's VF j is PCI function
// 0000:7f:<i>.<j>, its stand-in netdevsim simID+i*n+j named
// <prefix><i*n+j>.
func NewPFs(t *testing.T, pfIDs []int, n, simID int, prefix string, log *slog.Logger) []*VFs {
	t.Helper()
	tr := sysfstest.New(t)
	var out []*VFs
	for i, id := range pfIDs {
		out = append(out, add(t, tr, i, id, n, simID+i*n, prefix, i*n, log))
	}
	return out
}

// add makes PF pfID with n VFs in tr, its functions in PCI slot slot,
// its stand-ins simID.. named <prefix><first>...
func add(t *testing.T, tr *sysfstest.Tree, slot, pfID, n, simID int, prefix string, first int, log *slog.Logger) *VFs {
	t.Helper()
	guest.Require(t)
	ctx := context.Background()
	pf := guest.NewNetdevsim(t, pfID, 1).Netdevs(t)[0]
	es := eswitch.New(eswitch.Options{Logger: log})
	if err := es.SetNumVFs(pf, n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = es.SetNumVFs(pf, 0) })
	if err := es.SetMode(ctx, pf, eswitch.ModeSwitchdev); err != nil {
		t.Fatal(err)
	}
	guest.Run(t, guest.IP, "link", "set", pf, "up") // a PF in use is up
	s := &VFs{PF: pf, ID: pfID, tr: tr}
	s.Root = s.tr.Root
	dev := fmt.Sprintf("devices/netdevsim%d", pfID)
	s.tr.Mkdir(dev)
	s.tr.RelLink(dev+"/subsystem", "bus/netdevsim")
	s.tr.Write(dev+"/sriov_numvfs", fmt.Sprint(n))
	s.tr.Write("class/net/"+pf+"/phys_switch_id", s.read(t, "phys_switch_id"))
	s.tr.Write("class/net/"+pf+"/phys_port_name", s.read(t, "phys_port_name"))
	s.tr.Link("class/net/"+pf+"/operstate", "/sys/class/net/"+pf+"/operstate")
	s.tr.RelLink("class/net/"+pf+"/device", dev)
	for i := range n {
		sim := guest.NewNetdevsim(t, simID+i, 1)
		home := fmt.Sprintf("%s%d", prefix, first+i)
		guest.Run(t, guest.IP, "link", "set", sim.Netdevs(t)[0], "name", home)
		pci := fmt.Sprintf("0000:7f:%02x.%d", slot, i)
		fn := "devices/pci0000:7f/" + pci
		s.tr.Mkdir(fn)
		s.tr.Link(fn+"/net", sim.Dir+"/net")
		s.tr.Write(fn+"/vendor", "0x15b3")
		s.tr.Write(fn+"/device", "0x101e")
		s.tr.Write(fn+"/numa_node", "-1")
		s.tr.Mkdir("bus/pci/drivers/mlx5_core")
		s.tr.RelLink(fn+"/driver", "bus/pci/drivers/mlx5_core")
		s.tr.RelLink(fn+"/physfn", dev)
		s.tr.RelLink(fmt.Sprintf("%s/virtfn%d", dev, i), fn)
		s.tr.RelLink("bus/pci/devices/"+pci, fn)
		s.Homes = append(s.Homes, home)
	}
	s.LinkRepresentors(t)
	node, err := eswitch.New(eswitch.Options{SysRoot: s.Root, Logger: log}).Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := node.PF(pf)
	if err != nil {
		t.Fatalf("%v (problems %v)", err, node.Problems)
	}
	if p.Mode != eswitch.ModeSwitchdev || len(p.VFs) != n {
		t.Fatalf("overlay PF = %+v, problems %v", p, node.Problems)
	}
	for i, v := range p.VFs {
		if v.Netdev != s.Homes[i] || v.Representor == "" {
			t.Fatalf("VF %d = %+v: want netdev %s and a representor", i, v, s.Homes[i])
		}
		s.Reps = append(s.Reps, v.Representor)
	}
	for _, r := range vf.RefsOf(node) {
		if r.PF == pf {
			s.Refs = append(s.Refs, r)
		}
	}
	return s
}

func (s *VFs) read(t *testing.T, attr string) string {
	t.Helper()
	b, err := os.ReadFile("/sys/class/net/" + s.PF + "/" + attr)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// LinkRepresentors makes the overlay's class/net show the PF's
// representors as they are now (after an eswitch mode change the kernel
// makes new ones; the overlay is a static tree and must be told). Other
// PFs' entries in a shared overlay are left alone.
func (s *VFs) LinkRepresentors(t *testing.T) {
	t.Helper()
	sw := s.read(t, "phys_switch_id")
	old, _ := filepath.Glob(filepath.Join(s.Root, "class/net/*"))
	for _, p := range old {
		target, err := os.Readlink(p)
		if filepath.Base(p) == s.PF || (err == nil && !strings.HasPrefix(target, "/sys/class/net/")) {
			continue
		}
		rsw, rerr := os.ReadFile(filepath.Join(p, "phys_switch_id"))
		// This PF's representor, or one gone (a dangling link).
		if err == nil && (rerr != nil || strings.TrimSpace(string(rsw)) == sw) {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	ents, err := os.ReadDir("/sys/class/net")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		rsw, _ := os.ReadFile("/sys/class/net/" + e.Name() + "/phys_switch_id")
		pn, _ := os.ReadFile("/sys/class/net/" + e.Name() + "/phys_port_name")
		if strings.TrimSpace(string(rsw)) == sw && strings.HasPrefix(string(pn), "pf0vf") {
			s.tr.Link("class/net/"+e.Name(), "/sys/class/net/"+e.Name())
		}
	}
}
