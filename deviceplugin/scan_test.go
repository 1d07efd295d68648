package deviceplugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/offload/eswitch/sysfstest"
)

func pools(t *testing.T, conf string) []Pool {
	t.Helper()
	c, err := ParseConfig([]byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	return c.Pools
}

func scan(t *testing.T, f *fixture, ps []Pool) (map[string][]Device, []error) {
	t.Helper()
	got, problems, err := f.scanner().Scan(context.Background(), ps)
	if err != nil {
		t.Fatal(err)
	}
	return got, problems
}

// summary is "id:healthy" or "id:reason" per device.
func summary(ds []Device) string {
	var out []string
	for _, d := range ds {
		if d.Healthy {
			out = append(out, d.ID)
		} else {
			out = append(out, d.ID+"!"+d.Reason)
		}
	}
	return strings.Join(out, " ")
}

func TestScanConnectX6Switchdev(t *testing.T) {
	f := newFixture(t)
	f.connectX6("03", "ens1f0np0", 8, 0)
	f.connectX6("81", "ens6f0np0", 4, 1)
	got, problems := scan(t, f, pools(t, `
pools:
  - resourceName: skiff.io/vf
    requireSwitchdev: true
    selectors: {pfNames: [ens1f0np0], vfIndexes: ["0-3"]}
  - resourceName: skiff.io/vf-high
    requireSwitchdev: true
    selectors: {vendors: ["15b3"], devices: ["101e"], vfIndexes: ["4-7"]}
  - resourceName: skiff.io/none
    selectors: {vendors: ["8086"]}
`))
	if len(problems) != 0 {
		t.Fatalf("problems: %v", problems)
	}
	vf := got["skiff.io/vf"]
	if len(vf) != 4 {
		t.Fatalf("skiff.io/vf = %s", summary(vf))
	}
	for i, d := range vf {
		want := Device{ID: vfAddr("03", i), Index: i, PF: "ens1f0np0", PFPCI: "0000:03:00.0", NUMA: 0, Vendor: "15b3", DeviceID: "101e",
			Driver: "mlx5_core", Netdev: fmt.Sprintf("ens1f0v%d", i), Representor: fmt.Sprintf("03_rep%d", i), Healthy: true}
		if d != want {
			t.Errorf("device %d = %+v\nwant %+v", i, d, want)
		}
	}
	// vfIndexes 4-7 of any 15b3:101e VF: 4-7 of the first card; the
	// second has only 0-3.
	if s := summary(got["skiff.io/vf-high"]); s != strings.Join([]string{vfAddr("03", 4), vfAddr("03", 5), vfAddr("03", 6), vfAddr("03", 7)}, " ") {
		t.Errorf("skiff.io/vf-high = %s", s)
	}
	if ds, ok := got["skiff.io/none"]; !ok || len(ds) != 0 {
		t.Errorf("skiff.io/none = %v (present %v)", ds, ok)
	}
}

func TestScanHealth(t *testing.T) {
	conf := `
pools:
  - resourceName: skiff.io/vf
    requireSwitchdev: true
    selectors: {pfNames: [ens1f0np0]}
`
	for _, tc := range []struct {
		name   string
		break_ func(t *testing.T, f *fixture)
		// want is the summary of VFs 0 and 1.
		want string
	}{
		{"all well", func(*testing.T, *fixture) {}, "0000:03:00.2 0000:03:00.3"},
		{"PF link down", func(t *testing.T, f *fixture) { f.tr.Write("class/net/ens1f0np0/operstate", "down") },
			"0000:03:00.2!PF ens1f0np0 link is down 0000:03:00.3!PF ens1f0np0 link is down"},
		{"eswitch back in legacy", func(t *testing.T, f *fixture) {
			if err := f.k.SetEswitchMode("pci", "0000:03:00.0", "legacy"); err != nil {
				t.Fatal(err)
			}
		},
			"0000:03:00.2!PF ens1f0np0 eswitch is legacy, the pool needs switchdev 0000:03:00.3!PF ens1f0np0 eswitch is legacy, the pool needs switchdev"},
		{"representor gone", func(t *testing.T, f *fixture) { f.tr.Remove(sysfstest.PCIParent+"/0000:03:00.0", "03_rep1") },
			"0000:03:00.2 0000:03:00.3!VF 1 of ens1f0np0 has no representor"},
		{"VF unbound", func(t *testing.T, f *fixture) {
			if err := os.Remove(filepath.Join(f.tr.Root, sysfstest.PCIParent, "0000:03:00.2", "driver")); err != nil {
				t.Fatal(err)
			}
		}, `0000:03:00.2!bound to "", the pool hands out VFs with a kernel netdev driver 0000:03:00.3`},
		// A VF whose netdev went into a pod is not visible from here, and
		// stays healthy under the same ID: the kubelet's checkpoint keeps
		// it allocated.
		{"VF netdev in a pod", func(t *testing.T, f *fixture) { f.moveIntoPod(t, "03", 0, "ens1f0v0") }, "0000:03:00.2 0000:03:00.3"},
		{"VF removed", func(t *testing.T, f *fixture) { f.removeVF(t, "0000:03:00.0", "03", 0, "ens1f0v0") }, "0000:03:00.3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.connectX6("03", "ens1f0np0", 2, 0)
			tc.break_(t, f)
			got, problems := scan(t, f, pools(t, conf))
			if len(problems) != 0 {
				t.Errorf("problems: %v", problems)
			}
			if s := summary(got["skiff.io/vf"]); s != tc.want {
				t.Errorf("got  %s\nwant %s", s, tc.want)
			}
		})
	}
}

// TestScanBlueFieldHost: the host side of a DPU has VFs but no eswitch of
// its own: a pool that needs switchdev finds them all unhealthy, one that
// does not (dpu-host mode: the DPU plumbs the representors) hands them
// out.
func TestScanBlueFieldHost(t *testing.T) {
	f := newFixture(t)
	f.blueFieldHost(4)
	got, problems := scan(t, f, pools(t, `
pools:
  - resourceName: skiff.io/vf
    selectors: {pfNames: [ens1f0np0], vfIndexes: ["0-1"]}
  - resourceName: skiff.io/vf-switchdev
    requireSwitchdev: true
    selectors: {pfNames: [ens1f0np0], vfIndexes: ["2-3"]}
`))
	if len(problems) != 0 {
		t.Fatalf("problems: %v", problems)
	}
	if s := summary(got["skiff.io/vf"]); s != "0000:03:00.2 0000:03:00.3" {
		t.Errorf("skiff.io/vf = %s", s)
	}
	want := "0000:03:00.4!PF ens1f0np0 eswitch is none, the pool needs switchdev 0000:03:00.5!PF ens1f0np0 eswitch is none, the pool needs switchdev"
	if s := summary(got["skiff.io/vf-switchdev"]); s != want {
		t.Errorf("skiff.io/vf-switchdev = %s\nwant %s", s, want)
	}
	for _, d := range got["skiff.io/vf"] {
		if d.Representor != "" || d.PFPCI != "0000:03:00.0" {
			t.Errorf("device %+v", d)
		}
	}
}

func TestScanLegacyNIC(t *testing.T) {
	f := newFixture(t)
	f.legacyE810()
	got, problems := scan(t, f, pools(t, `
pools:
  - resourceName: skiff.io/iavf
    selectors: {vendors: ["8086"], drivers: [iavf], vfIndexes: ["0-1"]}
  - resourceName: skiff.io/vfio
    use: vfio
    selectors: {vendors: ["8086"], vfIndexes: ["2-3"]}
`))
	if len(problems) != 0 {
		t.Fatalf("problems: %v", problems)
	}
	if s := summary(got["skiff.io/iavf"]); s != "0000:5e:00.2 0000:5e:00.3" {
		t.Errorf("iavf pool = %s", s)
	}
	if s := summary(got["skiff.io/vfio"]); s != `0000:5e:00.4 0000:5e:00.5!bound to "iavf", the pool hands out VFs on vfio-pci` {
		t.Errorf("vfio pool = %s", s)
	}
	if d := got["skiff.io/vfio"][0]; d.IOMMUGroup != "42" || d.NUMA != 1 || d.Netdev != "" {
		t.Errorf("vfio VF = %+v", d)
	}
	// Without its device node the group cannot be handed out.
	if err := os.Remove(filepath.Join(f.dev, "vfio", "42")); err != nil {
		t.Fatal(err)
	}
	got, _ = scan(t, f, pools(t, `{pools: [{resourceName: skiff.io/vfio, use: vfio, selectors: {drivers: [vfio-pci]}}]}`))
	if s := summary(got["skiff.io/vfio"]); !strings.Contains(s, "!no device node "+filepath.Join(f.dev, "vfio", "42")) {
		t.Errorf("vfio pool without /dev/vfio/42 = %s", s)
	}
}

func TestScanBrokenTrees(t *testing.T) {
	conf := `{pools: [{resourceName: skiff.io/vf, selectors: {vendors: ["15b3"]}}]}`
	t.Run("VF selected by two pools", func(t *testing.T) {
		f := newFixture(t)
		f.connectX6("03", "ens1f0np0", 2, 0)
		got, problems := scan(t, f, pools(t, `
pools:
  - {resourceName: skiff.io/a, selectors: {vfIndexes: ["0-1"]}}
  - {resourceName: skiff.io/b, selectors: {vfIndexes: ["1"]}}
`))
		if len(got["skiff.io/a"]) != 2 || len(got["skiff.io/b"]) != 0 {
			t.Errorf("a = %s, b = %s", summary(got["skiff.io/a"]), summary(got["skiff.io/b"]))
		}
		if len(problems) != 1 || !strings.Contains(problems[0].Error(), "0000:03:00.3 (ens1f0np0 vf 1) is selected by skiff.io/a and skiff.io/b: it stays in skiff.io/a") {
			t.Errorf("problems = %v", problems)
		}
	})
	t.Run("dangling virtfn link", func(t *testing.T) {
		f := newFixture(t)
		f.connectX6("03", "ens1f0np0", 2, 0)
		f.connectX6("81", "ens6f0np0", 2, 1)
		if err := os.RemoveAll(filepath.Join(f.tr.Root, sysfstest.PCIParent, "0000:03:00.3")); err != nil {
			t.Fatal(err)
		}
		got, problems := scan(t, f, pools(t, conf))
		// The broken PF is left out whole; the other is unaffected.
		if s := summary(got["skiff.io/vf"]); s != "0000:81:00.2 0000:81:00.3" {
			t.Errorf("pool = %s", s)
		}
		if len(problems) == 0 || !strings.Contains(fmt.Sprint(problems), "virtfn1") {
			t.Errorf("problems = %v", problems)
		}
	})
	t.Run("garbage numa_node", func(t *testing.T) {
		f := newFixture(t)
		f.connectX6("03", "ens1f0np0", 2, 0)
		f.tr.Write(sysfstest.PCIParent+"/0000:03:00.2/numa_node", "zero")
		got, problems := scan(t, f, pools(t, conf))
		if s := summary(got["skiff.io/vf"]); s != "0000:03:00.3" {
			t.Errorf("pool = %s", s)
		}
		if len(problems) != 1 || !strings.Contains(problems[0].Error(), `0000:03:00.2/numa_node: not an integer: "zero"`) {
			t.Errorf("problems = %v", problems)
		}
	})
	t.Run("garbage vendor", func(t *testing.T) {
		f := newFixture(t)
		f.connectX6("03", "ens1f0np0", 2, 0)
		f.tr.Write(sysfstest.PCIParent+"/0000:03:00.3/vendor", "mellanox")
		got, problems := scan(t, f, pools(t, conf))
		if s := summary(got["skiff.io/vf"]); s != "0000:03:00.2" {
			t.Errorf("pool = %s", s)
		}
		if len(problems) != 1 || !strings.Contains(problems[0].Error(), `0000:03:00.3/vendor: "mellanox" is not a PCI ID`) {
			t.Errorf("problems = %v", problems)
		}
	})
	t.Run("no sysfs", func(t *testing.T) {
		_, _, err := NewScanner(filepath.Join(t.TempDir(), "nosys"), "", newFixture(t).dl).Scan(context.Background(), pools(t, conf))
		if err == nil || !strings.Contains(err.Error(), "nosys/class/net") {
			t.Errorf("err = %v", err)
		}
	})
}
