package deviceplugin

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/nltest"
	"github.com/skiff-sdn/skiff/offload/eswitch"
	"github.com/skiff-sdn/skiff/offload/eswitch/sysfstest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// fixture is a sysfs tree, a /dev tree and the devlink behind them: a
// kernel fake's host namespace (ns stages devlink devices; k changes
// their modes as devlink does). The fake is safe for concurrent use (the
// plugin rescans while a test changes modes).
type fixture struct {
	tr  *sysfstest.Tree
	dev string
	k   nl.Kernel
	ns  *nltest.NS
	dl  eswitch.NetlinkDevlink
}

func (f *fixture) scanner() *Scanner { return NewScanner(f.tr.Root, f.dev, f.dl) }

// vfAddr is the PCI address sysfstest.Tree.PF gives VF i on bus.
func vfAddr(bus string, i int) string { return sysfstest.VFAddr(bus, i) }

func newFixture(t *testing.T) *fixture {
	k, ns := testkit.Devlink(t, nil)
	return &fixture{tr: sysfstest.New(t), dev: t.TempDir(), k: k, ns: ns, dl: eswitch.NetlinkDevlink{Kernel: k}}
}

// connectX6 adds a ConnectX-6 Dx in switchdev mode (sysfstest's
// ConnectX6: PF ens1f0np0 at 0000:<bus>:00.0, uplink p0, n VFs on
// mlx5_core with netdevs <prefix>v0.., their representors, the given
// NUMA node, link up).
func (f *fixture) connectX6(bus, pfName string, n, numa int) string {
	pf := f.tr.ConnectX6(bus, pfName, n, numa)
	f.ns.AddDevlink("pci", "0000:"+bus+":00.0", "switchdev")
	return pf
}

// blueFieldHost adds the host side of a BlueField-2 in DPU mode: the PF
// and its VFs as on any host, no representors (they are on the DPU's Arm
// side) and no eswitch devlink can see from here.
func (f *fixture) blueFieldHost(n int) string {
	pf := f.tr.PF("0000:03:00.0", 16, n, "03", "mlx5_core", func(i int) string { return fmt.Sprintf("ens1f0v%d", i) })
	f.tr.Netdev(pf, "ens1f0np0", "", "")
	f.tr.Write("class/net/ens1f0np0/operstate", "up")
	f.tr.PCIAttrs("03", n, "15b3", "101e", 0)
	return pf
}

// legacyE810 adds an Intel E810 in legacy mode: PF ens2f0, 4 VFs on
// iavf, VF 2 on vfio-pci in IOMMU group 42 (with /dev/vfio/42).
func (f *fixture) legacyE810() string {
	pf := f.tr.PF("0000:5e:00.0", 64, 4, "5e", "iavf", func(i int) string {
		if i == 2 {
			return ""
		}
		return fmt.Sprintf("ens2f0v%d", i)
	})
	f.tr.Netdev(pf, "ens2f0", "", "")
	f.tr.Write("class/net/ens2f0/operstate", "up")
	f.tr.PCIAttrs("5e", 4, "8086", "1889", 1)
	vf2 := sysfstest.PCIParent + "/" + vfAddr("5e", 2)
	f.tr.Mkdir("bus/pci/drivers/vfio-pci")
	f.tr.RelLink(vf2+"/driver", "bus/pci/drivers/vfio-pci")
	f.tr.Mkdir("kernel/iommu_groups/42")
	f.tr.RelLink(vf2+"/iommu_group", "kernel/iommu_groups/42")
	if err := os.MkdirAll(filepath.Join(f.dev, "vfio"), 0o755); err != nil {
		panic(err)
	}
	for _, n := range []string{"vfio", "42"} {
		if err := os.WriteFile(filepath.Join(f.dev, "vfio", n), nil, 0o600); err != nil {
			panic(err)
		}
	}
	f.ns.AddDevlink("pci", "0000:5e:00.0", "legacy")
	return pf
}

// moveIntoPod removes VF i's netdev from the host's view, as moving it
// into a pod's namespace does (sysfs is namespace-tagged).
func (f *fixture) moveIntoPod(t *testing.T, bus string, i int, netdev string) {
	t.Helper()
	f.tr.Remove(sysfstest.PCIParent+"/"+vfAddr(bus, i), netdev)
}

// removeVF makes VF i of a PF disappear (its virtfn link and function).
func (f *fixture) removeVF(t *testing.T, pfAddr, bus string, i int, netdev string) {
	t.Helper()
	f.tr.RemoveVF(sysfstest.PCIParent+"/"+pfAddr, bus, i, netdev)
}
