package flower

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

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
	// cookie is the rule's cookie as the programmer made it for the
	// devices it was synced with: Refresh matches dumped filters by it
	// without making it again.
	cookie []byte
}

// Programmer installs rule sets with tc over netlink. It keeps a picture
// of Skiff's forwarding filters on each device it wrote to or read,
// seeded by one dump of the device and kept by its own writes, so that a
// Sync writes the difference without reading the kernel; Invalidate
// makes it read a device again (someone else changed it). It is not safe
// for concurrent use.
type Programmer struct {
	raw    *PolicyConn
	log    *slog.Logger
	writes atomic.Int64
	spent  atomic.Int64 // nanoseconds in filter writes
	w      writer
	// Refusal messages (with the driver's extack) by rule, kept for as
	// long as the process lives; after a restart the cookie keeps the
	// errno.
	refusals map[string]string
	cache    map[int]*fwdCache // by ifindex
	clsact   map[int]bool      // devices known to have clsact or ingress
}

// Open returns a programmer for the network namespace ns (an nl.Kernel).
func Open(ns Namespace, log *slog.Logger) (*Programmer, error) {
	raw, err := openPolicy(ns, Writers)
	if err != nil {
		return nil, err
	}
	p := &Programmer{raw: raw, log: log, refusals: map[string]string{}, cache: map[int]*fwdCache{}, clsact: map[int]bool{}}
	p.w = writer{c: raw.c, writes: &p.writes, spent: &p.spent, pipelined: Pipelined}
	return p, nil
}

// PortIDs are the netlink port ids of the programmer's sockets: the
// kernel's notifications of its writes carry them.
func (p *Programmer) PortIDs() []uint32 { return p.raw.c.PortIDs() }

// Invalidate forgets what the programmer knows of the device at ifindex:
// its next Sync reads it again.
func (p *Programmer) Invalidate(ifindex int) {
	delete(p.cache, ifindex)
	delete(p.clsact, ifindex)
}

// InvalidateAll forgets every device.
func (p *Programmer) InvalidateAll() {
	clear(p.cache)
	clear(p.clsact)
}

// Retain forgets the devices whose ifindex is not in present (gone).
func (p *Programmer) Retain(present map[int]bool) {
	maps.DeleteFunc(p.cache, func(i int, _ *fwdCache) bool { return !present[i] })
	maps.DeleteFunc(p.clsact, func(i int, _ bool) bool { return !present[i] })
}

// Installed is the number of Skiff's forwarding filters the programmer
// knows on the device at ifindex (0 when it does not know the device).
func (p *Programmer) Installed(ifindex int) int {
	c, ok := p.cache[ifindex]
	if !ok {
		return 0
	}
	return len(c.byMatch) + len(c.other)
}

// Cached is the number of filters the programmer knows of.
func (p *Programmer) Cached() int {
	n := 0
	for _, c := range p.cache {
		n += len(c.byMatch) + len(c.other)
	}
	return n
}

// Close releases the netlink socket.
func (p *Programmer) Close() error { return p.raw.Close() }

// Writes is the number of netlink writes made so far.
func (p *Programmer) Writes() int { return int(p.writes.Load()) }

// WriteTime is the time spent writing filters so far (encoding them,
// sending, waiting for the kernel's answers).
func (p *Programmer) WriteTime() time.Duration { return time.Duration(p.spent.Load()) }

// Messages is the number of netlink messages sent and received so far
// (requests, answers, dump parts).
func (p *Programmer) Messages() int64 { return p.raw.c.Messages() }

// EnsureClsact gives every device a clsact qdisc unless it already has
// clsact or ingress (which are never replaced: they may not be Skiff's).
func (p *Programmer) EnsureClsact(devs []Device) error {
	if !slices.ContainsFunc(devs, func(d Device) bool { return !p.clsact[d.Index] }) {
		return nil // known: no kernel I/O
	}
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
			p.clsact[d.Index] = true
			continue
		}
		p.writes.Add(1)
		err := p.raw.c.AddClsact(d.Index)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("flower: clsact on %s: %w", d.Name, err))
			continue
		}
		p.clsact[d.Index] = true
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
	stale        bool // changed by someone else: replace it (Forget)
}

func (h installed) id() uint64 { return uint64(h.chain)<<48 ^ uint64(h.info)<<16 ^ uint64(h.handle) }

func skiffPrio(prio uint16) bool { return prio >= PrioARP && prio <= PrioLast }

// dump returns Skiff's filters on dev's ingress: at Skiff's priorities,
// with a cookie that starts with Skiff's mark. Others are never returned,
// so never touched. top is the highest handle of any filter in the
// chains read. The dump is terse: the cookie identifies a rule.
func (p *Programmer) dump(dev Device) (out []installed, top uint32, err error) {
	if c, ok := p.cache[dev.Index]; ok {
		out = make([]installed, 0, len(c.byMatch)+len(c.other)) // about what comes
	}
	visit := func(f *tc.Terse) {
		top = max(top, f.Handle)
		if !skiffPrio(f.Prio) || f.Actions == 0 {
			return
		}
		ck := f.Cookie
		if len(ck) != cookieLen || !bytes.HasPrefix(ck, []byte(magic)) || IsPolicyCookie(ck) {
			return
		}
		st := f.Stats
		out = append(out, installed{chain: f.Chain, handle: f.Handle, info: uint32(f.Prio)<<16 | uint32(htons(f.Proto)), cookie: ck, flags: f.Flags,
			pk: st.Packets, by: st.Bytes, hwpk: st.HWPackets, hwby: st.HWBytes})
	}
	// Straight from the decoded filters: a counter read of 20,000
	// filters makes nothing else of them.
	err = p.raw.c.DumpTerse(dev.Index, []uint32{ChainForward}, visit)
	if err == nil {
		// Chain 0 too, where an agent without the policy pipeline put
		// its forwarding rules (found here, they go), in full: it holds
		// the policy pipeline's fw filter (PrioEntryReply), which has
		// no terse form, and a terse dump ends at it.
		err = p.raw.c.DumpFunc(dev.Index, tc.DumpOptions{Chains: []uint32{ChainEntry}}, func(f *tc.Filter) {
			t := tc.TerseOf(f)
			visit(&t)
		})
	}
	if err != nil {
		return nil, 0, fmt.Errorf("flower: listing filters of %s: %w", dev.Name, err)
	}
	return out, top, nil
}

// fwdCache is what the programmer knows of Skiff's forwarding filters on
// one device.
type fwdCache struct {
	byMatch map[string]installed // in ChainForward, by the match's hash (cookie[4:10])
	other   []installed          // Skiff's filters elsewhere, or a second of one match: to delete
	top     uint32               // the highest handle given or seen
}

// cached is what is known of dev, read from the kernel when nothing is.
func (p *Programmer) cached(dev Device) (*fwdCache, error) {
	if c, ok := p.cache[dev.Index]; ok {
		return c, nil
	}
	have, top, err := p.dump(dev)
	if err != nil {
		return nil, err
	}
	c := &fwdCache{byMatch: make(map[string]installed, len(have)), top: top}
	for _, h := range have {
		mk := string(h.cookie[4:10])
		if _, dup := c.byMatch[mk]; dup || h.chain != ChainForward {
			c.other = append(c.other, h)
			continue
		}
		c.byMatch[mk] = h
	}
	p.cache[dev.Index] = c
	return c, nil
}

// Pipelined says whether programmers opened from now on write many
// filters per sendmsg (the default), or wait for each request's answer
// before the next (set false only to measure the difference).
var Pipelined = true

// Writers is how many sockets each programmer opened from now on writes
// bulk changes over at once (tc.DialWriters): the kernel inserts flower
// filters of different sockets in parallel, one per CPU at most. 1
// writes everything over one socket (set only to measure the
// difference).
var Writers = min(runtime.NumCPU(), 4)

// Sync makes the ingress of every device in devs hold exactly Skiff's rules
// among rules: missing rules are added (a rule whose match is installed
// with other actions is replaced in place), then Skiff's rules nobody wants
// are deleted. Rules on devices not in devs are an error; devices in devs
// without rules lose their Skiff rules. A device that is not in devs is not
// looked at. What is installed is read from the kernel once per device
// (and again after Invalidate); a Sync that changes nothing does no kernel
// I/O. It returns the state of every rule (counters of the last read),
// and every error, joined.
func (p *Programmer) Sync(devs map[string]Device, rules []Rule) ([]State, error) {
	byDev, cookies := index(devs, rules)
	var errs []error
	type pending struct {
		dev Device
		c   *fwdCache
		del []installed
	}
	var dels []pending
	states := make([]State, len(rules))
	for n := range byDev {
		if _, ok := devs[n]; !ok {
			errs = append(errs, fmt.Errorf("flower: rules for device %s, which is not known", n))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(devs)) {
		dev := devs[name]
		c, err := p.cached(dev)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		keep := make(map[string]bool, len(byDev[name]))
		for _, i := range byDev[name] {
			keep[string(cookies[i][4:10])] = true
		}
		errs = append(errs, p.sync(devs, dev, c, rules, cookies, byDev[name], states)...)
		del := slices.Clone(c.other)
		for mk, h := range c.byMatch {
			if !keep[mk] {
				del = append(del, h)
			}
		}
		if len(del) > 0 {
			dels = append(dels, pending{dev, c, del})
		}
	}
	// Delete last.
	for _, d := range dels {
		ops := make([]tc.Op, len(d.del))
		for i, h := range d.del {
			ops[i] = tc.Op{Kind: tc.Delete, Filter: &tc.Filter{Ifindex: d.dev.Index, Chain: h.chain, Prio: uint16(h.info >> 16), Proto: htons(uint16(h.info)), Handle: h.handle}}
		}
		res, err := p.w.do(ops)
		if err != nil {
			errs = append(errs, fmt.Errorf("flower: deleting filters of %s: %w", d.dev.Name, err))
			p.Invalidate(d.dev.Index)
			continue
		}
		others := len(d.c.other) // d.del starts with them
		d.c.other = nil
		for i, h := range d.del {
			if e := res[i]; e != nil && !errors.Is(e, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("flower: deleting filter %#x prio %d of %s: %w", h.handle, h.info>>16, d.dev.Name, e))
				if i < others {
					d.c.other = append(d.c.other, h)
				}
				continue
			}
			if i >= others {
				if cur, ok := d.c.byMatch[string(h.cookie[4:10])]; ok && cur.handle == h.handle {
					delete(d.c.byMatch, string(h.cookie[4:10]))
				}
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

// sync installs the rules idx (with their cookies) on dev, as known by
// c, and puts their states in states.
func (p *Programmer) sync(devs map[string]Device, dev Device, c *fwdCache, rules []Rule, cookies [][]byte, idx []int, states []State) []error {
	var errs []error
	var cs []change
	var at []int // rule of each change
	for _, i := range idx {
		ch, st, err := p.plan(devs, dev, c, rules[i], cookies[i])
		switch {
		case err != nil:
			errs = append(errs, err)
		case st != nil:
			states[i] = *st
		default:
			cs = append(cs, ch)
			at = append(at, i)
		}
	}
	if len(cs) > 0 {
		errs = append(errs, p.install(dev, c, cs, rules, at, states)...)
	}
	return errs
}

// plan is what installs r (with cookie ck) on dev: nothing when it is
// installed (its state), a replacement in place when its match is
// installed with other actions, else an addition at a new handle.
func (p *Programmer) plan(devs map[string]Device, dev Device, c *fwdCache, r Rule, ck []byte) (change, *State, error) {
	h, ok := c.byMatch[string(ck[4:10])]
	if ok && !h.stale && bytes.Equal(h.cookie[10:], ck[10:]) {
		st := p.state(r, dev, h)
		st.cookie = ck
		return change{}, &st, nil
	}
	kind, handle := tc.Add, h.handle
	if ok {
		kind = tc.Replace // same match, other actions: in place
	} else {
		c.top++
		handle = c.top
	}
	f, err := ruleFilter(devs, dev, r, handle, 0, ck)
	if err != nil {
		return change{}, nil, err
	}
	return change{kind: kind, f: f, hw: dev.Hardware}, nil, nil
}

// install writes cs (the rules at of dev) and keeps what the kernel took
// in c and the states.
func (p *Programmer) install(dev Device, c *fwdCache, cs []change, rules []Rule, at []int, states []State) []error {
	reasons := make([]string, len(cs))
	outs, err := p.w.apply(cs, func(j int, e error) tc.Filter {
		errno, msg, _ := refusal(e)
		reason := fmt.Sprintf("%s refused skip_sw: %v", dev.Name, errno)
		if msg != "" {
			reason += ": " + msg
		}
		reasons[j] = reason
		f := cs[j].f
		f.Actions = slices.Clone(f.Actions)
		ck := slices.Clone(f.Actions[0].Cookie)
		ck[cookieFlags] |= cookieRefuse
		ck[cookieErrno] = byte(errno)
		f.Actions[0].Cookie = ck
		cs[j].f = f
		return f
	})
	if err != nil {
		p.Invalidate(dev.Index) // what the kernel holds is not known
		return []error{fmt.Errorf("flower: %s: %w", dev.Name, err)}
	}
	var errs []error
	for j, o := range outs {
		r := rules[at[j]]
		if o.err != nil {
			errs = append(errs, fmt.Errorf("flower: %s: %w", r.String(), o.err))
			continue
		}
		f := cs[j].f
		h := installed{chain: ChainForward, handle: f.Handle, info: uint32(f.Prio)<<16 | uint32(htons(f.Proto)), cookie: f.Actions[0].Cookie}
		st := State{Rule: r, Handle: f.Handle, State: StateSoftware, Reason: dev.Reason, cookie: h.cookie}
		switch {
		case o.inHW:
			h.flags = flagInHW
			delete(p.refusals, r.String())
			st.State, st.Reason = StateHardware, ""
		case o.refused != nil:
			p.log.Debug("hardware refused rule; installing it in software", "dev", dev.Name, "rule", r.String(), "reason", reasons[j])
			p.refusals[r.String()] = reasons[j]
			st.State, st.Reason = StateRefused, reasons[j]
		}
		c.byMatch[string(h.cookie[4:10])] = h
		states[at[j]] = st
	}
	return errs
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
	// One buffer: the match key, hashed, then the whole rule (String)
	// and the targets' indexes after it.
	var buf [256]byte
	all := r.appendMatchKey(buf[:0])
	mk := hashBytes(all)
	for _, a := range r.Actions {
		all = append(all, " action "...)
		all = a.appendTo(all)
	}
	for _, a := range r.Actions {
		if a.Dev != "" {
			all = append(all, ' ')
			all = append(all, a.Dev...)
			all = append(all, '=')
			all = strconv.AppendInt(all, int64(devs[a.Dev].Index), 10)
		}
	}
	return cookieOf(mk, hashBytes(all))
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

// ruleFilter is r as a tc filter in ChainForward on dev.
func ruleFilter(devs map[string]Device, dev Device, r Rule, handle, flags uint32, cookie []byte) (tc.Filter, error) {
	f := tc.Filter{Ifindex: dev.Index, Chain: ChainForward, Prio: r.Prio, Proto: r.EthType, Handle: handle, Kind: "flower", Flags: flags}
	m := r.Match
	if m.DstMAC != "" {
		addr, mask, masked := strings.Cut(m.DstMAC, "/")
		mac, err := net.ParseMAC(addr)
		if err != nil {
			return f, fmt.Errorf("flower: match dst_mac: %w", err)
		}
		f.Match.DstMAC = mac
		if masked {
			if f.Match.DstMACMask, err = net.ParseMAC(mask); err != nil {
				return f, fmt.Errorf("flower: match dst_mac mask: %w", err)
			}
		}
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
		case CtNAT:
			act = tc.Action{Kind: tc.KindCt, Verdict: tc.TC_ACT_PIPE, NAT: true}
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
