package eswitch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/offload/eswitch/sysfstest"
)

func discover(t *testing.T, tr *sysTree, dl Devlink) *Node {
	t.Helper()
	n, err := New(Options{SysRoot: tr.Root, Devlink: dl}).Discover(context.Background())
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	return n
}

func mustPF(t *testing.T, n *Node, name string) *PF {
	t.Helper()
	pf, err := n.PF(name)
	if err != nil {
		t.Fatalf("%v; have %+v", err, n.PFs)
	}
	return pf
}

func TestConnectX6Switchdev(t *testing.T) {
	tr, dl := cx6Switchdev(t)
	n := discover(t, tr, dl)
	if len(n.Problems) != 0 {
		t.Fatalf("problems: %v", n.Problems)
	}
	if n.Kind != NodeEswitch {
		t.Errorf("kind = %s, want eswitch", n.Kind)
	}
	if len(n.PFs) != 2 {
		t.Fatalf("PFs = %+v, want 2", n.PFs)
	}
	pf := mustPF(t, n, "ens1f0np0")
	if pf.Bus != "pci" || pf.Device != "0000:03:00.0" || pf.DevlinkHandle() != "pci/0000:03:00.0" || pf.Number != 0 {
		t.Errorf("pf0 identity = %s %s #%d", pf.Bus, pf.Device, pf.Number)
	}
	if pf.Mode != ModeSwitchdev || pf.NumVFs != 8 || pf.TotalVFs != 8 || pf.SwitchID != cx6Switch {
		t.Errorf("pf0 = mode %s vfs %d/%d switch %s", pf.Mode, pf.NumVFs, pf.TotalVFs, pf.SwitchID)
	}
	if pf.Uplink == nil || pf.Uplink.Netdev != "ens1f0np0" || pf.Uplink.Port.Kind != PortUplink {
		t.Errorf("uplink = %+v", pf.Uplink)
	}
	if len(pf.VFs) != 8 || len(pf.Representors) != 8 {
		t.Fatalf("pf0 has %d VFs and %d representors, want 8 and 8", len(pf.VFs), len(pf.Representors))
	}
	for i, vf := range pf.VFs {
		wantAddr := fmt.Sprintf("0000:03:%02x.%d", (i+2)/8, (i+2)%8)
		if vf.Index != i || vf.PCIAddress != wantAddr || vf.Netdev != fmt.Sprintf("ens1f0v%d", i) || vf.Driver != "mlx5_core" {
			t.Errorf("vf %d = %+v, want index %d at %s", i, vf, i, wantAddr)
		}
		// Representors were created in reverse: pf0vf<i> is eth<7-i>.
		if want := fmt.Sprintf("eth%d", 7-i); vf.Representor != want {
			t.Errorf("vf %d representor = %q, want %q", i, vf.Representor, want)
		}
	}
	gotPF, gotVF, err := n.VFByPCI("0000:03:00.5")
	if err != nil || gotPF.Netdev != "ens1f0np0" || gotVF.Index != 3 {
		t.Errorf("VFByPCI(0000:03:00.5) = %v %+v %v, want vf 3 of ens1f0np0", gotPF, gotVF, err)
	}
	if _, err := pf.RepresentorForVF(8); err == nil || !strings.Contains(err.Error(), "vf 8") {
		t.Errorf("RepresentorForVF(8) err = %v", err)
	}
	pf1 := mustPF(t, n, "ens1f1np1")
	if pf1.Mode != ModeLegacy || pf1.Number != 1 || len(pf1.VFs) != 0 || len(pf1.Representors) != 0 {
		t.Errorf("pf1 = %+v", pf1)
	}
}

func TestBlueFieldArmSide(t *testing.T) {
	for _, tc := range []struct {
		name, switchID, prefix string
		sf                     bool
	}{
		{"bluefield2-old-firmware", bf2Switch, "", false},
		{"bluefield2", bf2Switch, "c1", false},
		{"bluefield3", bf3Switch, "c1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, dl := bluefield(t, tc.switchID, 4, tc.prefix, tc.sf)
			n := discover(t, tr, dl)
			if len(n.Problems) != 0 {
				t.Fatalf("problems: %v", n.Problems)
			}
			if n.Kind != NodeDPU {
				t.Errorf("kind = %s, want dpu", n.Kind)
			}
			if len(n.PFs) != 2 {
				t.Fatalf("PFs = %+v", n.PFs)
			}
			for pfn, wantVFs := range []int{4, 2} {
				pf := mustPF(t, n, fmt.Sprintf("p%d", pfn))
				if pf.Number != pfn || pf.Uplink == nil || pf.Uplink.Port.PF != pfn {
					t.Errorf("p%d: number %d uplink %+v", pfn, pf.Number, pf.Uplink)
				}
				hpf, err := pf.HostPFRepresentor()
				if err != nil || hpf.Netdev != fmt.Sprintf("pf%dhpf", pfn) {
					t.Errorf("p%d host PF representor = %+v, %v", pfn, hpf, err)
				}
				vfReps := 0
				for _, r := range pf.Representors {
					if r.Port.PF != pfn {
						t.Errorf("p%d holds representor %s of pf%d", pfn, r.Netdev, r.Port.PF)
					}
					if r.Port.Kind == PortVF {
						vfReps++
					}
				}
				if vfReps != wantVFs {
					t.Errorf("p%d has %d VF representors, want %d", pfn, vfReps, wantVFs)
				}
				for vf := range wantVFs {
					r, err := pf.ExternalRepresentorForVF(vf)
					if want := fmt.Sprintf("pf%dvf%d", pfn, vf); err != nil || r.Netdev != want || r.Port.VF != vf {
						t.Errorf("p%d external vf %d = %+v, %v; want %s", pfn, vf, r, err, want)
					}
				}
				if _, err := pf.ExternalRepresentorForVF(wantVFs); err == nil {
					t.Errorf("p%d: representor for missing vf %d found", pfn, wantVFs)
				}
			}
			if tc.sf {
				p0 := mustPF(t, n, "p0")
				found := false
				for _, r := range p0.Representors {
					found = found || (r.Port.Kind == PortSF && r.Netdev == "en3f0pf0sf0")
				}
				if !found {
					t.Errorf("SF representor missing: %+v", p0.Representors)
				}
			}
		})
	}
}

func TestLegacyNIC(t *testing.T) {
	tr := newTree(t)
	// An Intel E810 in legacy mode: PF netdev without a switch port and
	// 4 VFs with iavf netdevs; VF 2 bound to vfio-pci (no netdev).
	pf := tr.PF("0000:5e:00.0", 64, 4, "5e", "iavf", func(i int) string {
		if i == 2 {
			return ""
		}
		return fmt.Sprintf("ens2f0v%d", i)
	})
	tr.Mkdir("bus/pci/drivers/vfio-pci")
	tr.RelLink(sysfstest.PCIParent+"/0000:5e:00.4/driver", "bus/pci/drivers/vfio-pci")
	tr.Netdev(pf, "ens2f0", "", "")
	dl := devlink(t, map[string]string{"pci/0000:5e:00.0": "legacy"})
	n := discover(t, tr, dl)
	if len(n.Problems) != 0 || n.Kind != NodeNone || len(n.PFs) != 1 {
		t.Fatalf("node = %+v", n)
	}
	p := n.PFs[0]
	if p.Netdev != "ens2f0" || p.Mode != ModeLegacy || p.TotalVFs != 64 || p.NumVFs != 4 || p.Uplink != nil || len(p.VFs) != 4 {
		t.Fatalf("pf = %+v", p)
	}
	if v := p.VFs[2]; v.Netdev != "" || v.Driver != "vfio-pci" || v.PCIAddress != "0000:5e:00.4" {
		t.Errorf("vfio VF = %+v", v)
	}
	for _, v := range p.VFs {
		if v.Representor != "" {
			t.Errorf("legacy VF %d has representor %s", v.Index, v.Representor)
		}
	}
}

func TestVFsWithoutRepresentors(t *testing.T) {
	tr := newTree(t)
	// switchdev is reported, but the driver exposes no representors.
	pf := tr.PF("0000:81:00.0", 16, 3, "81", "ixgbevf", func(i int) string { return fmt.Sprintf("enp129s0f0v%d", i) })
	tr.Netdev(pf, "enp129s0f0", "", "")
	dl := devlink(t, map[string]string{"pci/0000:81:00.0": "switchdev"})
	n := discover(t, tr, dl)
	if len(n.Problems) != 0 || len(n.PFs) != 1 {
		t.Fatalf("node = %+v", n)
	}
	p := n.PFs[0]
	if len(p.VFs) != 3 || len(p.Representors) != 0 {
		t.Fatalf("pf = %+v", p)
	}
	_, err := p.RepresentorForVF(1)
	if err == nil || !strings.Contains(err.Error(), "no representor for vf 1") {
		t.Errorf("RepresentorForVF(1) err = %v", err)
	}
}

func TestNoEswitchAtAll(t *testing.T) {
	tr := newTree(t)
	tr.Mkdir("devices/virtual/net/lo")
	tr.RelLink("class/net/lo", "devices/virtual/net/lo")
	dev := tr.PCIDev("0000:00:03.0", "virtio-pci")
	tr.Netdev(dev, "eth0", "", "")
	n := discover(t, tr, devlink(t, nil))
	if n.Kind != NodeNone || len(n.PFs) != 0 || len(n.Problems) != 0 {
		t.Errorf("node = %+v", n)
	}
}

func problemAt(t *testing.T, n *Node, pathSuffix, reason string) {
	t.Helper()
	for _, p := range n.Problems {
		var pe *PathError
		if errors.As(p, &pe) && strings.HasSuffix(pe.Path, pathSuffix) && strings.Contains(p.Error(), reason) {
			return
		}
	}
	t.Errorf("no problem at *%s saying %q; problems: %v", pathSuffix, reason, n.Problems)
}

func TestBrokenTrees(t *testing.T) {
	t.Run("dangling virtfn link", func(t *testing.T) {
		tr, dl := cx6Switchdev(t)
		vf := filepath.Join(tr.Root, sysfstest.PCIParent, "0000:03:00.7")
		if err := os.RemoveAll(vf); err != nil {
			t.Fatal(err)
		}
		n := discover(t, tr, dl)
		problemAt(t, n, "0000:03:00.0/virtfn5", "broken link")
		// The other port is unaffected.
		mustPF(t, n, "ens1f1np1")
		if _, err := n.PF("ens1f0np0"); err == nil {
			t.Error("PF with a broken VF link reported as if whole")
		}
	})
	t.Run("garbage phys_port_name on a switch port", func(t *testing.T) {
		tr, dl := cx6Switchdev(t)
		tr.Write(sysfstest.PCIParent+"/0000:03:00.0/net/eth4/phys_port_name", "pf0vfX3")
		n := discover(t, tr, dl)
		problemAt(t, n, "class/net/eth4/phys_port_name", `"pf0vfX3" is in no known form`)
		pf := mustPF(t, n, "ens1f0np0")
		if len(pf.Representors) != 7 {
			t.Errorf("%d representors, want the 7 good ones", len(pf.Representors))
		}
		if pf.VFs[3].Representor != "" {
			t.Errorf("vf 3 got representor %q from a garbage port name", pf.VFs[3].Representor)
		}
		if pf.VFs[2].Representor != "eth5" {
			t.Errorf("vf 2 representor = %q", pf.VFs[2].Representor)
		}
	})
	t.Run("free-form port name without a switch is ignored", func(t *testing.T) {
		tr := newTree(t)
		dev := tr.PCIDev("0000:00:04.0", "ice")
		tr.Netdev(dev, "eno1", "", "eno1-port")
		n := discover(t, tr, devlink(t, nil))
		if len(n.Problems) != 0 || len(n.PFs) != 0 {
			t.Errorf("node = %+v", n)
		}
	})
	t.Run("VF without netdev", func(t *testing.T) {
		tr, dl := cx6Switchdev(t)
		if err := os.RemoveAll(filepath.Join(tr.Root, sysfstest.PCIParent, "0000:03:00.2", "net")); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(tr.Root, "class/net/ens1f0v0")); err != nil {
			t.Fatal(err)
		}
		n := discover(t, tr, dl)
		if len(n.Problems) != 0 {
			t.Fatalf("problems: %v", n.Problems)
		}
		vf := mustPF(t, n, "ens1f0np0").VFs[0]
		if vf.Netdev != "" || vf.Representor != "eth7" || vf.PCIAddress != "0000:03:00.2" {
			t.Errorf("vf 0 = %+v", vf)
		}
	})
	t.Run("netdev with a dangling device link", func(t *testing.T) {
		tr, dl := cx6Switchdev(t)
		tr.Link("class/net/ghost0", "../../devices/virtual/net/ghost0")
		n := discover(t, tr, dl)
		problemAt(t, n, "class/net/ghost0", "broken link")
		mustPF(t, n, "ens1f0np0")
	})
	t.Run("device without subsystem", func(t *testing.T) {
		tr, dl := cx6Switchdev(t)
		if err := os.Remove(filepath.Join(tr.Root, sysfstest.PCIParent, "0000:03:00.1", "subsystem")); err != nil {
			t.Fatal(err)
		}
		n := discover(t, tr, dl)
		problemAt(t, n, "0000:03:00.1/subsystem", "no subsystem link")
	})
	t.Run("garbage in sriov_numvfs", func(t *testing.T) {
		tr, dl := cx6Switchdev(t)
		tr.Write(sysfstest.PCIParent+"/0000:03:00.1/sriov_numvfs", "lots")
		n := discover(t, tr, dl)
		problemAt(t, n, "0000:03:00.1/sriov_numvfs", `not an integer: "lots"`)
		mustPF(t, n, "ens1f0np0")
	})
	t.Run("representor of an unknown switch", func(t *testing.T) {
		tr, dl := cx6Switchdev(t)
		tr.Write(sysfstest.PCIParent+"/0000:03:00.0/net/eth0/phys_switch_id", "deadbeef")
		n := discover(t, tr, dl)
		problemAt(t, n, "class/net/eth0/phys_switch_id", "belongs to no PF")
	})
	t.Run("no class/net", func(t *testing.T) {
		_, err := New(Options{SysRoot: filepath.Join(t.TempDir(), "nosys")}).Discover(context.Background())
		if err == nil || !strings.Contains(err.Error(), "nosys/class/net") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestSetNumVFsGoesThroughZero(t *testing.T) {
	tr, dl := cx6Switchdev(t)
	path := filepath.Join(tr.Root, sysfstest.PCIParent, "0000:03:00.0", "sriov_numvfs")
	// Record every write: replace the attribute with a FIFO-like log is
	// not possible on a plain file, so check the sequence through a
	// wrapper that reads the file between steps.
	d := New(Options{SysRoot: tr.Root, Devlink: dl})
	if err := d.SetNumVFs("ens1f0np0", 8); err != nil {
		t.Fatalf("same count: %v", err)
	}
	if err := d.SetNumVFs("ens1f0np0", 9); err == nil || !strings.Contains(err.Error(), "sriov_totalvfs is 8") || !strings.Contains(err.Error(), path) {
		t.Errorf("over total: %v", err)
	}
	if err := d.SetNumVFs("ens1f0np0", 4); err != nil {
		t.Fatal(err)
	}
	if num, total, err := d.NumVFs("ens1f0np0"); err != nil || num != 4 || total != 8 {
		t.Errorf("NumVFs = %d/%d %v", num, total, err)
	}
	if err := d.SetNumVFs("eth3", 1); err == nil {
		// eth3 is a representor: its device is the PF, so this would
		// change the PF's VFs. That is what the kernel would do too.
		if num, _, _ := d.NumVFs("ens1f0np0"); num != 1 {
			t.Errorf("NumVFs after set through a representor = %d", num)
		}
	}
	if err := d.SetNumVFs("nope0", 1); err == nil || !strings.Contains(err.Error(), "class/net/nope0/device") {
		t.Errorf("missing PF: %v", err)
	}
}

func TestSetMode(t *testing.T) {
	tr, dl := cx6Switchdev(t)
	d := New(Options{SysRoot: tr.Root, Devlink: dl})
	ctx := context.Background()
	if err := d.SetMode(ctx, "ens1f1np1", ModeSwitchdev); err != nil {
		t.Fatal(err)
	}
	if err := d.SetMode(ctx, "ens1f1np1", ModeSwitchdev); err != nil {
		t.Fatal(err)
	}
	if n := dl.Kernel.(nl.Kernel).Writes(); n != 1 {
		t.Errorf("%d devlink writes, want one", n)
	}
	if m, err := d.Mode(ctx, "ens1f1np1"); err != nil || m != ModeSwitchdev {
		t.Errorf("Mode = %s %v", m, err)
	}
	if err := d.SetMode(ctx, "ens1f1np1", "bogus"); err == nil {
		t.Error("bogus mode accepted")
	}
}
