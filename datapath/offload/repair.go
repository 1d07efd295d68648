package offload

import (
	"github.com/skiff-sdn/skiff/offload/flower"
)

// forgotten are the places of a device's filters, of the forwarding
// and of the policy programmer, that someone else deleted or changed
// (the programmers' Forget).
type forgotten struct {
	fwd, pol []flower.Place
}

// repair writes again the rules of the last Apply whose filters someone
// else deleted or changed (fixes, by ifindex): the rules at those places
// alone, through the programmers' Change (a deleted filter added again,
// a changed one replaced at its handle), without reading the kernel.
// flower.ErrNotIncremental: nothing was written, the whole plan must be
// applied. Callers hold d.op.
func (d *Datapath) repair(fixes map[int]forgotten) error {
	if len(fixes) == 0 {
		return nil
	}
	// The places by handle first (a comparison of integers per rule),
	// then the device.
	var fwdPlaces, polPlaces []place
	for i, f := range fixes {
		for _, p := range f.fwd {
			fwdPlaces = append(fwdPlaces, place{i, p})
		}
		for _, p := range f.pol {
			polPlaces = append(polPlaces, place{i, p})
		}
	}
	d.mu.Lock()
	devs := d.devs
	var fwd []flower.Rule
	for _, s := range d.states {
		if hit(fwdPlaces, devs, s.Rule.Dev, flower.ChainForward, s.Rule.Prio, s.Handle) {
			fwd = append(fwd, s.Rule)
		}
	}
	var pol []flower.PolicyRule
	for _, s := range d.polStates {
		if hit(polPlaces, devs, s.Rule.Dev, s.Rule.Chain, s.Rule.Prio, s.Handle) {
			pol = append(pol, s.Rule)
		}
	}
	d.mu.Unlock()
	// The policy pipeline first (chain 0 leads to forwarding).
	if len(pol) > 0 {
		if err := d.changePolicy(devs, pol, pol); err != nil {
			return err
		}
	}
	if len(fwd) > 0 {
		now, err := d.prog.Change(devs, fwd, fwd)
		if err != nil {
			return err
		}
		d.mu.Lock()
		swapRules(&d.rules, &d.states, &d.fwdAt, fwdAt, fwd, fwd, now)
		d.mu.Unlock()
	}
	return nil
}

// place is a filter's place on the device at ifindex.
type place struct {
	ifindex int
	flower.Place
}

// hit reports whether a filter on dev at chain, prio and handle is at
// one of ps.
func hit(ps []place, devs map[string]flower.Device, dev string, chain uint32, prio uint16, handle uint32) bool {
	for _, p := range ps {
		if p.Handle == handle && handle != 0 && p.Chain == chain && p.Prio == prio && devs[dev].Index == p.ifindex {
			return true
		}
	}
	return false
}
