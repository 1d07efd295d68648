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

	tc "github.com/florianl/go-tc"
	"github.com/florianl/go-tc/core"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Filter flags (include/uapi/linux/pkt_cls.h).
const (
	flagSkipHW   = 1 << 0
	flagSkipSW   = 1 << 1
	flagInHW     = 1 << 2
	flagNotInHW  = 1 << 3
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

// ingress is the parent of filters on a clsact (or ingress) qdisc's ingress.
var ingress = core.BuildHandle(tc.HandleRoot, tc.HandleMinIngress)

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
	tc     *tc.Tc
	raw    *PolicyConn // dumps: go-tc's fails on keys it does not know (ct_state)
	log    *slog.Logger
	writes atomic.Int64
	// Refusal messages (with the driver's extack) by rule, kept for as
	// long as the process lives; after a restart the cookie keeps the
	// errno.
	refusals map[string]string
}

// Open returns a programmer for the network namespace of the caller (netns
// 0) or of the given namespace file descriptor.
func Open(netns int, log *slog.Logger) (*Programmer, error) {
	t, err := tc.Open(&tc.Config{NetNS: netns})
	if err != nil {
		return nil, fmt.Errorf("flower: tc netlink: %w", err)
	}
	if err := t.SetOption(netlink.ExtendedAcknowledge, true); err != nil {
		t.Close()
		return nil, fmt.Errorf("flower: extended acks: %w", err)
	}
	raw, err := OpenPolicy(netns)
	if err != nil {
		t.Close()
		return nil, err
	}
	return &Programmer{tc: t, raw: raw, log: log, refusals: map[string]string{}}, nil
}

// Close releases the netlink sockets.
func (p *Programmer) Close() error { return errors.Join(p.tc.Close(), p.raw.Close()) }

// Writes is the number of netlink writes made so far.
func (p *Programmer) Writes() int { return int(p.writes.Load()) }

// EnsureClsact gives every device a clsact qdisc unless it already has
// clsact or ingress (which are never replaced: they may not be Skiff's).
func (p *Programmer) EnsureClsact(devs []Device) error {
	qs, err := p.tc.Qdisc().Get()
	if err != nil {
		return fmt.Errorf("flower: listing qdiscs: %w", err)
	}
	has := map[uint32]bool{}
	for _, q := range qs {
		if q.Kind == "clsact" || q.Kind == "ingress" {
			has[q.Ifindex] = true
		}
	}
	var errs []error
	for _, d := range devs {
		if has[uint32(d.Index)] {
			continue
		}
		p.writes.Add(1)
		err := p.tc.Qdisc().Add(&tc.Object{Msg: tc.Msg{Family: unix.AF_UNSPEC, Ifindex: uint32(d.Index),
			Handle: core.BuildHandle(tc.HandleRoot, 0), Parent: tc.HandleIngress}, Attribute: tc.Attribute{Kind: "clsact"}})
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
			chain := h.chain
			err := p.tc.Filter().Delete(&tc.Object{Msg: tc.Msg{Family: unix.AF_UNSPEC, Ifindex: uint32(d.dev.Index), Handle: h.handle, Parent: ingress, Info: h.info},
				Attribute: tc.Attribute{Kind: "flower", Chain: &chain}})
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
		var errno unix.Errno
		if !errors.As(err, &errno) {
			return State{}, fmt.Errorf("flower: %s: %w", r.String(), err)
		}
		reason := fmt.Sprintf("%s refused skip_sw: %v", dev.Name, errno)
		var op *netlink.OpError
		if errors.As(err, &op) && op.Message != "" {
			reason += ": " + op.Message
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
	obj, err := filterObject(devs, dev, r, handle, flags, cookie)
	if err != nil {
		return err
	}
	p.writes.Add(1)
	if handle != 0 {
		err = p.tc.Filter().Replace(obj)
	} else {
		err = p.tc.Filter().Add(obj)
	}
	return err
}

// filterObject encodes r for go-tc.
func filterObject(devs map[string]Device, dev Device, r Rule, handle, flags uint32, cookie []byte) (*tc.Object, error) {
	f := &tc.Flower{Flags: &flags}
	proto := r.EthType
	if r.EthType != EthAll {
		et := r.EthType
		f.KeyEthType = &et
	}
	m := r.Match
	if m.DstMAC != "" {
		mac, err := net.ParseMAC(m.DstMAC)
		if err != nil {
			return nil, fmt.Errorf("flower: match dst_mac: %w", err)
		}
		f.KeyEthDst = &mac
	}
	if m.ArpTIP.IsValid() {
		b := m.ArpTIP.As4()
		tip := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		op := uint8(1)
		f.KeyArpTIP, f.KeyArpOp = &tip, &op
	}
	if m.EncKeyID != 0 {
		id := m.EncKeyID
		f.KeyEncKeyID = &id
	}
	if m.EncDst.IsValid() {
		ip := net.IP(m.EncDst.AsSlice())
		f.KeyEncIPv4Dst = &ip
	}
	if m.EncDstPort != 0 {
		port := m.EncDstPort
		f.KeyEncUDPDstPort = &port
	}
	acts := make([]*tc.Action, 0, len(r.Actions))
	for i, a := range r.Actions {
		var act *tc.Action
		switch a.Kind {
		case TunnelSet:
			src, dst := net.IP(a.Src.AsSlice()), net.IP(a.Dst.AsSlice())
			id, port := a.VNI, a.DstPort
			act = &tc.Action{Kind: "tunnel_key", TunnelKey: &tc.TunnelKey{
				Parms:     &tc.TunnelParms{Action: tc.ActPipe, TunnelKeyAction: 1}, // TCA_TUNNEL_KEY_ACT_SET
				KeyEncSrc: &src, KeyEncDst: &dst, KeyEncKeyID: &id, KeyEncDstPort: &port}}
		case TunnelUnset:
			act = &tc.Action{Kind: "tunnel_key", TunnelKey: &tc.TunnelKey{
				Parms: &tc.TunnelParms{Action: tc.ActPipe, TunnelKeyAction: 2}}} // TCA_TUNNEL_KEY_ACT_RELEASE
		case Continue:
			act = &tc.Action{Kind: "gact", Gact: &tc.Gact{Parms: &tc.GactParms{Action: 0xffffffff}}} // TC_ACT_UNSPEC
		case Redirect, Mirror, IngressRedirect:
			t, ok := devs[a.Dev]
			if !ok {
				return nil, fmt.Errorf("flower: %s: mirred target %s is not a known device", r.String(), a.Dev)
			}
			parm := &tc.MirredParam{IfIndex: uint32(t.Index), Action: tc.ActStolen, Eaction: 1} // TCA_EGRESS_REDIR
			switch a.Kind {
			case Mirror:
				parm.Action, parm.Eaction = tc.ActPipe, 2 // TCA_EGRESS_MIRROR
			case IngressRedirect:
				parm.Eaction = 3 // TCA_INGRESS_REDIR
			}
			act = &tc.Action{Kind: "mirred", Mirred: &tc.Mirred{Parms: parm}}
		default:
			return nil, fmt.Errorf("flower: %s: action %d: unknown kind %q", r.String(), i, a.Kind)
		}
		if i == 0 {
			c := slices.Clone(cookie)
			act.Cookie = &c
		}
		acts = append(acts, act)
	}
	f.Actions = &acts
	chain := ChainForward
	return &tc.Object{Msg: tc.Msg{Family: unix.AF_UNSPEC, Ifindex: uint32(dev.Index), Handle: handle, Parent: ingress,
		Info: uint32(r.Prio)<<16 | uint32(htons(proto))}, Attribute: tc.Attribute{Kind: "flower", Chain: &chain, Flower: f}}, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
