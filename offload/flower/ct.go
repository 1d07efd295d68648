package flower

// Policy rules: tc-flower filters with conntrack (act_ct) for stateful
// NetworkPolicy. go-tc has neither the ct_state keys nor port ranges, and
// its dump fails on a filter holding them (unmarshalFlower rejects
// attributes it does not know), so these filters are encoded and decoded
// here on github.com/mdlayher/netlink, whole: tcmsg, TCA_KIND, TCA_CHAIN,
// TCA_OPTIONS (flower keys, TCA_FLOWER_FLAGS, TCA_FLOWER_ACT with ct,
// gact and mirred). Numbers from include/uapi/linux/pkt_cls.h,
// tc_act/tc_ct.h, tc_act/tc_gact.h and tc_act/tc_mirred.h (6.12).

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Ethernet types of policy rules.
const (
	EthIPv4 uint16 = 0x0800
	EthIPv6 uint16 = 0x86dd
)

// Conntrack state bits of a flower ct_state match
// (TCA_FLOWER_KEY_CT_FLAGS_*).
const (
	CtNew         uint16 = 1 << 0
	CtEstablished uint16 = 1 << 1
	CtRelated     uint16 = 1 << 2
	CtTracked     uint16 = 1 << 3
	CtInvalid     uint16 = 1 << 4
	CtReply       uint16 = 1 << 5
	ctAll                = CtNew | CtEstablished | CtRelated | CtTracked | CtInvalid | CtReply
)

// Policy action kinds.
const (
	PolicyCt       = "ct"       // act_ct in Zone, committing when Commit; pipe
	PolicyGoto     = "goto"     // gact goto chain Chain
	PolicyDrop     = "drop"     // gact shot
	PolicyPass     = "pass"     // gact ok: ends classification, the packet goes on
	PolicyContinue = "continue" // gact continue: the next filter of the chain
	PolicyRedirect = "redirect" // mirred egress redirect to the device at Index
)

// Netlink attribute numbers.
const (
	tcaKind    = 1
	tcaOptions = 2
	tcaChain   = 11

	tcaFlowerAct            = 3
	tcaFlowerKeyEthType     = 8
	tcaFlowerKeyIPProto     = 9
	tcaFlowerKeyIPv4Src     = 10
	tcaFlowerKeyIPv4SrcMask = 11
	tcaFlowerKeyIPv4Dst     = 12
	tcaFlowerKeyIPv4DstMask = 13
	tcaFlowerKeyTCPDst      = 19
	tcaFlowerKeyUDPDst      = 21
	tcaFlowerFlags          = 22
	tcaFlowerKeyEncKeyID    = 26
	tcaFlowerKeyTCPDstMask  = 36
	tcaFlowerKeyUDPDstMask  = 38
	tcaFlowerKeySCTPDstMask = 40
	tcaFlowerKeySCTPDst     = 42
	tcaFlowerKeyPortDstMin  = 89
	tcaFlowerKeyPortDstMax  = 90
	tcaFlowerKeyCtState     = 91
	tcaFlowerKeyCtStateMask = 92

	tcaActKind    = 1
	tcaActOptions = 2
	tcaActStats   = 4
	tcaActCookie  = 6

	tcaStatsBasic  = 1
	tcaStatsHW     = 7 // TCA_STATS_BASIC_HW
	tcaStatsPkt64  = 8
	tcaCtParms     = 1
	tcaCtAction    = 3
	tcaCtZone      = 4
	tcaCtActCommit = 1 << 0
	tcaGactParms   = 2
	tcaMirredParms = 2

	actOK        = 0
	actShot      = 2
	actPipe      = 3
	actStolen    = 4
	actUnspec    = 0xffffffff
	actGotoChain = 2 << 28 // TC_ACT_GOTO_CHAIN, or'ed with the chain index
	actExtMask   = 0xf << 28
	egressRedir  = 1 // TCA_EGRESS_REDIR

	policyMagic = "skP" // first bytes of a policy rule's cookie
)

// PolicyRule is one flower filter of a conntrack-based policy on a
// device's ingress.
type PolicyRule struct {
	Dev     string // the device's name, for messages
	Index   int    // the device's ifindex
	Chain   uint32
	Prio    uint16 // not Skiff's datapath priorities (PrioARP..PrioFloodLast)
	Match   PolicyMatch
	Actions []PolicyAction
	// What the filter enforces, for counters (not part of the filter):
	// the endpoint whose policy it is ("" for the pipeline's own
	// filters), Direction "ingress" or "egress", and RuleIndex, the
	// rule's place in that direction of the endpoint's policy (-1: the
	// default deny).
	Endpoint  string
	Direction string
	RuleIndex int
}

// PolicyMatch is what a policy rule matches. EthType is required; the IP
// keys need EthIPv4 (IPv6 addresses are not encoded yet).
type PolicyMatch struct {
	EthType  uint16 // EthIPv4, EthIPv6, EthARP, or EthAll (every protocol)
	EncKeyID uint32 // the tunnel's VNI (on the VXLAN device); 0: any
	IPProto  uint8  // 0: any; unix.IPPROTO_TCP, _UDP, _SCTP for ports
	Src, Dst netip.Prefix
	// DstPortMin..DstPortMax: one port when equal, a range
	// (TCA_FLOWER_KEY_PORT_DST_MIN/MAX) otherwise; 0: any.
	DstPortMin, DstPortMax uint16
	// CtState under CtStateMask: +trk+est is CtTracked|CtEstablished
	// under the same mask; 0 mask: conntrack state not matched.
	CtState, CtStateMask uint16
}

// PolicyAction is one action of a policy rule.
type PolicyAction struct {
	Kind   string // PolicyCt, PolicyGoto, PolicyDrop, PolicyPass, PolicyContinue, PolicyRedirect
	Zone   uint16 // PolicyCt
	Commit bool   // PolicyCt
	Chain  uint32 // PolicyGoto
	Index  int    // PolicyRedirect: the target's ifindex
}

// String is the rule without its device: chain, priority, match, actions.
func (r PolicyRule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chain %d prio %d %s", r.Chain, r.Prio, r.Match)
	b.WriteString(":")
	for i, a := range r.Actions {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(" ")
		b.WriteString(a.String())
	}
	return b.String()
}

func (m PolicyMatch) String() string {
	var b strings.Builder
	switch m.EthType {
	case EthIPv4:
		b.WriteString("ip")
	case EthIPv6:
		b.WriteString("ipv6")
	case EthARP:
		b.WriteString("arp")
	case EthAll:
		b.WriteString("all")
	default:
		fmt.Fprintf(&b, "eth_type %#04x", m.EthType)
	}
	if m.EncKeyID != 0 {
		fmt.Fprintf(&b, " enc_key_id %d", m.EncKeyID)
	}
	if m.IPProto != 0 {
		fmt.Fprintf(&b, " ip_proto %d", m.IPProto)
	}
	if m.Src.IsValid() {
		fmt.Fprintf(&b, " src %s", m.Src)
	}
	if m.Dst.IsValid() {
		fmt.Fprintf(&b, " dst %s", m.Dst)
	}
	if m.DstPortMin != 0 {
		fmt.Fprintf(&b, " dst_port %d", m.DstPortMin)
		if m.DstPortMax != m.DstPortMin {
			fmt.Fprintf(&b, "-%d", m.DstPortMax)
		}
	}
	if m.CtStateMask != 0 {
		fmt.Fprintf(&b, " ct_state %s", CtStateString(m.CtState, m.CtStateMask))
	}
	return b.String()
}

// CtStateString writes a ct_state match as tc does: +trk+est-new.
func CtStateString(state, mask uint16) string {
	names := []struct {
		bit  uint16
		name string
	}{{CtTracked, "trk"}, {CtNew, "new"}, {CtEstablished, "est"}, {CtRelated, "rel"}, {CtInvalid, "inv"}, {CtReply, "rpl"}}
	var b strings.Builder
	for _, n := range names {
		if mask&n.bit == 0 {
			continue
		}
		if state&n.bit != 0 {
			b.WriteString("+")
		} else {
			b.WriteString("-")
		}
		b.WriteString(n.name)
	}
	return b.String()
}

func (a PolicyAction) String() string {
	switch a.Kind {
	case PolicyCt:
		s := "ct"
		if a.Commit {
			s += " commit"
		}
		return s + " zone " + strconv.Itoa(int(a.Zone))
	case PolicyGoto:
		return "goto chain " + strconv.FormatUint(uint64(a.Chain), 10)
	case PolicyRedirect:
		return "redirect " + strconv.Itoa(a.Index)
	}
	return a.Kind
}

// Validate checks what the kernel would refuse, naming the field.
func (r PolicyRule) Validate() error {
	if r.Index <= 0 {
		return fmt.Errorf("policy rule on %q: index %d: not an interface index", r.Dev, r.Index)
	}
	if r.Prio == 0 {
		return fmt.Errorf("policy rule on %s: prio: 0 lets the kernel choose; give one", r.Dev)
	}
	if skiffPrio(r.Prio) {
		return fmt.Errorf("policy rule on %s: prio %#x: in the datapath's range %#x-%#x", r.Dev, r.Prio, PrioARP, PrioFloodLast)
	}
	m := r.Match
	ip := m.IPProto != 0 || m.Src.IsValid() || m.Dst.IsValid() || m.DstPortMin != 0
	switch {
	case m.EthType == 0:
		return fmt.Errorf("policy rule %s on %s: match.EthType: required", r, r.Dev)
	case ip && m.EthType != EthIPv4:
		return fmt.Errorf("policy rule %s on %s: match.EthType %#04x: IP keys need IPv4", r, r.Dev, m.EthType)
	case m.Src.IsValid() && !m.Src.Addr().Is4(), m.Dst.IsValid() && !m.Dst.Addr().Is4():
		return fmt.Errorf("policy rule %s on %s: match.Src/Dst: IPv4 prefixes only", r, r.Dev)
	case m.DstPortMin != 0 && m.IPProto != unix.IPPROTO_TCP && m.IPProto != unix.IPPROTO_UDP && m.IPProto != unix.IPPROTO_SCTP:
		return fmt.Errorf("policy rule %s on %s: match.IPProto %d: ports need tcp, udp or sctp", r, r.Dev, m.IPProto)
	case m.DstPortMax < m.DstPortMin || (m.DstPortMin == 0 && m.DstPortMax != 0):
		return fmt.Errorf("policy rule %s on %s: match.DstPortMin/Max %d-%d: not a range", r, r.Dev, m.DstPortMin, m.DstPortMax)
	case m.CtStateMask&^ctAll != 0 || m.CtState&^m.CtStateMask != 0:
		return fmt.Errorf("policy rule %s on %s: match.CtState %#x/%#x: unknown bits or bits outside the mask", r, r.Dev, m.CtState, m.CtStateMask)
	case m.CtState != 0 && m.CtState&CtTracked == 0:
		return fmt.Errorf("policy rule %s on %s: match.CtState %s: flags without +trk", r, r.Dev, CtStateString(m.CtState, m.CtStateMask))
	case m.CtState&(CtNew|CtEstablished) == CtNew|CtEstablished:
		return fmt.Errorf("policy rule %s on %s: match.CtState: +new and +est exclude each other", r, r.Dev)
	case len(r.Actions) == 0:
		return fmt.Errorf("policy rule %s on %s: actions: none", r, r.Dev)
	}
	for i, a := range r.Actions {
		switch a.Kind {
		case PolicyCt, PolicyDrop, PolicyPass, PolicyContinue:
		case PolicyGoto:
			if a.Chain >= 1<<28 || a.Chain <= r.Chain {
				return fmt.Errorf("policy rule %s on %s: actions[%d].Chain %d: must be after the rule's chain %d", r, r.Dev, i, a.Chain, r.Chain)
			}
		case PolicyRedirect:
			if a.Index <= 0 {
				return fmt.Errorf("policy rule %s on %s: actions[%d].Index %d: not an interface index", r, r.Dev, i, a.Index)
			}
		default:
			return fmt.Errorf("policy rule %s on %s: actions[%d].Kind %q: unknown", r, r.Dev, i, a.Kind)
		}
	}
	return nil
}

// PolicyCookie is the cookie of r's first action: "skP", a version byte
// and 12 bytes of hash of r.String().
func PolicyCookie(r PolicyRule) []byte {
	h := sha256.Sum256([]byte(r.String()))
	c := make([]byte, cookieLen)
	copy(c, policyMagic)
	c[3] = 1
	copy(c[4:], h[:cookieLen-4])
	return c
}

// IsPolicyCookie reports whether c marks a Skiff policy rule.
func IsPolicyCookie(c []byte) bool {
	return len(c) == cookieLen && bytes.HasPrefix(c, []byte(policyMagic))
}

// tcmsg is struct tcmsg.
func tcmsg(ifindex int, handle, info uint32) []byte {
	b := make([]byte, 20)
	b[0] = unix.AF_UNSPEC
	binary.NativeEndian.PutUint32(b[4:], uint32(ifindex))
	binary.NativeEndian.PutUint32(b[8:], handle)
	binary.NativeEndian.PutUint32(b[12:], ingress)
	binary.NativeEndian.PutUint32(b[16:], info)
	return b
}

// tcGen is struct tc_gen (index, capab, action, refcnt, bindcnt).
func tcGen(action uint32) []byte {
	b := make([]byte, 20)
	binary.NativeEndian.PutUint32(b[8:], action)
	return b
}

// EncodePolicy is the RTM_NEWTFILTER payload (tcmsg and attributes) of r
// with flags (TCA_CLS_FLAGS_*) at handle (0: the kernel picks one).
func EncodePolicy(r PolicyRule, handle, flags uint32) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	m := r.Match
	ae := netlink.NewAttributeEncoder()
	ae.String(tcaKind, "flower")
	ae.Uint32(tcaChain, r.Chain)
	ae.Nested(tcaOptions, func(ae *netlink.AttributeEncoder) error {
		if m.EthType != EthAll {
			ae.Uint16(tcaFlowerKeyEthType, htons(m.EthType))
		}
		if m.EncKeyID != 0 {
			ae.Bytes(tcaFlowerKeyEncKeyID, binary.BigEndian.AppendUint32(nil, m.EncKeyID))
		}
		if m.IPProto != 0 {
			ae.Uint8(tcaFlowerKeyIPProto, m.IPProto)
		}
		prefix := func(key, mask uint16, p netip.Prefix) {
			a := p.Masked().Addr().As4()
			mk := netipMask4(p.Bits())
			ae.Bytes(key, a[:])
			ae.Bytes(mask, mk[:])
		}
		if m.Src.IsValid() {
			prefix(tcaFlowerKeyIPv4Src, tcaFlowerKeyIPv4SrcMask, m.Src)
		}
		if m.Dst.IsValid() {
			prefix(tcaFlowerKeyIPv4Dst, tcaFlowerKeyIPv4DstMask, m.Dst)
		}
		be16 := func(typ uint16, v uint16) { ae.Bytes(typ, binary.BigEndian.AppendUint16(nil, v)) }
		switch {
		case m.DstPortMin == 0:
		case m.DstPortMin != m.DstPortMax:
			be16(tcaFlowerKeyPortDstMin, m.DstPortMin)
			be16(tcaFlowerKeyPortDstMax, m.DstPortMax)
		case m.IPProto == unix.IPPROTO_TCP:
			be16(tcaFlowerKeyTCPDst, m.DstPortMin)
			be16(tcaFlowerKeyTCPDstMask, 0xffff)
		case m.IPProto == unix.IPPROTO_UDP:
			be16(tcaFlowerKeyUDPDst, m.DstPortMin)
			be16(tcaFlowerKeyUDPDstMask, 0xffff)
		default:
			be16(tcaFlowerKeySCTPDst, m.DstPortMin)
			be16(tcaFlowerKeySCTPDstMask, 0xffff)
		}
		if m.CtStateMask != 0 {
			ae.Uint16(tcaFlowerKeyCtState, m.CtState)
			ae.Uint16(tcaFlowerKeyCtStateMask, m.CtStateMask)
		}
		ae.Uint32(tcaFlowerFlags, flags)
		ae.Nested(tcaFlowerAct, func(ae *netlink.AttributeEncoder) error {
			for i, a := range r.Actions {
				ae.Nested(uint16(i+1), func(ae *netlink.AttributeEncoder) error {
					switch a.Kind {
					case PolicyCt:
						ae.String(tcaActKind, "ct")
						ae.Nested(tcaActOptions, func(ae *netlink.AttributeEncoder) error {
							ae.Bytes(tcaCtParms, tcGen(actPipe))
							if a.Zone != 0 {
								ae.Uint16(tcaCtZone, a.Zone)
							}
							if a.Commit {
								ae.Uint16(tcaCtAction, tcaCtActCommit)
							}
							return nil
						})
					case PolicyRedirect:
						ae.String(tcaActKind, "mirred")
						ae.Nested(tcaActOptions, func(ae *netlink.AttributeEncoder) error {
							p := tcGen(actStolen)
							p = binary.NativeEndian.AppendUint32(p, egressRedir)
							p = binary.NativeEndian.AppendUint32(p, uint32(a.Index))
							ae.Bytes(tcaMirredParms, p)
							return nil
						})
					default:
						var act uint32
						switch a.Kind {
						case PolicyGoto:
							act = actGotoChain | a.Chain
						case PolicyDrop:
							act = actShot
						case PolicyPass:
							act = actOK
						case PolicyContinue:
							act = actUnspec
						}
						ae.String(tcaActKind, "gact")
						ae.Nested(tcaActOptions, func(ae *netlink.AttributeEncoder) error {
							ae.Bytes(tcaGactParms, tcGen(act))
							return nil
						})
					}
					if i == 0 {
						ae.Bytes(tcaActCookie, PolicyCookie(r))
					}
					return nil
				})
			}
			return nil
		})
		return nil
	})
	attrs, err := ae.Encode()
	if err != nil {
		return nil, fmt.Errorf("flower: encoding policy rule %s on %s: %w", r, r.Dev, err)
	}
	return append(tcmsg(r.Index, handle, uint32(r.Prio)<<16|uint32(htons(m.EthType))), attrs...), nil
}

func netipMask4(bits int) [4]byte {
	var m [4]byte
	v := ^uint32(0) << (32 - bits)
	if bits == 0 {
		v = 0
	}
	binary.BigEndian.PutUint32(m[:], v)
	return m
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
	if len(b) < 20 {
		return f, false, fmt.Errorf("flower: tcmsg of %d bytes", len(b))
	}
	f.Rule.Index = int(binary.NativeEndian.Uint32(b[4:]))
	f.Handle = binary.NativeEndian.Uint32(b[8:])
	info := binary.NativeEndian.Uint32(b[16:])
	f.Info = info
	f.Rule.Prio = uint16(info >> 16)
	f.Rule.Match.EthType = htons(uint16(info))
	ad, err := netlink.NewAttributeDecoder(b[20:])
	if err != nil {
		return f, false, fmt.Errorf("flower: filter attributes: %w", err)
	}
	var kind string
	var opts []byte
	for ad.Next() {
		switch ad.Type() {
		case tcaKind:
			kind = ad.String()
		case tcaChain:
			f.Rule.Chain = ad.Uint32()
		case tcaOptions:
			opts = ad.Bytes()
		}
	}
	if err := ad.Err(); err != nil {
		return f, false, fmt.Errorf("flower: filter attributes: %w", err)
	}
	if kind != "flower" || f.Handle == 0 || opts == nil {
		return f, false, nil
	}
	if err := decodeFlower(opts, &f); err != nil {
		return f, false, fmt.Errorf("flower: filter %#x prio %d chain %d: %w", f.Handle, f.Rule.Prio, f.Rule.Chain, err)
	}
	return f, true, nil
}

func decodeFlower(b []byte, f *PolicyFilter) error {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return err
	}
	m := &f.Rule.Match
	var src, srcMask, dst, dstMask []byte
	be16 := func() uint16 {
		if v := ad.Bytes(); len(v) == 2 {
			return binary.BigEndian.Uint16(v)
		}
		return 0
	}
	for ad.Next() {
		switch ad.Type() {
		case tcaFlowerKeyEthType:
			m.EthType = be16()
		case tcaFlowerKeyIPProto:
			m.IPProto = ad.Uint8()
		case tcaFlowerKeyEncKeyID:
			if v := ad.Bytes(); len(v) == 4 {
				m.EncKeyID = binary.BigEndian.Uint32(v)
			}
		case tcaFlowerKeyIPv4Src:
			src = ad.Bytes()
		case tcaFlowerKeyIPv4SrcMask:
			srcMask = ad.Bytes()
		case tcaFlowerKeyIPv4Dst:
			dst = ad.Bytes()
		case tcaFlowerKeyIPv4DstMask:
			dstMask = ad.Bytes()
		case tcaFlowerKeyTCPDst, tcaFlowerKeyUDPDst, tcaFlowerKeySCTPDst:
			m.DstPortMin = be16()
			m.DstPortMax = m.DstPortMin
		case tcaFlowerKeyPortDstMin:
			m.DstPortMin = be16()
		case tcaFlowerKeyPortDstMax:
			m.DstPortMax = be16()
		case tcaFlowerKeyCtState:
			m.CtState = ad.Uint16()
		case tcaFlowerKeyCtStateMask:
			m.CtStateMask = ad.Uint16()
		case tcaFlowerFlags:
			f.Flags = ad.Uint32()
		case tcaFlowerAct:
			ad.Nested(func(ad *netlink.AttributeDecoder) error {
				for ad.Next() {
					ad.Nested(func(ad *netlink.AttributeDecoder) error { return decodeAction(ad, f) })
				}
				return ad.Err()
			})
		}
	}
	if err := ad.Err(); err != nil {
		return err
	}
	var errs []error
	prefix := func(name string, a, mask []byte) netip.Prefix {
		if a == nil {
			return netip.Prefix{}
		}
		addr, ok := netip.AddrFromSlice(a)
		if !ok || len(mask) != 4 {
			errs = append(errs, fmt.Errorf("%s: %d-byte address, %d-byte mask", name, len(a), len(mask)))
			return netip.Prefix{}
		}
		ones := 0
		for v := binary.BigEndian.Uint32(mask); v&(1<<31) != 0; v <<= 1 {
			ones++
		}
		return netip.PrefixFrom(addr, ones).Masked()
	}
	m.Src = prefix("ipv4 src", src, srcMask)
	m.Dst = prefix("ipv4 dst", dst, dstMask)
	return errors.Join(errs...)
}

// decodeAction decodes one action (TCA_ACT_*) into f.
func decodeAction(ad *netlink.AttributeDecoder, f *PolicyFilter) error {
	var kind string
	var opts, stats []byte
	for ad.Next() {
		switch ad.Type() {
		case tcaActKind:
			kind = ad.String()
		case tcaActOptions:
			opts = ad.Bytes()
		case tcaActStats:
			stats = ad.Bytes()
		case tcaActCookie:
			if f.Cookie == nil {
				f.Cookie = ad.Bytes()
			}
		}
	}
	a := PolicyAction{Kind: kind}
	od, err := netlink.NewAttributeDecoder(opts)
	if err != nil {
		return fmt.Errorf("action %s options: %w", kind, err)
	}
	for od.Next() {
		v := od.Bytes()
		switch {
		case kind == "ct" && od.Type() == tcaCtZone:
			a.Zone = od.Uint16()
		case kind == "ct" && od.Type() == tcaCtAction:
			a.Commit = od.Uint16()&tcaCtActCommit != 0
		case kind == "gact" && od.Type() == tcaGactParms && len(v) >= 12:
			act := binary.NativeEndian.Uint32(v[8:])
			switch {
			case act&actExtMask == actGotoChain:
				a.Kind, a.Chain = PolicyGoto, act&^actExtMask
			case act == actShot:
				a.Kind = PolicyDrop
			case act == actOK:
				a.Kind = PolicyPass
			case act == actUnspec:
				a.Kind = PolicyContinue
			default:
				a.Kind = "gact " + strconv.FormatUint(uint64(act), 10)
			}
		case kind == "mirred" && od.Type() == tcaMirredParms && len(v) >= 28:
			a.Kind, a.Index = PolicyRedirect, int(binary.NativeEndian.Uint32(v[24:]))
			if binary.NativeEndian.Uint32(v[20:]) != egressRedir {
				a.Kind = "mirred " + strconv.FormatUint(uint64(binary.NativeEndian.Uint32(v[20:])), 10)
			}
		}
	}
	if err := od.Err(); err != nil {
		return fmt.Errorf("action %s options: %w", kind, err)
	}
	var pk, by, hwpk, hwby uint64
	if sd, err := netlink.NewAttributeDecoder(stats); err == nil {
		for sd.Next() {
			v := sd.Bytes()
			switch sd.Type() {
			case tcaStatsBasic:
				if len(v) >= 12 {
					by, pk = binary.NativeEndian.Uint64(v), uint64(binary.NativeEndian.Uint32(v[8:]))
				}
			case tcaStatsHW:
				if len(v) >= 12 {
					hwby, hwpk = binary.NativeEndian.Uint64(v), uint64(binary.NativeEndian.Uint32(v[8:]))
				}
			case tcaStatsPkt64:
				if len(v) == 8 {
					pk = binary.NativeEndian.Uint64(v)
				}
			}
		}
	}
	f.Rule.Actions = append(f.Rule.Actions, a)
	f.Packets = append(f.Packets, pk)
	f.Bytes = append(f.Bytes, by)
	f.HWPackets = append(f.HWPackets, hwpk)
	f.HWBytes = append(f.HWBytes, hwby)
	return nil
}

// PolicyConn installs and dumps policy rules over rtnetlink.
type PolicyConn struct {
	c *netlink.Conn
}

// OpenPolicy returns a connection in the caller's network namespace
// (netns 0) or in the namespace of the given file descriptor.
func OpenPolicy(netns int) (*PolicyConn, error) {
	c, err := netlink.Dial(unix.NETLINK_ROUTE, &netlink.Config{NetNS: netns})
	if err != nil {
		return nil, fmt.Errorf("flower: rtnetlink: %w", err)
	}
	if err := c.SetOption(netlink.ExtendedAcknowledge, true); err != nil {
		c.Close()
		return nil, fmt.Errorf("flower: extended acks: %w", err)
	}
	return &PolicyConn{c: c}, nil
}

// Close releases the socket.
func (p *PolicyConn) Close() error { return p.c.Close() }

// Add installs r as a new filter (NLM_F_EXCL: an existing filter at the
// same chain, priority and key is an error). flags are TCA_CLS_FLAGS_*
// (0: software and hardware where offered).
func (p *PolicyConn) Add(r PolicyRule, flags uint32) error {
	b, err := EncodePolicy(r, 0, flags)
	if err != nil {
		return err
	}
	_, err = p.c.Execute(netlink.Message{Header: netlink.Header{Type: unix.RTM_NEWTFILTER,
		Flags: netlink.Request | netlink.Acknowledge | netlink.Create | netlink.Excl}, Data: b})
	if err != nil {
		return fmt.Errorf("flower: adding policy rule %s on %s: %w", r, r.Dev, err)
	}
	return nil
}

// Replace replaces the filter at handle (same chain, priority, protocol
// and key) with r.
func (p *PolicyConn) Replace(r PolicyRule, handle, flags uint32) error {
	b, err := EncodePolicy(r, handle, flags)
	if err != nil {
		return err
	}
	_, err = p.c.Execute(netlink.Message{Header: netlink.Header{Type: unix.RTM_NEWTFILTER,
		Flags: netlink.Request | netlink.Acknowledge | netlink.Replace}, Data: b})
	if err != nil {
		return fmt.Errorf("flower: replacing filter %#x with policy rule %s on %s: %w", handle, r, r.Dev, err)
	}
	return nil
}

// Delete removes the filter f from the ingress of dev.
func (p *PolicyConn) Delete(f PolicyFilter) error {
	ae := netlink.NewAttributeEncoder()
	ae.String(tcaKind, "flower")
	ae.Uint32(tcaChain, f.Rule.Chain)
	attrs, err := ae.Encode()
	if err != nil {
		return fmt.Errorf("flower: encoding delete: %w", err)
	}
	info := f.Info
	if info == 0 {
		info = uint32(f.Rule.Prio)<<16 | uint32(htons(f.Rule.Match.EthType))
	}
	b := append(tcmsg(f.Rule.Index, f.Handle, info), attrs...)
	_, err = p.c.Execute(netlink.Message{Header: netlink.Header{Type: unix.RTM_DELTFILTER,
		Flags: netlink.Request | netlink.Acknowledge}, Data: b})
	if err != nil {
		return fmt.Errorf("flower: deleting filter %#x prio %d chain %d of ifindex %d: %w", f.Handle, f.Rule.Prio, f.Rule.Chain, f.Rule.Index, err)
	}
	return nil
}

// Dump returns the flower filters of every chain of ifindex's ingress,
// decoded as policy rules (Skiff's or not: see PolicyFilter.Skiff).
func (p *PolicyConn) Dump(ifindex int) ([]PolicyFilter, error) {
	return p.dump(ifindex, tcmsg(ifindex, 0, 0))
}

// DumpChains returns the flower filters of the given chains of ifindex's
// ingress (one dump each, TCA_CHAIN), in that order.
func (p *PolicyConn) DumpChains(ifindex int, chains ...uint32) ([]PolicyFilter, error) {
	var out []PolicyFilter
	for _, c := range chains {
		ae := netlink.NewAttributeEncoder()
		ae.Uint32(tcaChain, c)
		attrs, err := ae.Encode()
		if err != nil {
			return nil, fmt.Errorf("flower: encoding a dump of chain %d: %w", c, err)
		}
		fs, err := p.dump(ifindex, append(tcmsg(ifindex, 0, 0), attrs...))
		if err != nil {
			return nil, err
		}
		out = append(out, fs...)
	}
	return out, nil
}

func (p *PolicyConn) dump(ifindex int, req []byte) ([]PolicyFilter, error) {
	msgs, err := p.c.Execute(netlink.Message{Header: netlink.Header{Type: unix.RTM_GETTFILTER,
		Flags: netlink.Request | netlink.Dump}, Data: req})
	if err != nil {
		return nil, fmt.Errorf("flower: dumping filters of ifindex %d: %w", ifindex, err)
	}
	var out []PolicyFilter
	var errs []error
	for _, m := range msgs {
		f, ok, err := DecodePolicy(m.Data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			out = append(out, f)
		}
	}
	return out, errors.Join(errs...)
}
