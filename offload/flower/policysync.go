package flower

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// PolicyState is a policy rule as the kernel holds it.
type PolicyState struct {
	Rule   PolicyRule
	Handle uint32
	State  string // StateHardware, StateSoftware, StateRefused; "" when not installed
	Reason string // why not in hardware
	// Counters of the rule's first action; HW: what the NIC counted.
	Packets, Bytes     uint64
	HWPackets, HWBytes uint64
}

// PolicyProgrammer installs policy rules (CompilePolicy) over rtnetlink.
// It is not safe for concurrent use.
type PolicyProgrammer struct {
	conn     *PolicyConn
	log      *slog.Logger
	writes   atomic.Int64
	refusals map[string]string // by device and rule: the driver's refusal
}

// OpenPolicyProgrammer returns a programmer for the network namespace at
// the given path (empty: the caller's).
func OpenPolicyProgrammer(netns string, log *slog.Logger) (*PolicyProgrammer, error) {
	c, err := OpenPolicy(netns)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &PolicyProgrammer{conn: c, log: log, refusals: map[string]string{}}, nil
}

// Close releases the socket.
func (p *PolicyProgrammer) Close() error { return p.conn.Close() }

// Writes is the number of filters added, replaced or deleted so far.
func (p *PolicyProgrammer) Writes() int { return int(p.writes.Load()) }

// Messages is the number of netlink messages sent and received so far
// (requests, answers, dump parts).
func (p *PolicyProgrammer) Messages() int64 { return p.conn.c.Messages() }

// place is where a filter sits: two filters with one place cannot both
// be installed.
func place(chain uint32, prio uint16, m PolicyMatch) string {
	return strconv.FormatUint(uint64(chain), 10) + " " + strconv.FormatUint(uint64(prio), 10) + " " + m.String()
}

// dump returns Skiff's policy filters on dev's ingress (a policy cookie on
// the first action); others are never returned, so never touched.
func (p *PolicyProgrammer) dump(dev Device) ([]PolicyFilter, error) {
	fs, err := p.conn.DumpChains(dev.Index, ChainEntry, ChainEgress, ChainIngress)
	if err != nil {
		return nil, fmt.Errorf("flower: policy filters of %s: %w", dev.Name, err)
	}
	out := fs[:0]
	for _, f := range fs {
		if f.Skiff() {
			out = append(out, f)
		}
	}
	return out, nil
}

// Install makes every rule present on its device's ingress: missing rules
// are added, a filter in a rule's place with other actions is replaced in
// place, matching filters are left alone (nothing is written when all
// match). A device's chains are written last to first, and a chain in
// rising priority, so that no packet is sent to a chain before its
// filters are there, nor meets a new deny before the new rules ahead of
// it. Devices in devs that hold Skiff policy filters no rule wants
// return them as stale, for Delete once whatever depends on them has
// moved. Rules on devices not in devs are an error; a device not in devs
// is not looked at.
func (p *PolicyProgrammer) Install(devs map[string]Device, rules []PolicyRule) (states []PolicyState, stale []PolicyFilter, err error) {
	byDev := map[string][]int{}
	var errs []error
	for i, r := range rules {
		if _, ok := devs[r.Dev]; !ok {
			errs = append(errs, fmt.Errorf("flower: policy rule %s for device %s, which is not known", r, r.Dev))
			continue
		}
		byDev[r.Dev] = append(byDev[r.Dev], i)
	}
	for _, idx := range byDev {
		slices.SortStableFunc(idx, func(a, b int) int {
			ra, rb := rules[a], rules[b]
			if ra.Chain != rb.Chain {
				return int(rb.Chain) - int(ra.Chain)
			}
			return int(ra.Prio) - int(rb.Prio)
		})
	}
	states = make([]PolicyState, len(rules))
	for _, name := range slicesSortedKeys(devs) {
		dev := devs[name]
		have, err := p.dump(dev)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		at := map[string]PolicyFilter{}
		for _, f := range have {
			at[place(f.Rule.Chain, f.Rule.Prio, f.Rule.Match)] = f
		}
		keep := map[uint64]bool{}
		for _, i := range byDev[name] {
			r := rules[i]
			r.Index = dev.Index
			rules[i].Index = dev.Index
			k := place(r.Chain, r.Prio, r.Match)
			f, ok := at[k]
			if ok {
				keep[filterID(f)] = true
				if bytes.Equal(f.Cookie, PolicyCookie(r)) {
					states[i] = p.state(r, dev, f)
					continue
				}
			}
			st, err := p.install(dev, r, f.Handle)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			states[i] = st
		}
		for _, f := range have {
			if !keep[filterID(f)] {
				stale = append(stale, f)
			}
		}
	}
	for i := range states {
		if states[i].State == "" {
			states[i].Rule = rules[i]
		}
	}
	return states, stale, errors.Join(errs...)
}

func filterID(f PolicyFilter) uint64 {
	return uint64(f.Rule.Chain)<<48 ^ uint64(f.Info)<<16 ^ uint64(f.Handle)
}

// Delete removes filters (stale ones from Install). A filter already gone
// is not an error. A device's chains go first to last, each from its
// highest priority down: the way into a chain goes before the chain, a
// deny before the rules ahead of it.
func (p *PolicyProgrammer) Delete(fs []PolicyFilter) error {
	fs = slices.Clone(fs)
	slices.SortStableFunc(fs, func(a, b PolicyFilter) int {
		if a.Rule.Index != b.Rule.Index {
			return a.Rule.Index - b.Rule.Index
		}
		if a.Rule.Chain != b.Rule.Chain {
			return int(a.Rule.Chain) - int(b.Rule.Chain)
		}
		return int(b.Rule.Prio) - int(a.Rule.Prio)
	})
	var errs []error
	for _, f := range fs {
		p.writes.Add(1)
		if err := p.conn.Delete(f); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Read returns the state and counters of rules as the kernel holds them
// now; it writes nothing.
func (p *PolicyProgrammer) Read(devs map[string]Device, rules []PolicyRule) ([]PolicyState, error) {
	byDev := map[string][]int{}
	for i, r := range rules {
		byDev[r.Dev] = append(byDev[r.Dev], i)
	}
	states := make([]PolicyState, len(rules))
	var errs []error
	for name, idx := range byDev {
		dev, ok := devs[name]
		if !ok {
			continue
		}
		have, err := p.dump(dev)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		byCookie := map[string]PolicyFilter{}
		for _, f := range have {
			byCookie[string(f.Cookie)] = f
		}
		for _, i := range idx {
			r := rules[i]
			r.Index = dev.Index
			if f, ok := byCookie[string(PolicyCookie(r))]; ok {
				states[i] = p.state(r, dev, f)
			} else {
				states[i].Rule = r
			}
		}
	}
	return states, errors.Join(errs...)
}

func (p *PolicyProgrammer) state(r PolicyRule, dev Device, f PolicyFilter) PolicyState {
	s := PolicyState{Rule: r, Handle: f.Handle}
	if len(f.Packets) > 0 {
		s.Packets, s.Bytes, s.HWPackets, s.HWBytes = f.Packets[0], f.Bytes[0], f.HWPackets[0], f.HWBytes[0]
	}
	switch {
	case f.Flags&flagInHW != 0:
		s.State = StateHardware
	case dev.Hardware:
		s.State, s.Reason = StateRefused, p.refusals[dev.Name+" "+r.String()]
		if s.Reason == "" {
			s.Reason = dev.Name + " holds the rule in software only (the refusal's message is not kept across agent restarts)"
		}
	default:
		s.State, s.Reason = StateSoftware, dev.Reason
	}
	return s
}

// install adds r (handle 0) or replaces the filter at handle, asking for
// hardware first (skip_sw) when dev offers it and falling back to
// software with the driver's refusal as the reason.
func (p *PolicyProgrammer) install(dev Device, r PolicyRule, handle uint32) (PolicyState, error) {
	write := func(flags uint32) error {
		p.writes.Add(1)
		if handle != 0 {
			return p.conn.Replace(r, handle, flags)
		}
		return p.conn.Add(r, flags)
	}
	st := PolicyState{Rule: r, Handle: handle, State: StateSoftware, Reason: dev.Reason}
	key := dev.Name + " " + r.String()
	if dev.Hardware {
		err := write(flagSkipSW)
		if err == nil {
			delete(p.refusals, key)
			st.State, st.Reason = StateHardware, ""
			return st, nil
		}
		errno, msg, ok := refusal(err)
		if !ok {
			return PolicyState{}, err
		}
		reason := fmt.Sprintf("%s refused skip_sw: %v", dev.Name, errno)
		if msg != "" {
			reason += ": " + msg
		}
		p.log.Debug("hardware refused policy rule; installing it in software", "dev", dev.Name, "rule", r.String(), "reason", reason)
		p.refusals[key] = reason
		st.State, st.Reason = StateRefused, reason
	}
	if err := write(0); err != nil {
		return PolicyState{}, err
	}
	return st, nil
}

func slicesSortedKeys(m map[string]Device) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
