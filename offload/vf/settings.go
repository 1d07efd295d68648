package vf

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// Netlink sets VF settings through a PF: an nl.Kernel of the PF's
// namespace is one. Each call names the PF by netdev name.
type Netlink interface {
	VFs(pf string) ([]nl.VF, error)
	SetVFMAC(pf string, vf int, mac net.HardwareAddr) error
	SetVFVlanQos(pf string, vf, vlan, qos int) error
	SetVFSpoofCheck(pf string, vf int, on bool) error
	SetVFTrust(pf string, vf int, on bool) error
	SetVFLinkState(pf string, vf int, state uint32) error
	SetVFRate(pf string, vf, minRate, maxRate int) error
}

// LinkState is a VF's administrative link state as the PF sets it.
type LinkState uint32

// Link states (IFLA_VF_LINK_STATE_*).
const (
	LinkAuto    LinkState = unix.IFLA_VF_LINK_STATE_AUTO
	LinkEnable  LinkState = unix.IFLA_VF_LINK_STATE_ENABLE
	LinkDisable LinkState = unix.IFLA_VF_LINK_STATE_DISABLE
)

func (s LinkState) String() string {
	switch s {
	case LinkAuto:
		return "auto"
	case LinkEnable:
		return "enable"
	case LinkDisable:
		return "disable"
	}
	return fmt.Sprintf("linkstate(%d)", uint32(s))
}

// Settings for one VF. Nil fields are left as they are.
type Settings struct {
	MAC net.HardwareAddr
	// VLAN 0 removes the VLAN; QoS (priority 0-7) goes with it.
	VLAN *int
	QoS  *int
	// SpoofCheck drops frames whose source MAC is not the VF's.
	SpoofCheck *bool
	// Trust lets the VF change its MAC and enter promiscuous mode.
	Trust     *bool
	LinkState *LinkState
	// Rates in Mbit/s; 0 means no limit. Set together.
	MinTxRateMbps *uint32
	MaxTxRateMbps *uint32
}

// Ptr returns a pointer to v, for Settings fields.
func Ptr[T any](v T) *T { return &v }

// Options configure a Manager.
type Options struct {
	// Netlink reaches the PF (required): the nl.Kernel of its
	// namespace.
	Netlink Netlink
	Logger  *slog.Logger
}

// Manager applies VF settings through their PF.
type Manager struct {
	nl  Netlink
	log *slog.Logger
}

// NewManager returns a Manager.
func NewManager(o Options) *Manager {
	m := &Manager{nl: o.Netlink, log: o.Logger}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	return m
}

// State returns what the PF reports for one VF.
func (m *Manager) State(pf string, vf int) (nl.VF, error) {
	vfs, err := m.nl.VFs(pf)
	if err != nil {
		return nl.VF{}, fmt.Errorf("vf: pf %s: %w", pf, err)
	}
	for _, v := range vfs {
		if v.ID == vf {
			return v, nil
		}
	}
	return nl.VF{}, fmt.Errorf("vf: pf %s has no vf %d (it reports %d VFs)", pf, vf, len(vfs))
}

// Apply changes the VF's settings that differ from s. All differing
// settings are tried; the errors of those that fail are joined.
func (m *Manager) Apply(pf string, vf int, s Settings) error {
	if s.VLAN != nil && (*s.VLAN < 0 || *s.VLAN > 4094) {
		return fmt.Errorf("vf: pf %s vf %d: VLAN %d out of 0-4094", pf, vf, *s.VLAN)
	}
	if s.QoS != nil && (*s.QoS < 0 || *s.QoS > 7) {
		return fmt.Errorf("vf: pf %s vf %d: QoS %d out of 0-7", pf, vf, *s.QoS)
	}
	if s.MAC != nil && len(s.MAC) != 6 {
		return fmt.Errorf("vf: pf %s vf %d: MAC %s is not 6 bytes", pf, vf, s.MAC)
	}
	cur, err := m.State(pf, vf)
	if err != nil {
		return err
	}
	var errs []error
	step := func(what string, from, to any, f func() error) {
		if err := f(); err != nil {
			errs = append(errs, fmt.Errorf("vf: pf %s vf %d: set %s %v -> %v: %w", pf, vf, what, from, to, err))
			return
		}
		m.log.Info("vf setting changed", "pf", pf, "vf", vf, "setting", what, "from", from, "to", to)
	}
	if s.MAC != nil && !bytes.Equal(s.MAC, cur.Mac) {
		step("mac", cur.Mac.String(), s.MAC.String(), func() error { return m.nl.SetVFMAC(pf, vf, s.MAC) })
	}
	if s.VLAN != nil || s.QoS != nil {
		vlan, qos := cur.Vlan, cur.Qos
		if s.VLAN != nil {
			vlan = *s.VLAN
		}
		if s.QoS != nil {
			qos = *s.QoS
		}
		if vlan == 0 {
			qos = 0 // the kernel refuses a QoS without a VLAN
		}
		if vlan != cur.Vlan || qos != cur.Qos {
			step("vlan/qos", fmt.Sprintf("%d/%d", cur.Vlan, cur.Qos), fmt.Sprintf("%d/%d", vlan, qos),
				func() error { return m.nl.SetVFVlanQos(pf, vf, vlan, qos) })
		}
	}
	if s.SpoofCheck != nil && *s.SpoofCheck != cur.Spoofchk {
		step("spoofchk", cur.Spoofchk, *s.SpoofCheck, func() error { return m.nl.SetVFSpoofCheck(pf, vf, *s.SpoofCheck) })
	}
	if s.Trust != nil && *s.Trust != (cur.Trust != 0) {
		step("trust", cur.Trust != 0, *s.Trust, func() error { return m.nl.SetVFTrust(pf, vf, *s.Trust) })
	}
	if s.LinkState != nil && uint32(*s.LinkState) != cur.LinkState {
		step("link state", LinkState(cur.LinkState), *s.LinkState, func() error { return m.nl.SetVFLinkState(pf, vf, uint32(*s.LinkState)) })
	}
	if s.MinTxRateMbps != nil || s.MaxTxRateMbps != nil {
		lo, hi := cur.MinTxRate, cur.MaxTxRate
		if s.MinTxRateMbps != nil {
			lo = *s.MinTxRateMbps
		}
		if s.MaxTxRateMbps != nil {
			hi = *s.MaxTxRateMbps
		}
		if hi != 0 && lo > hi {
			errs = append(errs, fmt.Errorf("vf: pf %s vf %d: min rate %d above max rate %d", pf, vf, lo, hi))
		} else if lo != cur.MinTxRate || hi != cur.MaxTxRate {
			step("rate", fmt.Sprintf("%d-%d", cur.MinTxRate, cur.MaxTxRate), fmt.Sprintf("%d-%d", lo, hi),
				func() error { return m.nl.SetVFRate(pf, vf, int(lo), int(hi)) })
		}
	}
	return errors.Join(errs...)
}
