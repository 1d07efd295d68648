package flower

import "errors"

// ruleID is what identifies a rule among a device's dumped filters: its
// cookie less the mark and the installation bytes.
type ruleID [cookieLen - 4]byte

func idOf(cookie []byte) ruleID { return ruleID(cookie[4:]) }

// read puts the state of the rules at idx (all on dev), as dumped now,
// into states.
func (p *Programmer) read(dev Device, rules []Rule, cookies [][]byte, idx []int, states []State) error {
	now, _, err := p.dump(dev)
	if err != nil {
		return err
	}
	got := make(map[ruleID]int, len(now))
	for j, h := range now {
		if h.chain == ChainForward {
			got[idOf(h.cookie)] = j
		}
	}
	for _, i := range idx {
		if j, ok := got[idOf(cookies[i])]; ok {
			states[i] = p.state(rules[i], dev, now[j])
			states[i].cookie = cookies[i]
		}
	}
	return nil
}

// Read returns the state and counters of rules as the kernel holds them
// now (one terse dump per device); it writes nothing.
func (p *Programmer) Read(devs map[string]Device, rules []Rule) ([]State, error) {
	byDev, cookies := index(devs, rules)
	return p.readAll(devs, rules, byDev, cookies)
}

// Refresh is Read of the rules of states (as Sync, Change or Read
// returned them for devs, in a copy of the caller's), matched by the
// cookies made then, updating states in place: only a rule that was not
// installed has its cookie made again, nothing else is made per rule.
// On error, the states of the devices that could not be read lose their
// counters and state.
func (p *Programmer) Refresh(devs map[string]Device, out []State) error {
	byDev := map[string][]int{}
	for i := range out {
		if out[i].cookie == nil {
			out[i].cookie = cookieFor(devs, out[i].Rule)
		}
		byDev[out[i].Rule.Dev] = append(byDev[out[i].Rule.Dev], i)
	}
	var errs []error
	for name, idx := range byDev {
		dev, ok := devs[name]
		if !ok {
			for _, i := range idx {
				out[i] = State{Rule: out[i].Rule}
			}
			continue
		}
		now, _, err := p.dump(dev)
		if err != nil {
			errs = append(errs, err)
			for _, i := range idx {
				out[i] = State{Rule: out[i].Rule}
			}
			continue
		}
		got := make(map[ruleID]int, len(now))
		for j, h := range now {
			if h.chain == ChainForward {
				got[idOf(h.cookie)] = j
			}
		}
		for _, i := range idx {
			ck := out[i].cookie
			if j, ok := got[idOf(ck)]; ok {
				out[i] = p.state(out[i].Rule, dev, now[j])
				out[i].cookie = ck
			} else {
				out[i] = State{Rule: out[i].Rule}
			}
		}
	}
	return errors.Join(errs...)
}

func (p *Programmer) readAll(devs map[string]Device, rules []Rule, byDev map[string][]int, cookies [][]byte) ([]State, error) {
	states := make([]State, len(rules))
	var errs []error
	for name, idx := range byDev {
		dev, ok := devs[name]
		if !ok {
			continue
		}
		if err := p.read(dev, rules, cookies, idx, states); err != nil {
			errs = append(errs, err)
		}
	}
	return fill(rules, states), errors.Join(errs...)
}
