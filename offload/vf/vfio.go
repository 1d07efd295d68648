package vf

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// VFIODriver is the driver that hands PCI functions to VMs.
const VFIODriver = "vfio-pci"

// BinderOptions configure a Binder.
type BinderOptions struct {
	// SysRoot is where sysfs is mounted; "/sys" when empty.
	SysRoot string
	Logger  *slog.Logger
	// BindTimeout bounds the wait for a driver to appear on a function
	// after a probe; 2 s when zero.
	BindTimeout time.Duration
}

// Binder moves PCI functions between drivers through sysfs.
type Binder struct {
	sys     string
	log     *slog.Logger
	timeout time.Duration
	// afterWrite, when set (by tests), plays the kernel's part after a
	// sysfs write.
	afterWrite func(path, val string) error
}

// NewBinder returns a Binder.
func NewBinder(o BinderOptions) *Binder {
	b := &Binder{sys: strings.TrimRight(o.SysRoot, "/"), log: o.Logger, timeout: o.BindTimeout}
	if o.SysRoot == "" {
		b.sys = "/sys"
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	if b.timeout == 0 {
		b.timeout = 2 * time.Second
	}
	return b
}

func (b *Binder) dev(addr string) string { return filepath.Join(b.sys, "bus", "pci", "devices", addr) }

// Driver returns the driver a PCI function is bound to, "" when unbound.
func (b *Binder) Driver(addr string) (string, error) {
	dev := b.dev(addr)
	if _, err := os.Stat(dev); err != nil {
		return "", fmt.Errorf("vf: PCI function %s: %s: %w", addr, dev, err)
	}
	t, err := os.Readlink(filepath.Join(dev, "driver"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("vf: PCI function %s: %w", addr, err)
	}
	return filepath.Base(t), nil
}

func (b *Binder) write(path, val string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("vf: %s: %w", path, err)
	}
	_, werr := f.WriteString(val)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		return fmt.Errorf("vf: write %q to %s: %w", strings.TrimSpace(val), path, err)
	}
	if b.afterWrite != nil {
		return b.afterWrite(path, val)
	}
	return nil
}

// override reads driver_override ("" for none; the kernel shows "(null)").
func (b *Binder) override(addr string) (string, error) {
	p := filepath.Join(b.dev(addr), "driver_override")
	v, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("vf: %s: %w", p, err)
	}
	s := strings.TrimSpace(string(v))
	if s == "(null)" {
		s = ""
	}
	return s, nil
}

// BindVFIO binds a PCI function to vfio-pci and returns the driver it had
// ("" when it had none), to give to Restore later. When the function is
// already on vfio-pci it returns "vfio-pci" and changes nothing but
// driver_override.
func (b *Binder) BindVFIO(addr string) (previous string, err error) {
	drvDir := filepath.Join(b.sys, "bus", "pci", "drivers", VFIODriver)
	if _, err := os.Stat(drvDir); err != nil {
		return "", fmt.Errorf("vf: bind %s to %s: driver not loaded (%s: %w)", addr, VFIODriver, drvDir, err)
	}
	return b.bind(addr, VFIODriver, true)
}

// Restore gives a PCI function back to driver (the value BindVFIO
// returned): it clears driver_override, unbinds from any other driver and
// binds to driver. With driver "" the function is left unbound.
func (b *Binder) Restore(addr, driver string) error {
	_, err := b.bind(addr, driver, false)
	return err
}

func (b *Binder) bind(addr, driver string, override bool) (string, error) {
	cur, err := b.Driver(addr)
	if err != nil {
		return "", err
	}
	dev := b.dev(addr)
	want := ""
	if override {
		want = driver
	}
	if ov, err := b.override(addr); err != nil {
		return "", err
	} else if ov != want {
		// An empty write ("\n") clears the override.
		if err := b.write(filepath.Join(dev, "driver_override"), want+"\n"); err != nil {
			return "", err
		}
	}
	if cur == driver {
		return cur, nil
	}
	if cur != "" {
		if err := b.write(filepath.Join(dev, "driver", "unbind"), addr); err != nil {
			return "", err
		}
		b.log.Info("unbound PCI function", "addr", addr, "driver", cur)
	}
	if driver == "" {
		return cur, nil
	}
	if override {
		err = b.write(filepath.Join(b.sys, "bus", "pci", "drivers_probe"), addr)
	} else {
		err = b.write(filepath.Join(b.sys, "bus", "pci", "drivers", driver, "bind"), addr)
	}
	if err != nil {
		return "", fmt.Errorf("%w (function %s is now unbound, was %q)", err, addr, cur)
	}
	deadline := time.Now().Add(b.timeout)
	for {
		got, err := b.Driver(addr)
		if err != nil {
			return "", err
		}
		if got == driver {
			break
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("vf: PCI function %s: bound to %q after probing, want %s (was %q)", addr, got, driver, cur)
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.log.Info("bound PCI function", "addr", addr, "driver", driver, "previous", cur)
	return cur, nil
}

// Release gives a PCI function that BindVFIO moved to vfio-pci back to the
// kernel's choice of driver: it clears driver_override, unbinds it from
// vfio-pci and asks the PCI core to probe it (drivers_probe), then waits
// until a driver other than vfio-pci holds it. A function already on
// another driver is left alone; idempotent. Use it when the previous
// driver was not recorded (a restarted agent): the native driver of a VF
// (mlx5_core, ...) is the one the kernel picks.
func (b *Binder) Release(addr string) error {
	cur, err := b.Driver(addr)
	if err != nil {
		return err
	}
	if ov, err := b.override(addr); err != nil {
		return err
	} else if ov != "" {
		if err := b.write(filepath.Join(b.dev(addr), "driver_override"), "\n"); err != nil {
			return err
		}
	}
	switch cur {
	case VFIODriver:
		if err := b.write(filepath.Join(b.dev(addr), "driver", "unbind"), addr); err != nil {
			return err
		}
		b.log.Info("unbound PCI function", "addr", addr, "driver", cur)
	case "":
	default:
		return nil
	}
	if err := b.write(filepath.Join(b.sys, "bus", "pci", "drivers_probe"), addr); err != nil {
		return fmt.Errorf("%w (function %s is now unbound)", err, addr)
	}
	deadline := time.Now().Add(b.timeout)
	for {
		got, err := b.Driver(addr)
		if err != nil {
			return err
		}
		if got != "" && got != VFIODriver {
			b.log.Info("released PCI function", "addr", addr, "driver", got)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("vf: PCI function %s: no driver took it after probing (on %q)", addr, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// IOMMUGroup returns the /dev/vfio path of a PCI function's IOMMU group,
// which a hypervisor opens to use the function once it is on vfio-pci.
func (b *Binder) IOMMUGroup(addr string) (string, error) {
	t, err := os.Readlink(filepath.Join(b.dev(addr), "iommu_group"))
	if err != nil {
		return "", fmt.Errorf("vf: PCI function %s has no IOMMU group (is the IOMMU on?): %w", addr, err)
	}
	return "/dev/vfio/" + filepath.Base(t), nil
}
