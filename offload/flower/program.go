package flower

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/tc"
)

// Filter flags.
const (
	flagSkipHW   = tc.TCA_CLS_FLAGS_SKIP_HW
	flagSkipSW   = tc.TCA_CLS_FLAGS_SKIP_SW
	flagInHW     = tc.TCA_CLS_FLAGS_IN_HW
	cookieFlags  = 2 // cookie byte: installation flags
	cookieErrno  = 3 // cookie byte: errno of the hardware refusal
	cookieRefuse = 1 // cookieFlags bit: the device refused skip_sw
)

// Rule states.
const (
	StateHardware = "hardware" // in the NIC (in_hw)
	StateSoftware = "software" // in the kernel; hardware was not asked for
	StateRefused  = "refused"  // the device refused hardware; running in software
)

// Device is a netdev whose ingress holds rules, or a rule's mirred target.
type Device struct {
	Name  string
	Index int
	// Hardware: rules are asked for with skip_sw first. When false,
	// Reason says why not.
	Hardware bool
	Reason   string
}

// State is a desired rule as the kernel holds it.
type State struct {
	Rule    Rule
	Handle  uint32
	State   string // StateHardware, StateSoftware, StateRefused; "" when not installed
	Reason  string // why not in hardware
	Packets uint64 // tc statistics of the rule's first action
	Bytes   uint64
	// Hardware counters, where the NIC reports them.
	HWPackets, HWBytes uint64
}

// Programmer installs rule sets with tc over netlink.
type Programmer struct {
	raw    *PolicyConn
	log    *slog.Logger
	writes atomic.Int64
	// Refusal messages (with the driver's extack) by rule, kept for as
	// long as the process lives; after a restart the cookie keeps the
	// errno.
	refusals map[string]string
}

// Open returns a programmer for the network namespace at the given path
// (empty: the caller's).
func Open(netns string, log *slog.Logger) (*Programmer, error) {
	raw, err := OpenPolicy(netns)
	if err != nil {
		return nil, err
	}
	return &Programmer{raw: raw, log: log, refusals: map[string]string{}}, nil
}

// Close releases the netlink socket.
func (p *Programmer) Close() error { return p.raw.Close() }

// Writes is the number of netlink writes made so far.
func (p *Programmer) Writes() int { return int(p.writes.Load()) }

// Messages is the number of netlink messages sent and received so far
// (requests, answers, dump parts).
func (p *Programmer) Messages() int64 { return p.raw.c.Messages() }

// EnsureClsact gives every device a clsact qdisc unless it already has
// clsact or ingress (which are never replaced: they may not be Skiff's).
func (p *Programmer) EnsureClsact(devs []Device) error {
	qs, err := p.raw.c.Qdiscs()
	if err != nil {
		return fmt.Errorf("flower: %w", err)
	}
	has := map[int]bool{}
	for _, q := range qs {
		if q.Kind == "clsact" || q.Kind == "ingress" {
			has[q.Ifindex] = true
		}
	}
	var errs []error
	for _, d := range devs {
		if has[d.Index] {
			continue
		}
		p.writes.Add(1)
		err := p.raw.c.AddClsact(d.Index)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("flower: clsact on %s: %w", d.Name, err))
		}
	}
	return errors.Join(errs...)
}

// installed is one of Skiff's filters as dumped.
type installed struct {
	chain        uint32
	handle, info uint32
	cookie       []byte
	flags        uint32
	pk, by       uint64
	hwpk, hwby   uint64
}

func (h installed) id() uint64 { return uint64(h.chain)<<48 ^ uint64(h.info)<<16 ^ uint64(h.handle) }

func skiffPrio(prio uint16) bool { return prio >= PrioARP && prio <= PrioFloodLast }

// dump returns Skiff's filters on dev's ingress: at Skiff's priorities,
// with a cookie that starts with Skiff's mark. Others are never returned,
// so never touched.
func (p *Programmer) dump(dev Device) ([]installed, error) {
	// Chain 0 too: forwarding rules of the layout before the policy
	// pipeline sat there, and go.
	fs, err := p.raw.DumpChains(dev.Index, ChainEntry, ChainForward)
	if err != nil {
		return nil, fmt.Errorf("flower: listing filters of %s: %w", dev.Name, err)
	}
	var out []installed
	for _, f := range fs {
		if !skiffPrio(f.Rule.Prio) || len(f.Cookie) != cookieLen || !bytes.HasPrefix(f.Cookie, []byte(magic)) || IsPolicyCookie(f.Cookie) || len(f.Packets) == 0 {
			continue
		}
		out = append(out, installed{chain: f.Rule.Chain, handle: f.Handle, info: f.Info, cookie: f.Cookie, flags: f.Flags,
			pk: f.Packets[0], by: f.Bytes[0], hwpk: f.HWPackets[0], hwby: f.HWBytes[0]})
	}
	return out, nil
}

// Sync makes the ingress of every device in devs hold exactly Skiff's rules
// among rules: missing rules are added (a rule whose match is installed
// with other actions is replaced in place), then Skiff's rules nobody wants
// are deleted. Rules on devices not in devs are an error; devices in devs
// without rules lose their Skiff rules. A device that is not in devs is not
// looked at. It returns the state of every rule, and every error, joined.
func (p *Programmer) Sync(devs map[string]Device, rules []Rule) ([]State, error) {
	byDev, cookies := index(devs, rules)
	var errs []error
	type pending struct {
		dev Device
		del []installed
	}
	var dels []pending
	states := make([]State, len(rules))
	names := make([]string, 0, len(devs))
	for n := range devs {
		names = append(names, n)
	}
	for n := range byDev {
		if _, ok := devs[n]; !ok {
			errs = append(errs, fmt.Errorf("flower: rules for device %s, which is not known", n))
		}
	}
	slices.Sort(names)
	for _, name := range names {
		dev := devs[name]
		have, err := p.dump(dev)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		byMatch := map[string]installed{}
		for _, h := range have {
			if h.chain == ChainForward { // elsewhere: an older layout's, deleted below
				byMatch[string(h.cookie[4:10])] = h
			}
		}
		keep := map[uint64]bool{} // by priority+protocol and handle: handles repeat across priorities
		for _, i := range byDev[name] {
			r, c := rules[i], cookies[i]
			h, ok := byMatch[string(c[4:10])]
			if ok && bytes.Equal(h.cookie[10:], c[10:]) {
				keep[h.id()] = true
				states[i] = p.state(r, dev, h)
				continue
			}
			var handle uint32
			if ok {
				handle = h.handle // same match, other actions: replace in place
				keep[h.id()] = true
			}
			st, err := p.install(devs, dev, r, handle, c)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			states[i] = st
		}
		var del []installed
		for _, h := range have {
			if !keep[h.id()] {
				del = append(del, h)
			}
		}
		if len(del) > 0 {
			dels = append(dels, pending{dev, del})
		}
	}
	// Delete last.
	for _, d := range dels {
		for _, h := range d.del {
			p.writes.Add(1)
			f := tc.Filter{Ifindex: d.dev.Index, Chain: h.chain, Prio: uint16(h.info >> 16), Proto: htons(uint16(h.info)), Handle: h.handle}
			err := p.raw.c.Do(tc.Op{Kind: tc.Delete, Filter: &f})
			if err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("flower: deleting filter %#x prio %d of %s: %w", h.handle, h.info>>16, d.dev.Name, err))
			}
		}
	}
	// Forget refusals of rules nobody wants any more.
	if len(p.refusals) > len(rules) {
		want := make(map[string]bool, len(rules))
		for _, r := range rules {
			want[r.String()] = true
		}
		for k := range p.refusals {
			if !want[k] {
				delete(p.refusals, k)
			}
		}
	}
	return fill(rules, states), errors.Join(errs...)
}

// index groups rules by device (as indexes into rules) and makes each
// rule's cookie once.
func index(devs map[string]Device, rules []Rule) (map[string][]int, [][]byte) {
	byDev := map[string][]int{}
	cookies := make([][]byte, len(rules))
	for i, r := range rules {
		byDev[r.Dev] = append(byDev[r.Dev], i)
		cookies[i] = cookieFor(devs, r)
	}
	return byDev, cookies
}

// fill gives rules that were not found their rule and an empty state.
func fill(rules []Rule, states []State) []State {
	for i := range states {
		if states[i].State == "" {
			states[i].Rule = rules[i]
		}
	}
	return states
}

// cookieFor is r's cookie with the interface indexes of its mirred targets
// mixed into the hash of the whole rule, so that a rule pointing at a
// device that was recreated (same name, new index) is replaced.
func cookieFor(devs map[string]Device, r Rule) []byte {
	all := []byte(r.String())
	for _, a := range r.Actions {
		if a.Dev != "" {
			all = append(all, ' ')
			all = append(all, a.Dev...)
			all = append(all, '=')
			all = strconv.AppendInt(all, int64(devs[a.Dev].Index), 10)
		}
	}
	return cookie(r.MatchKey(), string(all))
}

// read puts the state of the rules at idx (all on dev), as dumped now,
// into states.
func (p *Programmer) read(dev Device, rules []Rule, cookies [][]byte, idx []int, states []State) error {
	now, err := p.dump(dev)
	if err != nil {
		return err
	}
	got := map[string]installed{}
	for _, h := range now {
		if h.chain == ChainForward {
			got[string(h.cookie[4:])] = h
		}
	}
	for _, i := range idx {
		if h, ok := got[string(cookies[i][4:])]; ok {
			states[i] = p.state(rules[i], dev, h)
		}
	}
	return nil
}

// Read returns the state and counters of rules as the kernel holds them
// now; it writes nothing.
func (p *Programmer) Read(devs map[string]Device, rules []Rule) ([]State, error) {
	byDev, cookies := index(devs, rules)
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

func (p *Programmer) state(r Rule, dev Device, h installed) State {
	s := State{Rule: r, Handle: h.handle, Packets: h.pk, Bytes: h.by, HWPackets: h.hwpk, HWBytes: h.hwby}
	switch {
	case h.flags&flagInHW != 0:
		s.State = StateHardware
	case h.cookie[cookieFlags]&cookieRefuse != 0:
		s.State = StateRefused
		s.Reason = p.refusals[r.String()]
		if s.Reason == "" {
			s.Reason = fmt.Sprintf("%s refused skip_sw: %s (message not kept across agent restarts)", dev.Name, unix.ErrnoName(unix.Errno(h.cookie[cookieErrno])))
		}
	default:
		s.State = StateSoftware
		s.Reason = dev.Reason
		if dev.Hardware {
			s.Reason = "installed in software"
		}
	}
	return s
}

// install adds r (handle 0) or replaces the filter at handle, asking for
// hardware first when dev offers it. The state it returns is what the
// kernel's answers say (skip_sw accepted: in hardware); the handle and
// counters come with the next read.
func (p *Programmer) install(devs map[string]Device, dev Device, r Rule, handle uint32, cookie []byte) (State, error) {
	st := State{Rule: r, Handle: handle, State: StateSoftware, Reason: dev.Reason}
	if dev.Hardware {
		err := p.write(devs, dev, r, handle, flagSkipSW, cookie)
		if err == nil {
			delete(p.refusals, r.String())
			st.State, st.Reason = StateHardware, ""
			return st, nil
		}
		errno, msg, ok := refusal(err)
		if !ok {
			return State{}, fmt.Errorf("flower: %s: %w", r.String(), err)
		}
		reason := fmt.Sprintf("%s refused skip_sw: %v", dev.Name, errno)
		if msg != "" {
			reason += ": " + msg
		}
		p.log.Debug("hardware refused rule; installing it in software", "dev", dev.Name, "rule", r.String(), "reason", reason)
		p.refusals[r.String()] = reason
		cookie[cookieFlags] |= cookieRefuse
		cookie[cookieErrno] = byte(errno)
		st.State, st.Reason = StateRefused, reason
	}
	if err := p.write(devs, dev, r, handle, 0, cookie); err != nil {
		return State{}, fmt.Errorf("flower: %s: %w", r.String(), err)
	}
	return st, nil
}

func (p *Programmer) write(devs map[string]Device, dev Device, r Rule, handle, flags uint32, cookie []byte) error {
	f, err := ruleFilter(devs, dev, r, handle, flags, cookie)
	if err != nil {
		return err
	}
	p.writes.Add(1)
	op := tc.Add
	if handle != 0 {
		op = tc.Replace
	}
	return p.raw.c.Do(tc.Op{Kind: op, Filter: &f})
}

// ruleFilter is r as a tc filter in ChainForward on dev.
func ruleFilter(devs map[string]Device, dev Device, r Rule, handle, flags uint32, cookie []byte) (tc.Filter, error) {
	f := tc.Filter{Ifindex: dev.Index, Chain: ChainForward, Prio: r.Prio, Proto: r.EthType, Handle: handle, Kind: "flower", Flags: flags}
	m := r.Match
	if m.DstMAC != "" {
		mac, err := net.ParseMAC(m.DstMAC)
		if err != nil {
			return f, fmt.Errorf("flower: match dst_mac: %w", err)
		}
		f.Match.DstMAC = mac
	}
	if m.ArpTIP.IsValid() {
		f.Match.ArpTIP, f.Match.ArpOp = m.ArpTIP, 1 // request
	}
	f.Match.EncKeyID, f.Match.EncDst, f.Match.EncDstPort = m.EncKeyID, m.EncDst, m.EncDstPort
	f.Actions = make([]tc.Action, 0, len(r.Actions))
	for i, a := range r.Actions {
		var act tc.Action
		switch a.Kind {
		case TunnelSet:
			act = tc.Action{Kind: tc.KindTunnelKey, Verdict: tc.TC_ACT_PIPE, TunnelOp: tc.TCA_TUNNEL_KEY_ACT_SET,
				TunnelID: a.VNI, TunnelSrc: a.Src, TunnelDst: a.Dst, TunnelDstPort: a.DstPort}
		case TunnelUnset:
			act = tc.Action{Kind: tc.KindTunnelKey, Verdict: tc.TC_ACT_PIPE, TunnelOp: tc.TCA_TUNNEL_KEY_ACT_RELEASE}
		case Continue:
			act = tc.Action{Kind: tc.KindGact, Verdict: tc.TC_ACT_UNSPEC}
		case Redirect, Mirror, IngressRedirect:
			t, ok := devs[a.Dev]
			if !ok {
				return f, fmt.Errorf("flower: %s: mirred target %s is not a known device", r.String(), a.Dev)
			}
			act = tc.Action{Kind: tc.KindMirred, Verdict: tc.TC_ACT_STOLEN, MirredOp: tc.TCA_EGRESS_REDIR, Ifindex: t.Index}
			switch a.Kind {
			case Mirror:
				act.Verdict, act.MirredOp = tc.TC_ACT_PIPE, tc.TCA_EGRESS_MIRROR
			case IngressRedirect:
				act.MirredOp = tc.TCA_INGRESS_REDIR
			}
		default:
			return f, fmt.Errorf("flower: %s: action %d: unknown kind %q", r.String(), i, a.Kind)
		}
		if i == 0 {
			act.Cookie = slices.Clone(cookie)
		}
		f.Actions = append(f.Actions, act)
	}
	return f, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
