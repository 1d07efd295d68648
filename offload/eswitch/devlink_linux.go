package eswitch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// Eswitches reads and sets the eswitch modes of a namespace's devlink
// devices: an nl.Kernel (the real one, or nltest's fake) is one.
type Eswitches interface {
	EswitchMode(bus, device string) (string, error)
	SetEswitchMode(bus, device, mode string) error
}

// NetlinkDevlink is the Devlink of a namespace's kernel (Kernel), or of
// the current network namespace when Kernel is nil (a handle opened per
// call), over the devlink generic netlink family.
type NetlinkDevlink struct{ Kernel Eswitches }

// kernel returns the Eswitches to use and what closes it.
func (d NetlinkDevlink) kernel() (Eswitches, func(), error) {
	if d.Kernel != nil {
		return d.Kernel, func() {}, nil
	}
	k, err := nl.Open("")
	if err != nil {
		return nil, nil, err
	}
	return k, func() { k.Close() }, nil
}

func splitHandle(h string) (bus, dev string, err error) {
	bus, dev, ok := strings.Cut(h, "/")
	if !ok || bus == "" || dev == "" {
		return "", "", fmt.Errorf("devlink handle %q is not bus/device", h)
	}
	return bus, dev, nil
}

// EswitchMode implements Devlink.
func (d NetlinkDevlink) EswitchMode(_ context.Context, handle string) (Mode, error) {
	bus, dev, err := splitHandle(handle)
	if err != nil {
		return ModeNone, err
	}
	k, done, err := d.kernel()
	if err != nil {
		return ModeNone, fmt.Errorf("devlink %s: %w", handle, err)
	}
	defer done()
	mode, err := k.EswitchMode(bus, dev)
	if err != nil {
		if errors.Is(err, syscall.ENODEV) || errors.Is(err, syscall.ENOENT) {
			return ModeNone, fmt.Errorf("devlink %s: %w: %w", handle, ErrNoEswitch, err)
		}
		return ModeNone, fmt.Errorf("devlink %s: get device: %w", handle, err)
	}
	// An empty mode is a device without an eswitch (EOPNOTSUPP).
	switch mode {
	case "legacy":
		return ModeLegacy, nil
	case "switchdev":
		return ModeSwitchdev, nil
	case "":
		return ModeNone, fmt.Errorf("devlink %s: %w", handle, ErrNoEswitch)
	default:
		return ModeNone, fmt.Errorf("devlink %s: unknown eswitch mode %q", handle, mode)
	}
}

// SetEswitchMode implements Devlink.
func (d NetlinkDevlink) SetEswitchMode(_ context.Context, handle string, m Mode) error {
	bus, dev, err := splitHandle(handle)
	if err != nil {
		return err
	}
	k, done, err := d.kernel()
	if err != nil {
		return fmt.Errorf("devlink %s: %w", handle, err)
	}
	defer done()
	if err := k.SetEswitchMode(bus, dev, string(m)); err != nil {
		return fmt.Errorf("devlink %s: set eswitch mode %s: %w", handle, m, err)
	}
	return nil
}
