package offload

import (
	"errors"
	"fmt"
	"net"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/eswitch"
	"github.com/skiff-sdn/skiff/offload/vf"
)

// VM ports on an offload node.
//
// A tap port is its own port on the eswitch path, like a pod's veth: its
// ingress holds the port's rules, and traffic for it is redirected to it.
// A tap is not a switchdev port, so its rules run in software (the host's
// CPU carries the guest's frames; only the encapsulated traffic crosses
// the NIC). A vfio port is a VF handed to the guest whole: its MAC, VLAN
// and spoof check are set through the PF, its PCI function is bound to
// vfio-pci for the hypervisor, and its representor carries the rules, in
// hardware where the NIC takes them.

// VFHost sets VFs up for vfio ports: offload/vf's Manager (settings
// through the PF) and Binder (PCI drivers through sysfs). The datapath
// makes the real one from Options.SysRoot when Options.VFs is nil.
type VFHost interface {
	// Apply sets what differs of s on VF vf of PF netdev pf. Idempotent.
	Apply(pf string, vf int, s vf.Settings) error
	// BindVFIO binds the PCI function to vfio-pci. Idempotent.
	BindVFIO(pci string) (previous string, err error)
	// Release gives the function back to the driver the kernel picks.
	// Idempotent.
	Release(pci string) error
	// IOMMUGroup is the function's /dev/vfio group path.
	IOMMUGroup(pci string) (string, error)
}

// realVFs is VFHost over the kernel.
type realVFs struct {
	*vf.Manager
	*vf.Binder
}

func newVFHost(o Options, k nl.Kernel) VFHost {
	return realVFs{vf.NewManager(vf.Options{Netlink: k, Logger: o.Logger}), vf.NewBinder(vf.BinderOptions{SysRoot: o.SysRoot, Logger: o.Logger})}
}

// portSettings are what a vfio port's VF gets through its PF: the port's
// MAC, no VLAN, spoof check on, trust off, link state following the
// uplink.
func portSettings(mac net.HardwareAddr) vf.Settings {
	return vf.Settings{MAC: mac, VLAN: vf.Ptr(0), QoS: vf.Ptr(0), SpoofCheck: vf.Ptr(true), Trust: vf.Ptr(false), LinkState: vf.Ptr(vf.LinkAuto)}
}

// zeroMAC is what a released VF's MAC is set back to.
var zeroMAC = net.HardwareAddr{0, 0, 0, 0, 0, 0}

// plumbVFIO sets up a vfio port's VF and binds it to vfio-pci. It is
// idempotent (settings that match and a function already on vfio-pci are
// left as they are); on error the VF is released and nothing stays bound.
func (d *Datapath) plumbVFIO(req datapath.PlumbRequest) (datapath.Plumbed, error) {
	e := req.Endpoint
	pf, v, err := d.vfOf(e)
	if err != nil {
		return datapath.Plumbed{}, err
	}
	mac, err := net.ParseMAC(e.MAC)
	if err != nil {
		return datapath.Plumbed{}, fmt.Errorf("offload datapath: endpoint %s: mac %q: %w", e.Name, e.MAC, err)
	}
	d.gate.Plumbing(e.Name)
	out := datapath.Plumbed{HostIf: v.Representor, PCIAddress: v.PCIAddress, MTU: datapath.EndpointMTU(req.Network, req.MTU),
		Gateways: datapath.Gateways(e, req.Network)}
	undo := func(err error) (datapath.Plumbed, error) {
		return datapath.Plumbed{}, errors.Join(err, d.releaseVF(pf.Netdev, v))
	}
	if err := d.vfs.Apply(pf.Netdev, v.Index, portSettings(mac)); err != nil {
		return undo(fmt.Errorf("offload datapath: endpoint %s: %w", e.Name, err))
	}
	if _, err := d.vfs.BindVFIO(v.PCIAddress); err != nil {
		return undo(fmt.Errorf("offload datapath: endpoint %s: %w", e.Name, err))
	}
	if out.VFIOGroup, err = d.vfs.IOMMUGroup(v.PCIAddress); err != nil {
		return undo(fmt.Errorf("offload datapath: endpoint %s: %w", e.Name, err))
	}
	return out, nil
}

// unplumbVFIO gives a vfio port's VF back: its PCI function to its native
// driver, its MAC cleared. A VF that is no longer there is not an error.
func (d *Datapath) unplumbVFIO(e plan.Endpoint) error {
	pf, v, err := d.vfOf(e)
	if err != nil {
		d.log.Info("vfio port's VF is gone; nothing to give back", "endpoint", e.Name, "err", err)
		return nil
	}
	return d.releaseVF(pf.Netdev, v)
}

func (d *Datapath) releaseVF(pf string, v eswitch.VF) error {
	var errs []error
	if err := d.vfs.Release(v.PCIAddress); err != nil {
		errs = append(errs, fmt.Errorf("offload datapath: VF %d of %s: %w", v.Index, pf, err))
	}
	if err := d.vfs.Apply(pf, v.Index, vf.Settings{MAC: zeroMAC}); err != nil {
		errs = append(errs, fmt.Errorf("offload datapath: VF %d of %s: %w", v.Index, pf, err))
	}
	return errors.Join(errs...)
}

// vfOf finds a vfio port's VF on this node: it must have a PCI function
// (to bind) and a representor (to carry its rules).
func (d *Datapath) vfOf(e plan.Endpoint) (*eswitch.PF, eswitch.VF, error) {
	pf, v, ok := d.ports.vf(e)
	switch {
	case pf == nil:
		return nil, eswitch.VF{}, fmt.Errorf("offload datapath: endpoint %s: no PF %q on this node", e.Name, e.PF)
	case !ok:
		return nil, eswitch.VF{}, fmt.Errorf("offload datapath: endpoint %s: PF %s has no VF %d (it has %d)", e.Name, pf.Netdev, e.VFIndex, len(pf.VFs))
	case v.PCIAddress == "":
		return nil, eswitch.VF{}, fmt.Errorf("offload datapath: endpoint %s: VF %d of %s is not a PCI function: it cannot be bound to vfio-pci", e.Name, e.VFIndex, pf.Netdev)
	case v.Representor == "":
		return nil, eswitch.VF{}, fmt.Errorf("offload datapath: endpoint %s: VF %d of %s has no representor (is the eswitch in switchdev mode?)", e.Name, e.VFIndex, pf.Netdev)
	}
	return pf, v, nil
}
