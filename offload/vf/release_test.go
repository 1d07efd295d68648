package vf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRelease gives a function on vfio-pci back to the driver the kernel
// picks (its native one), without knowing which that was.
func TestRelease(t *testing.T) {
	f := newFakePCI(t, "mlx5_core", "mlx5_core", VFIODriver)
	b := f.binder()
	if _, err := b.BindVFIO(f.addr); err != nil {
		t.Fatal(err)
	}
	f.writes = nil
	if err := b.Release(f.addr); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"bus/pci/devices/0000:03:00.5/driver_override=",
		"bus/pci/devices/0000:03:00.5/driver/unbind=0000:03:00.5",
		"bus/pci/drivers_probe=0000:03:00.5",
	}
	if strings.Join(f.writes, "\n") != strings.Join(want, "\n") {
		t.Errorf("writes:\n%s\nwant:\n%s", strings.Join(f.writes, "\n"), strings.Join(want, "\n"))
	}
	if d, _ := b.Driver(f.addr); d != "mlx5_core" {
		t.Errorf("driver after release = %q", d)
	}
	// Again: already released, nothing written.
	f.writes = nil
	if err := b.Release(f.addr); err != nil || len(f.writes) != 0 {
		t.Errorf("second release: %v, writes %v", err, f.writes)
	}
}

func TestReleaseUnbound(t *testing.T) {
	f := newFakePCI(t, "", "mlx5_core", VFIODriver)
	b := f.binder()
	if err := b.Release(f.addr); err != nil {
		t.Fatal(err)
	}
	if d, _ := b.Driver(f.addr); d != "mlx5_core" {
		t.Errorf("driver after release = %q", d)
	}
}

func TestReleaseNoDriverTakesIt(t *testing.T) {
	f := newFakePCI(t, VFIODriver, "mlx5_core", VFIODriver)
	b := f.binder()
	b.afterWrite = func(path, val string) error {
		if strings.HasSuffix(path, "drivers_probe") {
			return nil // no driver matches
		}
		return f.kernel(path, val)
	}
	err := b.Release(f.addr)
	if err == nil || !strings.Contains(err.Error(), "no driver took it") || !strings.Contains(err.Error(), f.addr) {
		t.Errorf("release with no matching driver: %v", err)
	}
}

func TestIOMMUGroup(t *testing.T) {
	f := newFakePCI(t, "mlx5_core", "mlx5_core")
	b := f.binder()
	if _, err := b.IOMMUGroup(f.addr); err == nil || !strings.Contains(err.Error(), "no IOMMU group") {
		t.Errorf("no group: %v", err)
	}
	g := filepath.Join(f.root, "kernel/iommu_groups/17")
	must(t, os.MkdirAll(g, 0o755))
	must(t, os.Symlink(g, filepath.Join(f.dev(), "iommu_group")))
	if p, err := b.IOMMUGroup(f.addr); err != nil || p != "/dev/vfio/17" {
		t.Errorf("group = %q, %v", p, err)
	}
}
