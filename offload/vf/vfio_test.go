package vf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakePCI is a sysfs tree with one VF and a model of what the kernel does
// on writes to driver_override, unbind, bind and drivers_probe.
type fakePCI struct {
	t      *testing.T
	root   string
	addr   string
	native string // the driver that matches the device's IDs
	writes []string
}

func newFakePCI(t *testing.T, driver string, drivers ...string) *fakePCI {
	f := &fakePCI{t: t, root: t.TempDir(), addr: "0000:03:00.5", native: "mlx5_core"}
	dev := filepath.Join(f.root, "devices/pci0000:00/0000:00:02.0", f.addr)
	must(t, os.MkdirAll(dev, 0o755))
	must(t, os.MkdirAll(filepath.Join(f.root, "bus/pci/devices"), 0o755))
	must(t, os.Symlink(dev, filepath.Join(f.root, "bus/pci/devices", f.addr)))
	must(t, os.WriteFile(filepath.Join(dev, "driver_override"), []byte("(null)\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(f.root, "bus/pci/drivers_probe"), nil, 0o200))
	for _, d := range drivers {
		dd := filepath.Join(f.root, "bus/pci/drivers", d)
		must(t, os.MkdirAll(dd, 0o755))
		must(t, os.WriteFile(filepath.Join(dd, "bind"), nil, 0o200))
		must(t, os.WriteFile(filepath.Join(dd, "unbind"), nil, 0o200))
	}
	if driver != "" {
		f.link(driver)
	}
	return f
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (f *fakePCI) dev() string { return filepath.Join(f.root, "bus/pci/devices", f.addr) }

func (f *fakePCI) link(driver string) {
	must(f.t, os.Symlink(filepath.Join(f.root, "bus/pci/drivers", driver), filepath.Join(f.dev(), "driver")))
}

func (f *fakePCI) kernel(path, val string) error {
	rel, _ := filepath.Rel(f.root, path)
	f.writes = append(f.writes, rel+"="+strings.TrimSpace(val))
	cur, _ := os.Readlink(filepath.Join(f.dev(), "driver"))
	switch {
	case strings.HasSuffix(path, "driver_override"):
		if strings.TrimSpace(val) == "" {
			return os.WriteFile(path, []byte("(null)\n"), 0o644)
		}
	case strings.HasSuffix(path, "/unbind"):
		if cur == "" || strings.TrimSpace(val) != f.addr {
			f.t.Fatalf("unbind of %q while bound to %q", val, cur)
		}
		return os.Remove(filepath.Join(f.dev(), "driver"))
	case strings.HasSuffix(path, "drivers_probe"):
		if cur != "" {
			return nil
		}
		ov, _ := os.ReadFile(filepath.Join(f.dev(), "driver_override"))
		d := strings.TrimSpace(string(ov))
		if d == "(null)" {
			d = f.native
		}
		f.link(d)
	case strings.HasSuffix(path, "/bind"):
		if cur != "" {
			f.t.Fatalf("bind while bound to %q", cur)
		}
		f.link(filepath.Base(filepath.Dir(path)))
	}
	return nil
}

func (f *fakePCI) binder() *Binder {
	b := NewBinder(BinderOptions{SysRoot: f.root, BindTimeout: 100 * time.Millisecond})
	b.afterWrite = f.kernel
	return b
}

func TestBindVFIOAndRestore(t *testing.T) {
	f := newFakePCI(t, "mlx5_core", "mlx5_core", VFIODriver)
	b := f.binder()
	prev, err := b.BindVFIO(f.addr)
	if err != nil {
		t.Fatal(err)
	}
	if prev != "mlx5_core" {
		t.Errorf("previous = %q", prev)
	}
	if d, _ := b.Driver(f.addr); d != VFIODriver {
		t.Fatalf("driver after bind = %q", d)
	}
	want := []string{
		"bus/pci/devices/0000:03:00.5/driver_override=vfio-pci",
		"bus/pci/devices/0000:03:00.5/driver/unbind=0000:03:00.5",
		"bus/pci/drivers_probe=0000:03:00.5",
	}
	if strings.Join(f.writes, "\n") != strings.Join(want, "\n") {
		t.Errorf("writes:\n%s\nwant:\n%s", strings.Join(f.writes, "\n"), strings.Join(want, "\n"))
	}
	// Again: nothing to do.
	f.writes = nil
	if prev, err := b.BindVFIO(f.addr); err != nil || prev != VFIODriver || len(f.writes) != 0 {
		t.Errorf("second bind: %q %v, writes %v", prev, err, f.writes)
	}
	if err := b.Restore(f.addr, "mlx5_core"); err != nil {
		t.Fatal(err)
	}
	if d, _ := b.Driver(f.addr); d != "mlx5_core" {
		t.Fatalf("driver after restore = %q", d)
	}
	if ov, _ := b.override(f.addr); ov != "" {
		t.Errorf("override after restore = %q", ov)
	}
	f.writes = nil
	if err := b.Restore(f.addr, "mlx5_core"); err != nil || len(f.writes) != 0 {
		t.Errorf("second restore: %v, writes %v", err, f.writes)
	}
}

func TestBindUnboundFunction(t *testing.T) {
	f := newFakePCI(t, "", "mlx5_core", VFIODriver)
	b := f.binder()
	prev, err := b.BindVFIO(f.addr)
	if err != nil || prev != "" {
		t.Fatalf("bind: %q %v", prev, err)
	}
	if err := b.Restore(f.addr, prev); err != nil {
		t.Fatal(err)
	}
	if d, _ := b.Driver(f.addr); d != "" {
		t.Errorf("restored to %q, want unbound", d)
	}
}

func TestBindErrors(t *testing.T) {
	f := newFakePCI(t, "mlx5_core", "mlx5_core")
	b := f.binder()
	_, err := b.BindVFIO(f.addr)
	if err == nil || !strings.Contains(err.Error(), "bus/pci/drivers/vfio-pci") || !strings.Contains(err.Error(), "not loaded") {
		t.Errorf("no vfio-pci: %v", err)
	}
	if _, err := b.BindVFIO("0000:99:00.0"); err == nil {
		t.Error("bound a missing function")
	}
	f2 := newFakePCI(t, "mlx5_core", "mlx5_core", VFIODriver)
	b2 := f2.binder()
	f2.native = "mlx5_core"
	// A probe that binds the wrong driver (override ignored) is reported.
	b2.afterWrite = func(path, val string) error {
		if strings.HasSuffix(path, "driver_override") {
			return nil // the kernel "forgets" the override
		}
		if strings.HasSuffix(path, "drivers_probe") {
			f2.link("mlx5_core")
			return nil
		}
		return f2.kernel(path, val)
	}
	if _, err := b2.BindVFIO(f2.addr); err == nil || !strings.Contains(err.Error(), `bound to "mlx5_core" after probing, want vfio-pci`) {
		t.Errorf("wrong driver after probe: %v", err)
	}
}
