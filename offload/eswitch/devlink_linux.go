package eswitch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// NetlinkDevlink is the Devlink of the current network namespace, over the
// devlink generic netlink family.
type NetlinkDevlink struct{}

func splitHandle(h string) (bus, dev string, err error) {
	bus, dev, ok := strings.Cut(h, "/")
	if !ok || bus == "" || dev == "" {
		return "", "", fmt.Errorf("devlink handle %q is not bus/device", h)
	}
	return bus, dev, nil
}

// EswitchMode implements Devlink.
func (NetlinkDevlink) EswitchMode(_ context.Context, handle string) (Mode, error) {
	bus, dev, err := splitHandle(handle)
	if err != nil {
		return ModeNone, err
	}
	mode, err := nl.EswitchMode(bus, dev)
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
func (NetlinkDevlink) SetEswitchMode(_ context.Context, handle string, m Mode) error {
	bus, dev, err := splitHandle(handle)
	if err != nil {
		return err
	}
	if err := nl.SetEswitchMode(bus, dev, string(m)); err != nil {
		return fmt.Errorf("devlink %s: set eswitch mode %s: %w", handle, m, err)
	}
	return nil
}
