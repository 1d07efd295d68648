package dpu

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/skiff-sdn/skiff/offload/eswitch"
)

// EswitchRepresentors finds the host's VF representors on a BlueField's
// Arm side through eswitch discovery: the host names its PF by PCI
// address, whose function number N is the DPU's pf<N>; the VF's
// representor is c1pf<N>vf<M> (pf<N>vf<M> on older firmware).
type EswitchRepresentors struct{ Discoverer *eswitch.Discoverer }

// Netdev implements Representors.
func (r EswitchRepresentors) Netdev(ctx context.Context, pf string, index int) (string, error) {
	num, err := pfNumber(pf)
	if err != nil {
		return "", err
	}
	n, err := r.Discoverer.Discover(ctx)
	if err != nil {
		return "", fmt.Errorf("discovering the eswitch: %w", err)
	}
	for i := range n.PFs {
		if n.PFs[i].Number != num || n.PFs[i].Mode != eswitch.ModeSwitchdev {
			continue
		}
		rep, err := n.PFs[i].ExternalRepresentorForVF(index)
		if err != nil {
			return "", err
		}
		return rep.Netdev, nil
	}
	return "", fmt.Errorf("no PF %d in switchdev mode on this DPU (for the host's PF %s)", num, pf)
}

// pfNumber is the PCI function number of a PF's PCI address
// (0000:03:00.1 -> 1).
func pfNumber(pf string) (int, error) {
	_, fn, ok := strings.Cut(pf, ".")
	n, err := strconv.Atoi(fn)
	if !ok || err != nil || strings.Count(pf, ":") != 2 {
		return 0, fmt.Errorf("pf: %q is not a PCI address (the host names its PFs by PCI address in mode dpu-host)", pf)
	}
	return n, nil
}
