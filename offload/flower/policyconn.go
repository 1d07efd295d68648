package flower

import (
	"errors"
	"fmt"
	"net"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/tc"
)

// filter is r as a tc filter at handle with flags (TCA_CLS_FLAGS_*); r
// must be valid.
func (r PolicyRule) filter(handle, flags uint32) tc.Filter {
	m := r.Match
	f := tc.Filter{Ifindex: r.Index, Chain: r.Chain, Prio: r.Prio, Proto: m.EthType, Handle: handle, Kind: "flower", Flags: flags,
		Match: tc.Match{EncKeyID: m.EncKeyID, IPProto: m.IPProto, ICMPType: m.ICMPType, Src: m.Src, Dst: m.Dst, DstPortMin: m.DstPortMin, DstPortMax: m.DstPortMax,
			CtState: m.CtState, CtStateMask: m.CtStateMask}}
	if m.DstMAC != "" {
		f.Match.DstMAC, _ = net.ParseMAC(m.DstMAC) // valid: r is
	}
	if m.Mark != 0 {
		f = tc.Filter{Ifindex: r.Index, Chain: r.Chain, Prio: r.Prio, Proto: m.EthType, Handle: m.Mark, Kind: tc.KindFw,
			Match: tc.Match{Mark: m.Mark, MarkMask: m.Mark}}
	}
	f.Actions = make([]tc.Action, len(r.Actions))
	for i, a := range r.Actions {
		var ta tc.Action
		switch a.Kind {
		case PolicyCt:
			ta = tc.Action{Kind: tc.KindCt, Verdict: tc.TC_ACT_PIPE, Zone: a.Zone, Commit: a.Commit}
		case PolicyRedirect:
			ta = tc.Action{Kind: tc.KindMirred, Verdict: tc.TC_ACT_STOLEN, MirredOp: tc.TCA_EGRESS_REDIR, Ifindex: a.Index}
		case PolicyGoto:
			ta = tc.Action{Kind: tc.KindGact, Verdict: tc.Goto(a.Chain)}
		case PolicyDrop:
			ta = tc.Action{Kind: tc.KindGact, Verdict: tc.TC_ACT_SHOT}
		case PolicyPass:
			ta = tc.Action{Kind: tc.KindGact, Verdict: tc.TC_ACT_OK}
		case PolicyContinue:
			ta = tc.Action{Kind: tc.KindGact, Verdict: tc.TC_ACT_UNSPEC}
		}
		if i == 0 {
			ta.Cookie = PolicyCookie(r)
		}
		f.Actions[i] = ta
	}
	return f
}

// EncodePolicy is the RTM_NEWTFILTER payload (tcmsg and attributes) of r
// with flags (TCA_CLS_FLAGS_*) at handle (0: the kernel picks one).
func EncodePolicy(r PolicyRule, handle, flags uint32) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	f := r.filter(handle, flags)
	return f.Encode(), nil
}

// PolicyFilter is a flower filter as dumped, decoded as a policy rule.
type PolicyFilter struct {
	Rule   PolicyRule // Dev is empty
	Handle uint32
	Flags  uint32 // TCA_FLOWER_FLAGS (skip_sw, in_hw, not_in_hw...)
	Cookie []byte
	// Info is the tcmsg's: priority << 16 | protocol (network order).
	Info uint32
	// Counters of each action, in order; HW: what the NIC counted.
	Packets, Bytes     []uint64
	HWPackets, HWBytes []uint64
}

// Skiff reports whether the filter carries a policy rule's cookie.
func (f PolicyFilter) Skiff() bool { return IsPolicyCookie(f.Cookie) }

// DecodePolicy decodes one RTM_NEWTFILTER message (tcmsg and attributes).
// ok is false for what is not a flower filter (the chain's head in a
// dump, other classifiers). Keys it does not know are ignored.
func DecodePolicy(b []byte) (f PolicyFilter, ok bool, err error) {
	tf, ok, err := tc.Decode(b)
	if err != nil || !ok {
		return f, false, err
	}
	return policyFilter(&tf), true, nil
}

// policyFilter reads a tc filter as a policy rule.
func policyFilter(tf *tc.Filter) PolicyFilter {
	m := tf.Match
	f := PolicyFilter{Handle: tf.Handle, Flags: tf.Flags, Info: uint32(tf.Prio)<<16 | uint32(htons(tf.Proto)),
		Rule: PolicyRule{Index: tf.Ifindex, Chain: tf.Chain, Prio: tf.Prio,
			Match: PolicyMatch{EthType: tf.Proto, EncKeyID: m.EncKeyID, IPProto: m.IPProto, ICMPType: m.ICMPType, Src: m.Src, Dst: m.Dst,
				DstPortMin: m.DstPortMin, DstPortMax: m.DstPortMax, CtState: m.CtState, CtStateMask: m.CtStateMask}}}
	if len(m.DstMAC) == 6 && m.DstMACMask == nil {
		f.Rule.Match.DstMAC = m.DstMAC.String()
	}
	if tf.Kind == tc.KindFw && m.MarkMask == m.Mark {
		f.Rule.Match.Mark = m.Mark
	}
	for _, ta := range tf.Actions {
		if f.Cookie == nil && ta.Cookie != nil {
			f.Cookie = ta.Cookie
		}
		a := PolicyAction{Kind: ta.Kind}
		switch ta.Kind {
		case tc.KindCt:
			a.Zone, a.Commit = ta.Zone, ta.Commit
		case tc.KindGact:
			switch v := ta.Verdict; {
			case v&^tc.TC_ACT_EXT_VAL_MASK == tc.TC_ACT_GOTO_CHAIN:
				a.Kind, a.Chain = PolicyGoto, v&tc.TC_ACT_EXT_VAL_MASK
			case v == tc.TC_ACT_SHOT:
				a.Kind = PolicyDrop
			case v == tc.TC_ACT_OK:
				a.Kind = PolicyPass
			case v == tc.TC_ACT_UNSPEC:
				a.Kind = PolicyContinue
			default:
				a.Kind = "gact " + strconv.FormatUint(uint64(v), 10)
			}
		case tc.KindMirred:
			a.Kind, a.Index = PolicyRedirect, ta.Ifindex
			if ta.MirredOp != tc.TCA_EGRESS_REDIR {
				a.Kind = "mirred " + strconv.FormatUint(uint64(ta.MirredOp), 10)
			}
		}
		f.Rule.Actions = append(f.Rule.Actions, a)
		f.Packets = append(f.Packets, ta.Stats.Packets)
		f.Bytes = append(f.Bytes, ta.Stats.Bytes)
		f.HWPackets = append(f.HWPackets, ta.Stats.HWPackets)
		f.HWBytes = append(f.HWBytes, ta.Stats.HWBytes)
	}
	return f
}

// PolicyConn installs and dumps policy rules over rtnetlink.
type PolicyConn struct {
	c tc.Client
}

// Namespace opens tc clients of a network namespace; an nl.Kernel is
// one (the real kernel's, or a fake's).
type Namespace interface {
	TC(sockets int) (tc.Client, error)
}

// OpenPolicy returns a connection in the namespace ns.
func OpenPolicy(ns Namespace) (p *PolicyConn, err error) { return openPolicy(ns, 1) }

// openPolicy is OpenPolicy with writers sockets for bulk writes.
func openPolicy(ns Namespace, writers int) (p *PolicyConn, err error) {
	p = &PolicyConn{}
	if p.c, err = ns.TC(writers); err != nil {
		return nil, fmt.Errorf("flower: %w", err)
	}
	return p, nil
}

// Close releases the socket.
func (p *PolicyConn) Close() error { return p.c.Close() }

// Add installs r as a new filter (NLM_F_EXCL: an existing filter at the
// same chain, priority and key is an error). flags are TCA_CLS_FLAGS_*
// (0: software and hardware where offered).
func (p *PolicyConn) Add(r PolicyRule, flags uint32) error {
	if err := r.Validate(); err != nil {
		return err
	}
	f := r.filter(0, flags)
	if err := p.c.Do(tc.Op{Kind: tc.Add, Filter: &f}); err != nil {
		return fmt.Errorf("flower: adding policy rule %s on %s: %w", r, r.Dev, err)
	}
	return nil
}

// Replace replaces the filter at handle (same chain, priority, protocol
// and key) with r.
func (p *PolicyConn) Replace(r PolicyRule, handle, flags uint32) error {
	if err := r.Validate(); err != nil {
		return err
	}
	f := r.filter(handle, flags)
	if err := p.c.Do(tc.Op{Kind: tc.Replace, Filter: &f}); err != nil {
		return fmt.Errorf("flower: replacing filter %#x with policy rule %s on %s: %w", handle, r, r.Dev, err)
	}
	return nil
}

// Delete removes the filter f from the ingress of dev.
func (p *PolicyConn) Delete(f PolicyFilter) error {
	if err := p.c.Do(tc.Op{Kind: tc.Delete, Filter: deleteFilter(f)}); err != nil {
		return fmt.Errorf("flower: deleting filter %#x prio %d chain %d of ifindex %d: %w", f.Handle, f.Rule.Prio, f.Rule.Chain, f.Rule.Index, err)
	}
	return nil
}

// deleteFilter is what a request to delete f names.
func deleteFilter(f PolicyFilter) *tc.Filter {
	proto := f.Rule.Match.EthType
	if f.Info != 0 {
		proto = htons(uint16(f.Info))
	}
	tf := &tc.Filter{Ifindex: f.Rule.Index, Chain: f.Rule.Chain, Prio: f.Rule.Prio, Proto: proto, Handle: f.Handle}
	if f.Rule.Match.Mark != 0 {
		tf.Kind, tf.Match.Mark = tc.KindFw, f.Handle
	}
	return tf
}

// Dump returns the flower filters of every chain of ifindex's ingress,
// decoded as policy rules (Skiff's or not: see PolicyFilter.Skiff).
func (p *PolicyConn) Dump(ifindex int) ([]PolicyFilter, error) {
	return p.dump(ifindex, tc.DumpOptions{})
}

// DumpChains returns the flower filters of the given chains of ifindex's
// ingress (one dump each, TCA_CHAIN), in that order.
func (p *PolicyConn) DumpChains(ifindex int, chains ...uint32) ([]PolicyFilter, error) {
	if len(chains) == 0 {
		return nil, nil
	}
	return p.dump(ifindex, tc.DumpOptions{Chains: chains})
}

func (p *PolicyConn) dump(ifindex int, o tc.DumpOptions) ([]PolicyFilter, error) {
	var out []PolicyFilter
	err := p.c.DumpFunc(ifindex, o, func(f *tc.Filter) { out = append(out, policyFilter(f)) })
	if err != nil {
		return nil, fmt.Errorf("flower: %w", err)
	}
	return out, nil
}

// refusal is the errno of a hardware refusal and the driver's message.
func refusal(err error) (unix.Errno, string, bool) {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return 0, "", false
	}
	var te *tc.Error
	if errors.As(err, &te) {
		return errno, te.Message, true
	}
	return errno, "", true
}
