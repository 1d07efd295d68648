package offload

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/eswitch"
	"github.com/skiff-sdn/skiff/offload/vf"
)

// Pods' VFs on an offload node.
//
// A VF endpoint whose VF is a PCI function is the VF itself: set through
// its PF (the endpoint's MAC, VLAN 0, spoof check on, trust off, link
// state auto), its netdev moved into the pod, renamed, addressed and
// routed (offload/vf's Mover); its representor is its port on the
// eswitch, and carries its rules and counters. Unplumb gives the VF back
// to the host under its name with its MAC cleared; Apply gives back VFs
// that the kernel returned from destroyed pod namespaces (Stranded).
//
// A VF that is not a PCI function (netdevsim's own VFs, in test rigs)
// has no netdev to move: a veth standing in for it is plumbed, and its
// traffic is moved into the representor (Port.Target).

// VFMover moves pods' VF netdevs: offload/vf's Mover. Calls on different
// VFs may run concurrently; the datapath serializes its calls.
type VFMover interface {
	// Attach sets the VF through its PF and moves its netdev into podNS
	// as ifc. Idempotent; on error nothing stays changed.
	Attach(ref vf.Ref, s vf.Settings, podNS string, ifc vf.PodIface) error
	// Detach gives the VF back to the host. Idempotent; an error wrapping
	// vf.ErrVFAway says the VF is in no namespace in reach.
	Detach(ref vf.Ref, podNS, podIf string) error
	// Stranded lists those of refs whose netdev is in the host still
	// marked as moved into a pod.
	Stranded(refs []vf.Ref) ([]vf.Ref, error)
}

// podVFs is the datapath's record of its pods' VFs: where Plumb put each
// (Unplumb without a namespace looks there), and one lock for all moves
// and the stranded sweep (which must not take a VF mid-attach for a
// stranded one).
type podVFs struct {
	mu    sync.Mutex
	where map[string][2]string // endpoint -> netns, ifname
}

// podVF finds a VF endpoint's PF and VF for a pod: the PF's eswitch must
// be in switchdev mode and the VF must have a representor. standIn: the
// PF's VFs are not PCI functions (netdevsim: no virtfn links), and the
// VF is known only by its representor.
func (d *Datapath) podVF(e plan.Endpoint) (pf *eswitch.PF, v eswitch.VF, standIn bool, err error) {
	pf, v, ok := d.ports.vf(e)
	switch {
	case pf == nil:
		return nil, v, false, fmt.Errorf("offload datapath: endpoint %s: pf: no PF %q on this node", e.Name, e.PF)
	case pf.Mode != eswitch.ModeSwitchdev:
		return nil, v, false, fmt.Errorf("offload datapath: endpoint %s: PF %s's eswitch is in %s mode: a pod's VF needs switchdev (its representor carries the pod's rules)", e.Name, pf.Netdev, modeName(pf.Mode))
	case !ok && len(pf.VFs) == 0:
		if port, found := d.opts.Representor(e); found {
			return pf, eswitch.VF{Index: e.VFIndex, Representor: port.Rep}, true, nil
		}
		return nil, v, false, fmt.Errorf("offload datapath: endpoint %s: VF %d of %s has no representor: its traffic could not be steered", e.Name, e.VFIndex, pf.Netdev)
	case !ok:
		return nil, v, false, fmt.Errorf("offload datapath: endpoint %s: vf: PF %s has no VF %d (it has %d)", e.Name, pf.Netdev, e.VFIndex, len(pf.VFs))
	case v.Representor == "":
		return nil, v, false, fmt.Errorf("offload datapath: endpoint %s: VF %d of %s has no representor: its traffic could not be steered", e.Name, e.VFIndex, pf.Netdev)
	case v.PCIAddress == "":
		return nil, v, false, fmt.Errorf("offload datapath: endpoint %s: VF %d of %s is not a PCI function: it has no netdev to move into the pod", e.Name, e.VFIndex, pf.Netdev)
	}
	return pf, v, false, nil
}

func modeName(m eswitch.Mode) string {
	if m == "" {
		return "no (unknown)"
	}
	return string(m)
}

// plumbVF gives a pod its VF. Nothing is left changed on error.
func (d *Datapath) plumbVF(req datapath.PlumbRequest) (datapath.Plumbed, error) {
	e := req.Endpoint
	pf, v, standIn, err := d.podVF(e)
	if err != nil {
		return datapath.Plumbed{}, err
	}
	if standIn {
		// A test rig's VF without a netdev: a veth stands in.
		d.gate.Plumbing(e.Name)
		return datapath.PlumbVeth(d.opts.Open, d.k.Path(), req)
	}
	mac, err := net.ParseMAC(e.MAC)
	if err != nil {
		return datapath.Plumbed{}, fmt.Errorf("offload datapath: endpoint %s: mac %q: %w", e.Name, e.MAC, err)
	}
	if req.NetNS == "" {
		return datapath.Plumbed{}, fmt.Errorf("offload datapath: endpoint %s: netns: a pod's VF needs the pod's namespace", e.Name)
	}
	out := datapath.Plumbed{HostIf: v.Representor, PCIAddress: v.PCIAddress, MTU: datapath.EndpointMTU(req.Network, req.MTU),
		Gateways: datapath.Gateways(e, req.Network)}
	ifc := vf.PodIface{Name: req.IfName, MAC: mac, MTU: out.MTU, Addrs: e.IPs, Routes: defaultRoutes(out.Gateways)}
	ref := vf.Ref{PF: pf.Netdev, Index: v.Index, PCI: v.PCIAddress}
	d.podVFs.mu.Lock()
	defer d.podVFs.mu.Unlock()
	d.gate.Plumbing(e.Name)
	if err := d.mover.Attach(ref, vf.PodSettings(mac), req.NetNS, ifc); err != nil {
		return datapath.Plumbed{}, fmt.Errorf("offload datapath: endpoint %s: %w", e.Name, err)
	}
	if d.podVFs.where == nil {
		d.podVFs.where = map[string][2]string{}
	}
	d.podVFs.where[e.Name] = [2]string{req.NetNS, req.IfName}
	return out, nil
}

// defaultRoutes are the default routes of a pod's interface, one per
// gateway (at most one per family).
func defaultRoutes(gws []netip.Addr) []nl.LinkRoute {
	var out []nl.LinkRoute
	var have4, have6 bool
	for _, gw := range gws {
		switch {
		case gw.Is4() && !have4:
			have4 = true
			out = append(out, nl.LinkRoute{Dst: netip.PrefixFrom(netip.IPv4Unspecified(), 0), Gw: gw})
		case gw.Is6() && !have6:
			have6 = true
			out = append(out, nl.LinkRoute{Dst: netip.PrefixFrom(netip.IPv6Unspecified(), 0), Gw: gw})
		}
	}
	return out
}

// unplumbVF gives a pod's VF back to the host under its name, its MAC
// cleared, from req's namespace or, when none is given, where Plumb put
// it. A VF in no namespace in reach (its pod's namespace being
// destroyed) is not an error: the kernel returns it to the host, and
// Apply gives it back then.
func (d *Datapath) unplumbVF(req datapath.UnplumbRequest) error {
	e := req.Endpoint
	pf, v, ok := d.ports.vf(e)
	if pf == nil || !ok || v.PCIAddress == "" {
		// A test rig's stand-in veth, if any; a VF that is not on this
		// node has nothing to give back.
		return datapath.UnplumbVeth(d.opts.Open, d.k.Path(), e.Name)
	}
	d.podVFs.mu.Lock()
	defer d.podVFs.mu.Unlock()
	ns, ifName := req.NetNS, req.IfName
	if w, ok := d.podVFs.where[e.Name]; ok && ns == "" {
		ns, ifName = w[0], w[1]
	}
	ref := vf.Ref{PF: pf.Netdev, Index: v.Index, PCI: v.PCIAddress}
	err := d.mover.Detach(ref, ns, ifName)
	if errors.Is(err, vf.ErrVFAway) {
		d.log.Warn("pod's VF is in no namespace in reach; it is given back when the kernel returns it", "endpoint", e.Name, "vf", v.PCIAddress, "err", err)
		err = nil
	}
	if err != nil {
		return fmt.Errorf("offload datapath: endpoint %s: %w", e.Name, err)
	}
	delete(d.podVFs.where, e.Name)
	return nil
}

// returnStranded gives back the VFs the kernel returned to the host from
// destroyed pod namespaces (still marked as a pod's). It returns how many
// it gave back.
func (d *Datapath) returnStranded() (int, error) {
	node := d.ports.current()
	if node == nil {
		return 0, nil
	}
	refs := vf.RefsOf(node)
	if len(refs) == 0 {
		return 0, nil
	}
	d.podVFs.mu.Lock()
	defer d.podVFs.mu.Unlock()
	stranded, err := d.mover.Stranded(refs)
	errs := []error{err}
	n := 0
	for _, r := range stranded {
		if err := d.mover.Detach(r, "", ""); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
		d.log.Info("stranded VF given back to the host", "vf", r.PCI, "pf", r.PF, "index", r.Index)
	}
	if err := errors.Join(errs...); err != nil {
		return n, fmt.Errorf("offload datapath: stranded VFs: %w", err)
	}
	return n, nil
}
