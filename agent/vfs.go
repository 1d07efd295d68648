package agent

import (
	"context"
	"fmt"
	"regexp"
	"slices"

	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/eswitch"
)

// A pod's VF named by PCI address (the device plugin's device ID).

// LocalVF is a VF of this node: its PF's netdev and device (PCI address),
// and its index.
type LocalVF struct {
	PF, PFDevice string
	Index        int
}

// VFByPCIFrom finds VFs by PCI address through eswitch discovery (done
// again at each call: VFs come and go). A VF whose PF's eswitch is not in
// switchdev mode, or that has no representor, is refused with the
// reason: its traffic could not be steered.
func VFByPCIFrom(d *eswitch.Discoverer) func(ctx context.Context, pci string) (LocalVF, error) {
	return func(ctx context.Context, pci string) (LocalVF, error) {
		n, err := d.Discover(ctx)
		if err != nil {
			return LocalVF{}, fmt.Errorf("discovering VFs: %w", err)
		}
		pf, v, err := n.VFByPCI(pci)
		if err != nil {
			return LocalVF{}, fmt.Errorf("not a VF of this node: %w", err)
		}
		switch {
		case pf.Mode != eswitch.ModeSwitchdev:
			return LocalVF{}, fmt.Errorf("VF %d of %s: its PF's eswitch is not in switchdev mode (%q): a pod's VF needs its representor", v.Index, pf.Netdev, pf.Mode)
		case v.Representor == "":
			return LocalVF{}, fmt.Errorf("VF %d of %s has no representor: its traffic could not be steered", v.Index, pf.Netdev)
		}
		return LocalVF{PF: pf.Netdev, PFDevice: pf.Device, Index: v.Index}, nil
	}
}

var pciRE = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// resolveDevice turns a create's deviceID into its PF and VF index,
// refusing an unknown VF and one another endpoint of this node holds,
// before anything is asked of the controller or done to the VF.
func (a *Agent) resolveDevice(ctx context.Context, r localapi.CreateRequest) (localapi.CreateRequest, error) {
	if r.DeviceID == "" {
		return r, nil
	}
	switch {
	case !pciRE.MatchString(r.DeviceID):
		return r, invalid("deviceID: %q is not a PCI address (0000:03:00.2)", r.DeviceID)
	case r.PF != "" || r.VF != nil:
		return r, invalid("deviceID: give either deviceID or pf and vf, not both")
	case r.Kind != "" && r.Kind != plan.KindVF:
		return r, invalid("deviceID: only for kind vf, not %q", r.Kind)
	case !slices.Contains(a.dp.Kinds(), plan.KindVF):
		// No silent veth: the pod asked for a VF.
		return r, invalid("deviceID %s: this node's datapath (mode %s) has no VF endpoints: a pod's VF needs an eswitch in switchdev mode and the agent in offload mode", r.DeviceID, a.mode)
	case a.vfByPCI == nil:
		return r, invalid("deviceID %s: this node's agent has no VF discovery", r.DeviceID)
	}
	v, err := a.vfByPCI(ctx, r.DeviceID)
	if err != nil {
		return r, invalid("deviceID %s: %v", r.DeviceID, err)
	}
	for name, e := range a.current().Local {
		if name != r.Name && (e.Kind == plan.KindVF || e.Kind == plan.KindVFIO) && e.VFIndex == v.Index && (e.PF == v.PF || e.PF == v.PFDevice) {
			return r, &localapi.Error{Code: localapi.CodeExists, Message: fmt.Sprintf("deviceID %s: VF %d of %s is held by endpoint %s (%s)", r.DeviceID, v.Index, v.PF, name, e.Owner)}
		}
	}
	idx := v.Index
	r.PF, r.VF, r.Kind = v.PF, &idx, plan.KindVF
	return r, nil
}
