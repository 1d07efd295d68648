package flower

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/skiff-sdn/skiff/internal/nl/tc"
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
//
// It keeps a picture of Skiff's policy filters on each device it wrote
// to or read, seeded by one dump of the device and kept by its own
// writes: Install writes the difference without reading the kernel;
// Invalidate makes it read a device again.
type PolicyProgrammer struct {
	conn     *PolicyConn
	log      *slog.Logger
	writes   atomic.Int64
	spent    atomic.Int64 // nanoseconds in filter writes
	w        writer
	refusals map[string]string // by device and rule: the driver's refusal
	cache    map[int]*polCache // by ifindex
}

// polCache is what the programmer knows of Skiff's policy filters on one
// device.
type polCache struct {
	at    map[string]PolicyFilter // by place
	extra []PolicyFilter          // a second filter in one place: stale
	top   uint32                  // the highest handle given or seen
}

// OpenPolicyProgrammer returns a programmer for the network namespace ns
// (an nl.Kernel).
func OpenPolicyProgrammer(ns Namespace, log *slog.Logger) (*PolicyProgrammer, error) {
	c, err := openPolicy(ns, Writers)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &PolicyProgrammer{conn: c, log: log, refusals: map[string]string{}, cache: map[int]*polCache{}}
	p.w = writer{c: c.c, writes: &p.writes, spent: &p.spent, pipelined: Pipelined}
	return p, nil
}

// PortIDs are the netlink port ids of the programmer's sockets: the
// kernel's notifications of its writes carry them.
func (p *PolicyProgrammer) PortIDs() []uint32 { return p.conn.c.PortIDs() }

// Invalidate forgets what the programmer knows of the device at ifindex:
// its next Install reads it again.
func (p *PolicyProgrammer) Invalidate(ifindex int) { delete(p.cache, ifindex) }

// InvalidateAll forgets every device.
func (p *PolicyProgrammer) InvalidateAll() { clear(p.cache) }

// Retain forgets the devices whose ifindex is not in present (gone).
func (p *PolicyProgrammer) Retain(present map[int]bool) {
	maps.DeleteFunc(p.cache, func(i int, _ *polCache) bool { return !present[i] })
}

// cached is what is known of dev, read from the kernel when nothing is.
func (p *PolicyProgrammer) cached(dev Device) (*polCache, error) {
	if c, ok := p.cache[dev.Index]; ok {
		return c, nil
	}
	fs, err := p.conn.DumpChains(dev.Index, ChainEntry, ChainEgress, ChainIngress)
	if err != nil {
		return nil, fmt.Errorf("flower: policy filters of %s: %w", dev.Name, err)
	}
	c := &polCache{at: map[string]PolicyFilter{}}
	for _, f := range fs {
		c.top = max(c.top, f.Handle)
		if !f.Skiff() {
			continue
		}
		k := place(f.Rule.Chain, f.Rule.Prio, f.Rule.Match)
		if _, dup := c.at[k]; dup {
			c.extra = append(c.extra, f)
			continue
		}
		c.at[k] = f
	}
	p.cache[dev.Index] = c
	return c, nil
}

// Close releases the socket.
func (p *PolicyProgrammer) Close() error { return p.conn.Close() }

// Writes is the number of filters added, replaced or deleted so far.
func (p *PolicyProgrammer) Writes() int { return int(p.writes.Load()) }

// WriteTime is the time spent writing filters so far (encoding them,
// sending, waiting for the kernel's answers).
func (p *PolicyProgrammer) WriteTime() time.Duration { return time.Duration(p.spent.Load()) }

// Messages is the number of netlink messages sent and received so far
// (requests, answers, dump parts).
func (p *PolicyProgrammer) Messages() int64 { return p.conn.c.Messages() }

// place is where a filter sits: two filters with one place cannot both
// be installed.
func place(chain uint32, prio uint16, m PolicyMatch) string {
	return strconv.FormatUint(uint64(chain), 10) + " " + strconv.FormatUint(uint64(prio), 10) + " " + m.String()
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
	states = make([]PolicyState, len(rules))
	for _, name := range slicesSortedKeys(devs) {
		dev := devs[name]
		keep := make(map[string]bool, len(byDev[name]))
		if es := p.installOn(dev, rules, byDev[name], states, keep); len(es) > 0 {
			errs = append(errs, es...)
		}
		c, ok := p.cache[dev.Index]
		if !ok {
			continue // not read (the error is in errs)
		}
		stale = append(stale, c.extra...)
		for k, f := range c.at {
			if !keep[k] {
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

// install writes cs (the rules at of dev) and keeps what the kernel took
// in c and the states.
func (p *PolicyProgrammer) install(dev Device, c *polCache, cs []change, rules []PolicyRule, at []int, states []PolicyState) []error {
	outs, err := p.w.apply(cs, func(j int, _ error) tc.Filter { return cs[j].f })
	if err != nil {
		p.Invalidate(dev.Index)
		return []error{fmt.Errorf("flower: policy filters of %s: %w", dev.Name, err)}
	}
	var errs []error
	for j, o := range outs {
		r := rules[at[j]]
		if o.err != nil {
			verb := "adding"
			if cs[j].kind == tc.Replace {
				verb = "replacing"
			}
			errs = append(errs, fmt.Errorf("flower: %s policy rule %s on %s: %w", verb, r, r.Dev, o.err))
			continue
		}
		f := cs[j].f
		key := dev.Name + " " + r.String()
		st := PolicyState{Rule: r, Handle: f.Handle, State: StateSoftware, Reason: dev.Reason}
		pf := PolicyFilter{Rule: r, Handle: f.Handle, Cookie: f.Actions[0].Cookie, Info: uint32(f.Prio)<<16 | uint32(htons(f.Proto))}
		pf.Rule.Dev = ""
		switch {
		case o.inHW:
			pf.Flags = flagInHW
			delete(p.refusals, key)
			st.State, st.Reason = StateHardware, ""
		case o.refused != nil:
			errno, msg, _ := refusal(o.refused)
			reason := fmt.Sprintf("%s refused skip_sw: %v", dev.Name, errno)
			if msg != "" {
				reason += ": " + msg
			}
			p.log.Debug("hardware refused policy rule; installing it in software", "dev", dev.Name, "rule", r.String(), "reason", reason)
			p.refusals[key] = reason
			st.State, st.Reason = StateRefused, reason
		}
		c.at[place(r.Chain, r.Prio, r.Match)] = pf
		states[at[j]] = st
	}
	return errs
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
	if len(fs) == 0 {
		return nil
	}
	return p.deleteAll(fs)
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
		have, err := p.conn.dump(dev.Index, tc.DumpOptions{Chains: []uint32{ChainEntry, ChainEgress, ChainIngress}, Terse: true})
		if err != nil {
			errs = append(errs, fmt.Errorf("flower: policy filters of %s: %w", dev.Name, err))
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

func slicesSortedKeys(m map[string]Device) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
