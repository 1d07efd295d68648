package nl

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
)

// VF is what a PF reports for one of its virtual functions
// (IFLA_VF_INFO), with the kernel's names.
type VF struct {
	ID                   int
	Mac                  net.HardwareAddr
	Vlan, Qos            int
	Spoofchk             bool
	Trust                uint32 // 1: trusted
	LinkState            uint32 // unix.IFLA_VF_LINK_STATE_*
	MinTxRate, MaxTxRate uint32 // Mbit/s
}

// SRIOV sets VF settings through their PF over rtnetlink, in the caller's
// network namespace. Every method is one netlink conversation; safe for
// concurrent use.
type SRIOV struct{}

func pfLink(pf string) (netlink.Link, error) {
	l, err := netlink.LinkByName(pf)
	if err != nil {
		return nil, fmt.Errorf("nl: %w", err)
	}
	return l, nil
}

// VFs lists what the PF reports for each of its VFs.
func (SRIOV) VFs(pf string) ([]VF, error) {
	l, err := pfLink(pf)
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

// set runs f on the PF's link.
func set(pf string, f func(l netlink.Link) error) error {
	l, err := pfLink(pf)
	if err != nil {
		return err
	}
	return f(l)
}

// SetVFMAC sets a VF's MAC address.
func (SRIOV) SetVFMAC(pf string, vf int, mac net.HardwareAddr) error {
	return set(pf, func(l netlink.Link) error { return netlink.LinkSetVfHardwareAddr(l, vf, mac) })
}

// SetVFVlanQos sets a VF's VLAN (0: none) and its priority.
func (SRIOV) SetVFVlanQos(pf string, vf, vlan, qos int) error {
	return set(pf, func(l netlink.Link) error { return netlink.LinkSetVfVlanQos(l, vf, vlan, qos) })
}

// SetVFSpoofCheck turns a VF's source MAC check on or off.
func (SRIOV) SetVFSpoofCheck(pf string, vf int, on bool) error {
	return set(pf, func(l netlink.Link) error { return netlink.LinkSetVfSpoofchk(l, vf, on) })
}

// SetVFTrust trusts a VF or not.
func (SRIOV) SetVFTrust(pf string, vf int, on bool) error {
	return set(pf, func(l netlink.Link) error { return netlink.LinkSetVfTrust(l, vf, on) })
}

// SetVFLinkState sets a VF's administrative link state
// (unix.IFLA_VF_LINK_STATE_*).
func (SRIOV) SetVFLinkState(pf string, vf int, state uint32) error {
	return set(pf, func(l netlink.Link) error { return netlink.LinkSetVfState(l, vf, state) })
}

// SetVFRate sets a VF's minimum and maximum transmit rates in Mbit/s (0:
// no limit).
func (SRIOV) SetVFRate(pf string, vf, minRate, maxRate int) error {
	return set(pf, func(l netlink.Link) error { return netlink.LinkSetVfRate(l, vf, minRate, maxRate) })
}
