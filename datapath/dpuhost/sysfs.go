package dpuhost

import (
	"context"
	"fmt"

	"github.com/skiff-sdn/skiff/offload/eswitch"
)

// SysfsVFs finds a real host's VFs through eswitch discovery (sysfs). A
// VF's PF is named by its PCI address: the DPU tells the host's PFs
// apart by their PCI function number (its representors are
// c1pf<N>vf<M>).
type SysfsVFs struct{ Discoverer *eswitch.Discoverer }

// ByPCI implements VFs.
func (s SysfsVFs) ByPCI(ctx context.Context, pci string) (string, int, error) {
	n, err := s.Discoverer.Discover(ctx)
	if err != nil {
		return "", 0, fmt.Errorf("discovering VFs: %w", err)
	}
	pf, v, err := n.VFByPCI(pci)
	if err != nil {
		return "", 0, fmt.Errorf("not a VF of this host: %w", err)
	}
	return pf.Device, v.Index, nil
}

// Netdev implements VFs.
func (s SysfsVFs) Netdev(ctx context.Context, pf string, index int) (string, error) {
	n, err := s.Discoverer.Discover(ctx)
	if err != nil {
		return "", fmt.Errorf("discovering VFs: %w", err)
	}
	for _, p := range n.PFs {
		if p.Device != pf && p.Netdev != pf {
			continue
		}
		for _, v := range p.VFs {
			if v.Index != index {
				continue
			}
			if v.Netdev == "" {
				return "", fmt.Errorf("VF %d of %s has no netdev in the host (driver %q)", index, pf, v.Driver)
			}
			return v.Netdev, nil
		}
		return "", fmt.Errorf("PF %s has no VF %d (it has %d)", pf, index, len(p.VFs))
	}
	return "", fmt.Errorf("no PF %s on this host", pf)
}
