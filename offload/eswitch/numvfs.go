package eswitch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// pfDevice finds the device directory of a PF netdev.
func (d *Discoverer) pfDevice(pfNetdev string) (string, error) {
	link := filepath.Join(d.sys, "class", "net", pfNetdev, "device")
	dev, err := resolve(link)
	if err != nil {
		return "", fmt.Errorf("pf %s: %w", pfNetdev, err)
	}
	if !exists(filepath.Join(dev, "sriov_numvfs")) {
		return "", fmt.Errorf("pf %s: %w", pfNetdev, pathErr(filepath.Join(dev, "sriov_numvfs"), "missing: the device has no SR-IOV", nil))
	}
	return dev, nil
}

// NumVFs returns sriov_numvfs and sriov_totalvfs (-1 when the device does
// not give a total) of a PF.
func (d *Discoverer) NumVFs(pfNetdev string) (num, total int, err error) {
	dev, err := d.pfDevice(pfNetdev)
	if err != nil {
		return 0, 0, err
	}
	num, _, err = readInt(filepath.Join(dev, "sriov_numvfs"))
	if err != nil {
		return 0, 0, fmt.Errorf("pf %s: %w", pfNetdev, err)
	}
	total, ok, err := readInt(filepath.Join(dev, "sriov_totalvfs"))
	if err != nil {
		return 0, 0, fmt.Errorf("pf %s: %w", pfNetdev, err)
	}
	if !ok {
		total = -1
	}
	return num, total, nil
}

// SetNumVFs sets the number of VFs of a PF. The kernel refuses to change a
// nonzero count to another nonzero count (EBUSY), so such a change goes
// through 0, which destroys the existing VFs. Setting the current count is
// a no-op.
func (d *Discoverer) SetNumVFs(pfNetdev string, n int) error {
	if n < 0 {
		return fmt.Errorf("pf %s: negative VF count %d", pfNetdev, n)
	}
	cur, total, err := d.NumVFs(pfNetdev)
	if err != nil {
		return err
	}
	if cur == n {
		return nil
	}
	dev, _ := d.pfDevice(pfNetdev) // checked by NumVFs
	path := filepath.Join(dev, "sriov_numvfs")
	if total >= 0 && n > total {
		return fmt.Errorf("pf %s: %w", pfNetdev, pathErr(path, fmt.Sprintf("cannot set %d VFs: sriov_totalvfs is %d", n, total), nil))
	}
	write := func(v int) error {
		// O_WRONLY without O_CREATE: a vanished attribute is an error, not
		// a new file.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return fmt.Errorf("pf %s: %w", pfNetdev, pathErr(path, "cannot open", err))
		}
		if _, err := f.WriteString(strconv.Itoa(v)); err != nil {
			f.Close()
			return fmt.Errorf("pf %s: %w", pfNetdev, pathErr(path, fmt.Sprintf("cannot write %d", v), err))
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("pf %s: %w", pfNetdev, pathErr(path, fmt.Sprintf("cannot write %d", v), err))
		}
		return nil
	}
	if cur == 0 || n == 0 {
		if err := write(n); err != nil {
			return err
		}
		d.log.Info("set VF count", "pf", pfNetdev, "from", cur, "to", n)
		return nil
	}
	// Nonzero to nonzero: through 0. Drivers may fall back to legacy
	// mode when the VFs go (netdevsim does), so the eswitch mode is put
	// back afterwards; and when the new count is refused, the old one is
	// restored rather than leaving the PF without VFs.
	ctx := context.Background()
	mode, modeErr := d.Mode(ctx, pfNetdev)
	d.log.Info("resetting VF count through 0", "pf", pfNetdev, "from", cur, "to", n, "mode", mode)
	if err := write(0); err != nil {
		return err
	}
	if err := write(n); err != nil {
		if rerr := write(cur); rerr != nil {
			return fmt.Errorf("%w; restoring %d VFs failed too: %w", err, cur, rerr)
		}
		if modeErr == nil {
			if rerr := d.SetMode(ctx, pfNetdev, mode); rerr != nil {
				return fmt.Errorf("%w; %d VFs restored but not eswitch mode %s: %w", err, cur, mode, rerr)
			}
		}
		return fmt.Errorf("%w (the previous %d VFs were restored)", err, cur)
	}
	if modeErr == nil && mode != ModeNone {
		if err := d.SetMode(ctx, pfNetdev, mode); err != nil {
			return fmt.Errorf("pf %s: %d VFs set, but restoring eswitch mode %s: %w", pfNetdev, n, mode, err)
		}
	}
	d.log.Info("set VF count", "pf", pfNetdev, "from", cur, "to", n)
	return nil
}

// Mode returns the eswitch mode of a PF.
func (d *Discoverer) Mode(ctx context.Context, pfNetdev string) (Mode, error) {
	h, err := d.devlinkHandle(pfNetdev)
	if err != nil {
		return ModeNone, err
	}
	m, err := d.dl.EswitchMode(ctx, h)
	if err != nil {
		return ModeNone, fmt.Errorf("pf %s: %w", pfNetdev, err)
	}
	return m, nil
}

// SetMode sets the eswitch mode of a PF through devlink; setting the
// current mode is a no-op. Note that the PF's netdevs may be renamed or
// recreated by the driver (representors appear in switchdev mode): discover
// again afterwards.
func (d *Discoverer) SetMode(ctx context.Context, pfNetdev string, m Mode) error {
	if m != ModeLegacy && m != ModeSwitchdev {
		return fmt.Errorf("pf %s: invalid eswitch mode %q", pfNetdev, m)
	}
	h, err := d.devlinkHandle(pfNetdev)
	if err != nil {
		return err
	}
	cur, err := d.dl.EswitchMode(ctx, h)
	if err != nil {
		return fmt.Errorf("pf %s: %w", pfNetdev, err)
	}
	if cur == m {
		return nil
	}
	if err := d.dl.SetEswitchMode(ctx, h, m); err != nil {
		return fmt.Errorf("pf %s: set eswitch mode %s on %s: %w", pfNetdev, m, h, err)
	}
	d.log.Info("set eswitch mode", "pf", pfNetdev, "devlink", h, "from", cur, "to", m)
	return nil
}

// devlinkHandle gives "bus/device" for a netdev from its device link.
func (d *Discoverer) devlinkHandle(pfNetdev string) (string, error) {
	link := filepath.Join(d.sys, "class", "net", pfNetdev, "device")
	dev, err := resolve(link)
	if err != nil {
		return "", fmt.Errorf("pf %s: %w", pfNetdev, err)
	}
	bus, ok, err := linkBase(filepath.Join(dev, "subsystem"))
	if err != nil {
		return "", fmt.Errorf("pf %s: %w", pfNetdev, err)
	}
	if !ok {
		return "", fmt.Errorf("pf %s: %w", pfNetdev, pathErr(filepath.Join(dev, "subsystem"), "missing", nil))
	}
	return bus + "/" + filepath.Base(dev), nil
}
