package nl

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The devlink and SR-IOV calls of a namespace's handle.

func (k *real) EswitchMode(bus, device string) (string, error) {
	d, err := k.h.DevLinkGetDeviceByName(bus, device)
	if err != nil {
		return "", fmt.Errorf("nl: devlink %s/%s: %w", bus, device, err)
	}
	// The library drops the error of its eswitch query (EOPNOTSUPP for
	// a device without an eswitch) and leaves the mode empty.
	return d.Attrs.Eswitch.Mode, nil
}

func (k *real) SetEswitchMode(bus, device, mode string) error {
	k.w()
	if err := k.h.DevLinkSetEswitchMode(&netlink.DevlinkDevice{BusName: bus, DeviceName: device}, mode); err != nil {
		return fmt.Errorf("nl: devlink %s/%s: set eswitch mode %s: %w", bus, device, mode, err)
	}
	return nil
}

// pf is the PF's link, with its VFs' settings when vfs.
func (k *real) pf(name string, vfs bool) (netlink.Link, error) {
	l, err := k.getLink(name, 0, vfs)
	if errors.Is(err, unix.ENODEV) {
		return nil, fmt.Errorf("nl: pf %s: %w", name, ErrNoLink)
	}
	if err != nil {
		return nil, fmt.Errorf("nl: pf %s: %w", name, err)
	}
	return l, nil
}

func (k *real) VFs(pf string) ([]VF, error) {
	l, err := k.pf(pf, true)
	if err != nil {
		return nil, err
	}
	var out []VF
	for _, v := range l.Attrs().Vfs {
		out = append(out, VF{ID: v.ID, Mac: v.Mac, Vlan: v.Vlan, Qos: v.Qos, Spoofchk: v.Spoofchk, Trust: v.Trust,
			LinkState: v.LinkState, MinTxRate: v.MinTxRate, MaxTxRate: v.MaxTxRate})
	}
	return out, nil
}

// setVF runs f on the PF's link.
func (k *real) setVF(pf string, vf int, what string, f func(l netlink.Link) error) error {
	k.w()
	l, err := k.pf(pf, false)
	if err != nil {
		return err
	}
	if err := f(l); err != nil {
		return fmt.Errorf("nl: pf %s vf %d: set %s: %w", pf, vf, what, err)
	}
	return nil
}

func (k *real) SetVFMAC(pf string, vf int, mac net.HardwareAddr) error {
	return k.setVF(pf, vf, "mac", func(l netlink.Link) error { return k.h.LinkSetVfHardwareAddr(l, vf, mac) })
}

func (k *real) SetVFVlanQos(pf string, vf, vlan, qos int) error {
	return k.setVF(pf, vf, "vlan", func(l netlink.Link) error { return k.h.LinkSetVfVlanQos(l, vf, vlan, qos) })
}

func (k *real) SetVFSpoofCheck(pf string, vf int, on bool) error {
	return k.setVF(pf, vf, "spoof check", func(l netlink.Link) error { return k.h.LinkSetVfSpoofchk(l, vf, on) })
}

func (k *real) SetVFTrust(pf string, vf int, on bool) error {
	return k.setVF(pf, vf, "trust", func(l netlink.Link) error { return k.h.LinkSetVfTrust(l, vf, on) })
}

func (k *real) SetVFLinkState(pf string, vf int, state uint32) error {
	return k.setVF(pf, vf, "link state", func(l netlink.Link) error { return k.h.LinkSetVfState(l, vf, state) })
}

func (k *real) SetVFRate(pf string, vf, minRate, maxRate int) error {
	return k.setVF(pf, vf, "rate", func(l netlink.Link) error { return k.h.LinkSetVfRate(l, vf, minRate, maxRate) })
}
