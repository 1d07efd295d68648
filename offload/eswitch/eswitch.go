package eswitch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// Mode is an eswitch mode.
type Mode string

// Eswitch modes. ModeNone means the device has no eswitch devlink knows of.
const (
	ModeNone      Mode = ""
	ModeLegacy    Mode = "legacy"
	ModeSwitchdev Mode = "switchdev"
)

// Devlink is what this package needs from devlink. Handles are
// "bus/device", e.g. "pci/0000:03:00.0" or "netdevsim/netdevsim10".
type Devlink interface {
	// EswitchMode returns the eswitch mode. A device without an eswitch
	// returns ModeNone and an error wrapping ErrNoEswitch.
	EswitchMode(ctx context.Context, handle string) (Mode, error)
	SetEswitchMode(ctx context.Context, handle string, m Mode) error
}

// ErrNoEswitch is returned by a Devlink when the device has no eswitch.
var ErrNoEswitch = errors.New("device has no eswitch")

// Options configure a Discoverer.
type Options struct {
	// SysRoot is where sysfs is mounted; "/sys" when empty.
	SysRoot string
	// Devlink reads and sets eswitch modes; the devlink netlink family of
	// the current network namespace when nil.
	Devlink Devlink
	// Logger receives debug records of what was found; discarded when nil.
	Logger *slog.Logger
}

// Discoverer finds PFs, VFs and representors, and changes eswitch mode and
// VF counts.
type Discoverer struct {
	sys string
	dl  Devlink
	log *slog.Logger
}

// New returns a Discoverer.
func New(o Options) *Discoverer {
	d := &Discoverer{sys: o.SysRoot, dl: o.Devlink, log: o.Logger}
	if d.sys == "" {
		d.sys = "/sys"
	}
	d.sys = strings.TrimRight(d.sys, "/")
	if d.sys == "" {
		d.sys = "/"
	}
	if d.dl == nil {
		d.dl = NetlinkDevlink{}
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	return d
}

// NodeKind says what a node's eswitches make of it.
type NodeKind string

// Node kinds.
const (
	// NodeNone: no PF in switchdev mode and no DPU representors.
	NodeNone NodeKind = "none"
	// NodeEswitch: a host whose own NIC has an eswitch in switchdev mode.
	NodeEswitch NodeKind = "eswitch"
	// NodeDPU: the Arm side of a DPU, holding representors of an external
	// host's functions (cCpfNvfM, pfNhpf).
	NodeDPU NodeKind = "dpu"
)

// Node is what Discover found.
type Node struct {
	Kind NodeKind
	PFs  []PF
	// Problems found on the way, each a *PathError naming a sysfs path.
	// Objects they concern are left out of PFs.
	Problems []error
}

// PF is a physical function: a NIC port that owns VFs and, in switchdev
// mode, an eswitch.
type PF struct {
	// Netdev is the PF's netdev on this host (the uplink representor in
	// switchdev mode).
	Netdev string
	// Bus and Device name the PF's device: "pci" and its PCI address
	// (0000:03:00.0), or "netdevsim" and "netdevsim10".
	Bus, Device string
	// Number is the PF number representors use (pf<N>): the PCI function
	// number for PCI devices, 0 for other devices (netdevsim).
	Number   int
	Mode     Mode
	SwitchID string // phys_switch_id, empty when the device has none
	PortName string // phys_port_name of the PF netdev, may be empty
	NumVFs   int
	// TotalVFs is sriov_totalvfs; -1 when the device does not say.
	TotalVFs int
	// VFs are this host's VFs of this PF, by index.
	VFs []VF
	// Uplink is the uplink representor (pN), nil in legacy mode.
	Uplink *Representor
	// Representors are all other representors on this PF's eswitch:
	// VFs (own and external), host PFs, SFs, sorted by kind and numbers.
	Representors []Representor
}

// DevlinkHandle is "bus/device", as devlink names it.
func (p *PF) DevlinkHandle() string { return p.Bus + "/" + p.Device }

// VF is a virtual function of a PF, seen from the host that owns it.
type VF struct {
	Index int
	// PCIAddress is empty for VFs that are not PCI functions (netdevsim).
	PCIAddress string
	// Netdev is the VF's own netdev on this host; empty when the VF is
	// bound to a driver without one (vfio-pci) or to no driver.
	Netdev string
	// Driver is the bound driver, empty when unbound.
	Driver string
	// Representor is the netdev of the VF's representor, empty when the
	// eswitch is not in switchdev mode or the driver exposes none.
	Representor string
}

// Representor is a switchdev port netdev.
type Representor struct {
	Netdev string
	Port   PortName
}

// RepresentorForVF finds the representor of this host's VF (controller 0).
func (p *PF) RepresentorForVF(vf int) (Representor, error) {
	return p.find(PortVF, false, vf)
}

// ExternalRepresentorForVF finds the representor of a VF of the external
// host (on a DPU: c1pf0vf3, or pf0vf3 on older firmware).
func (p *PF) ExternalRepresentorForVF(vf int) (Representor, error) {
	return p.find(PortVF, true, vf)
}

// HostPFRepresentor finds the representor of the external host's PF
// (pf0hpf or c1pf0) on a DPU.
func (p *PF) HostPFRepresentor() (Representor, error) {
	return p.find(PortHostPF, true, -1)
}

func (p *PF) find(kind PortKind, external bool, vf int) (Representor, error) {
	var fallback *Representor
	for i := range p.Representors {
		r := &p.Representors[i]
		if r.Port.Kind != kind || (kind == PortVF && r.Port.VF != vf) {
			continue
		}
		if r.Port.External == external {
			return *r, nil
		}
		fallback = r
	}
	// Older BlueField firmware names host VF representors pfNvfM, without
	// the controller: take that form when the controller form is absent.
	if external && fallback != nil {
		return *fallback, nil
	}
	what := string(kind)
	if kind == PortVF {
		what = fmt.Sprintf("vf %d", vf)
	}
	return Representor{}, fmt.Errorf("pf %s (%s): no representor for %s (mode %q, %d representors)", p.Netdev, p.DevlinkHandle(), what, p.Mode, len(p.Representors))
}

// PF returns the PF with the given netdev name.
func (n *Node) PF(netdev string) (*PF, error) {
	for i := range n.PFs {
		if n.PFs[i].Netdev == netdev {
			return &n.PFs[i], nil
		}
	}
	return nil, fmt.Errorf("no PF with netdev %q", netdev)
}

// VFByPCI finds a VF by its PCI address.
func (n *Node) VFByPCI(addr string) (*PF, *VF, error) {
	for i := range n.PFs {
		for j := range n.PFs[i].VFs {
			if n.PFs[i].VFs[j].PCIAddress == addr {
				return &n.PFs[i], &n.PFs[i].VFs[j], nil
			}
		}
	}
	return nil, nil, fmt.Errorf("no VF with PCI address %s", addr)
}
