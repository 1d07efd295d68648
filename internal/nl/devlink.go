package nl

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// EswitchMode returns the eswitch mode ("legacy", "switchdev") of the
// devlink device bus/device in the caller's namespace; "" when the
// device has no eswitch (the library drops the error of its eswitch
// query, EOPNOTSUPP, and leaves the mode empty). A missing device is an
// error wrapping ENODEV or ENOENT.
func EswitchMode(bus, device string) (string, error) {
	d, err := netlink.DevLinkGetDeviceByName(bus, device)
	if err != nil {
		return "", fmt.Errorf("nl: devlink %s/%s: %w", bus, device, err)
	}
	return d.Attrs.Eswitch.Mode, nil
}

// SetEswitchMode sets the eswitch mode ("legacy", "switchdev") of the
// devlink device bus/device in the caller's namespace.
func SetEswitchMode(bus, device, mode string) error {
	if err := netlink.DevLinkSetEswitchMode(&netlink.DevlinkDevice{BusName: bus, DeviceName: device}, mode); err != nil {
		return fmt.Errorf("nl: devlink %s/%s: set eswitch mode %s: %w", bus, device, mode, err)
	}
	return nil
}
