// Package tc is Skiff's tc wire codec: flower filters with their actions
// (tunnel_key, mirred, gact, ct) encoded as the kernel's rtnetlink
// messages and decoded from dumps (full or terse) and notifications, the
// clsact qdisc, and the requests that install, replace, delete and dump
// them over an internal/nl/rtnl socket, many per sendmsg.
//
// Numbers come from golang.org/x/sys/unix where it has them; the rest are
// the uapi headers' enums in their order (uapi.go), checked against the
// installed headers by TestUAPIHeaders.
//
//	c, err := tc.Dial("/run/netns/n1")
//	errs, err := c.Write([]tc.Op{{Kind: tc.Add, Filter: f}, {Kind: tc.Delete, Filter: g}})
//	fs, err := c.Dump(ifindex, tc.DumpOptions{Chains: []uint32{0, 3}, Terse: true})
package tc

import (
	"encoding/binary"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/rtnl"
)

// Filter is one tc filter on a device's ingress (or another parent).
type Filter struct {
	Ifindex int
	Parent  uint32 // 0: Ingress
	Chain   uint32
	Prio    uint16
	Proto   uint16 // ETH_P_* in host order; unix.ETH_P_ALL: every protocol
	Handle  uint32 // 0 on create: the kernel picks one
	Kind    string // "flower", or KindFw (fw.go)
	Flags   uint32 // TCA_CLS_FLAGS_*
	Match   Match
	Actions []Action
}

// Match holds flower's keys. Zero fields are not matched.
type Match struct {
	DstMAC net.HardwareAddr
	// DstMACMask: the bits of DstMAC matched; nil matches all of them.
	DstMACMask net.HardwareAddr
	ArpOp      uint8      // with ArpTIP: 1 request, 2 reply
	ArpTIP     netip.Addr // ARP target address
	EncKeyID   uint32     // tunnel id (VNI)
	EncDst     netip.Addr // tunnel destination (IPv4)
	EncDstPort uint16
	IPProto    uint8
	// ICMPType is the ICMP (IPProto ICMP) or ICMPv6 (IPProto ICMPV6)
	// type, matched whole; 0: not matched.
	ICMPType uint8
	Src, Dst netip.Prefix // IPv4 (with Proto ETH_P_IP) or IPv6 (ETH_P_IPV6)
	// DstPortMin..DstPortMax: one port (the IPProto's key) when equal, a
	// range (TCA_FLOWER_KEY_PORT_DST_MIN/MAX) otherwise.
	DstPortMin, DstPortMax uint16
	// CtState under CtStateMask (TCA_FLOWER_KEY_CT_FLAGS_*).
	CtState, CtStateMask uint16
	// Mark under MarkMask: a fw filter's (KindFw) only key; its handle.
	Mark, MarkMask uint32
}

// Action kinds.
const (
	KindTunnelKey = "tunnel_key"
	KindMirred    = "mirred"
	KindGact      = "gact"
	KindCt        = "ct"
)

// Action is one tc action.
type Action struct {
	Kind string // KindTunnelKey, KindMirred, KindGact, KindCt; others as dumped
	// Verdict is the action's TC_ACT_*: gact's verdict (TC_ACT_GOTO_CHAIN
	// or'ed with a chain), mirred's (TC_ACT_STOLEN to redirect,
	// TC_ACT_PIPE to mirror), ct's and tunnel_key's (TC_ACT_PIPE).
	Verdict uint32
	// tunnel_key: TCA_TUNNEL_KEY_ACT_SET with the tunnel's id, addresses
	// and port, or TCA_TUNNEL_KEY_ACT_RELEASE.
	TunnelOp      uint32
	TunnelID      uint32
	TunnelSrc     netip.Addr
	TunnelDst     netip.Addr
	TunnelDstPort uint16
	// mirred: TCA_EGRESS_REDIR, TCA_EGRESS_MIRROR, TCA_INGRESS_REDIR...
	MirredOp uint32
	Ifindex  int
	// ct: the zone (0: the default zone, netfilter's own), commit, and
	// NAT (TCA_CT_ACT_NAT without a range: a tracked connection's
	// existing translation applied to the packet, reverse for replies).
	Zone   uint16
	Commit bool
	NAT    bool
	// Cookie is up to 16 bytes the kernel keeps for the action's owner.
	Cookie []byte
	// Stats, as dumped.
	Stats Stats
}

// Stats are an action's counters; HW what the NIC counted.
type Stats struct {
	Bytes, Packets     uint64
	HWBytes, HWPackets uint64
}

// Verdicts of gact.
func Goto(chain uint32) uint32 { return TC_ACT_GOTO_CHAIN | chain }

func tcmsg(b []byte, ifindex int, handle, parent, info uint32) []byte {
	b = append(b, unix.AF_UNSPEC, 0, 0, 0)
	b = binary.NativeEndian.AppendUint32(b, uint32(ifindex))
	b = binary.NativeEndian.AppendUint32(b, handle)
	b = binary.NativeEndian.AppendUint32(b, parent)
	return binary.NativeEndian.AppendUint32(b, info)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (f *Filter) parent() uint32 {
	if f.Parent == 0 {
		return Ingress
	}
	return f.Parent
}

func (f *Filter) info() uint32 { return uint32(f.Prio)<<16 | uint32(htons(f.Proto)) }

// AppendEncode appends f as the payload of an RTM_NEWTFILTER request
// (struct tcmsg and attributes) to b.
func (f *Filter) AppendEncode(b []byte) []byte {
	b = tcmsg(b, f.Ifindex, f.handle(), f.parent(), f.info())
	e := rtnl.NewEncoder(b)
	e.String(unix.TCA_KIND, f.kind())
	e.U32(unix.TCA_CHAIN, f.Chain)
	if f.Kind == KindFw {
		e.Nest(unix.TCA_OPTIONS, f.encodeFw)
		return e.Bytes()
	}
	e.Nest(unix.TCA_OPTIONS, func(e *rtnl.Encoder) {
		f.Match.encode(e, f.Proto)
		e.U32(TCA_FLOWER_FLAGS, f.Flags)
		e.Nest(TCA_FLOWER_ACT, func(e *rtnl.Encoder) {
			for i := range f.Actions {
				e.Nest(uint16(i+1), f.Actions[i].encode)
			}
		})
	})
	return e.Bytes()
}

// Encode is f as the payload of an RTM_NEWTFILTER request.
func (f *Filter) Encode() []byte { return f.AppendEncode(make([]byte, 0, 256)) }

func (m *Match) encode(e *rtnl.Encoder, proto uint16) {
	if proto != unix.ETH_P_ALL {
		e.BE16(TCA_FLOWER_KEY_ETH_TYPE, proto)
	}
	if len(m.DstMAC) == 6 {
		e.Put(TCA_FLOWER_KEY_ETH_DST, m.DstMAC)
		if len(m.DstMACMask) == 6 {
			e.Put(TCA_FLOWER_KEY_ETH_DST_MASK, m.DstMACMask)
		}
	}
	if m.EncKeyID != 0 {
		e.BE32(TCA_FLOWER_KEY_ENC_KEY_ID, m.EncKeyID)
	}
	if m.EncDst.Is4() {
		a := m.EncDst.As4()
		e.Put(TCA_FLOWER_KEY_ENC_IPV4_DST, a[:])
	}
	if m.EncDstPort != 0 {
		e.BE16(TCA_FLOWER_KEY_ENC_UDP_DST_PORT, m.EncDstPort)
	}
	if m.ArpTIP.Is4() {
		a := m.ArpTIP.As4()
		e.Put(TCA_FLOWER_KEY_ARP_TIP, a[:])
		e.U8(TCA_FLOWER_KEY_ARP_OP, m.ArpOp)
	}
	if m.IPProto != 0 {
		e.U8(TCA_FLOWER_KEY_IP_PROTO, m.IPProto)
	}
	if m.ICMPType != 0 {
		key, mask := uint16(TCA_FLOWER_KEY_ICMPV4_TYPE), uint16(TCA_FLOWER_KEY_ICMPV4_TYPE_MASK)
		if m.IPProto == unix.IPPROTO_ICMPV6 {
			key, mask = TCA_FLOWER_KEY_ICMPV6_TYPE, TCA_FLOWER_KEY_ICMPV6_TYPE_MASK
		}
		e.U8(key, m.ICMPType)
		e.U8(mask, 0xff)
	}
	prefix := func(key, mask uint16, p netip.Prefix) {
		a := p.Masked().Addr().As4()
		e.Put(key, a[:])
		e.BE32(mask, maskBits(p.Bits()))
	}
	prefix6 := func(key, mask uint16, p netip.Prefix) {
		a := p.Masked().Addr().As16()
		e.Put(key, a[:])
		e.Put(mask, maskBits6(p.Bits()))
	}
	switch {
	case m.Src.Addr().Is4():
		prefix(TCA_FLOWER_KEY_IPV4_SRC, TCA_FLOWER_KEY_IPV4_SRC_MASK, m.Src)
	case m.Src.Addr().Is6():
		prefix6(TCA_FLOWER_KEY_IPV6_SRC, TCA_FLOWER_KEY_IPV6_SRC_MASK, m.Src)
	}
	switch {
	case m.Dst.Addr().Is4():
		prefix(TCA_FLOWER_KEY_IPV4_DST, TCA_FLOWER_KEY_IPV4_DST_MASK, m.Dst)
	case m.Dst.Addr().Is6():
		prefix6(TCA_FLOWER_KEY_IPV6_DST, TCA_FLOWER_KEY_IPV6_DST_MASK, m.Dst)
	}
	switch {
	case m.DstPortMin == 0:
	case m.DstPortMin != m.DstPortMax:
		e.BE16(TCA_FLOWER_KEY_PORT_DST_MIN, m.DstPortMin)
		e.BE16(TCA_FLOWER_KEY_PORT_DST_MAX, m.DstPortMax)
	default:
		key, mask := portKeys(m.IPProto)
		e.BE16(key, m.DstPortMin)
		e.BE16(mask, 0xffff)
	}
	if m.CtStateMask != 0 {
		e.U16(TCA_FLOWER_KEY_CT_STATE, m.CtState)
		e.U16(TCA_FLOWER_KEY_CT_STATE_MASK, m.CtStateMask)
	}
}

// portKeys are the destination port key and its mask for a protocol.
func portKeys(proto uint8) (key, mask uint16) {
	switch proto {
	case unix.IPPROTO_TCP:
		return TCA_FLOWER_KEY_TCP_DST, TCA_FLOWER_KEY_TCP_DST_MASK
	case unix.IPPROTO_UDP:
		return TCA_FLOWER_KEY_UDP_DST, TCA_FLOWER_KEY_UDP_DST_MASK
	default:
		return TCA_FLOWER_KEY_SCTP_DST, TCA_FLOWER_KEY_SCTP_DST_MASK
	}
}

func maskBits(bits int) uint32 {
	if bits == 0 {
		return 0
	}
	return ^uint32(0) << (32 - bits)
}

// maskBits6 is an IPv6 prefix length as a 16-byte mask.
func maskBits6(bits int) []byte {
	m := make([]byte, 16)
	for i := 0; i < bits; i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}

// tcGen is struct tc_gen (index, capab, action, refcnt, bindcnt).
func tcGen(b []byte, verdict uint32) []byte {
	b = append(b, make([]byte, 8)...)
	b = binary.NativeEndian.AppendUint32(b, verdict)
	return append(b, make([]byte, 8)...)
}

func (a *Action) encode(e *rtnl.Encoder) {
	e.String(TCA_ACT_KIND, a.Kind)
	e.Nest(TCA_ACT_OPTIONS, func(e *rtnl.Encoder) {
		var p [32]byte
		switch a.Kind {
		case KindGact:
			e.Put(TCA_GACT_PARMS, tcGen(p[:0], a.Verdict))
		case KindMirred:
			b := tcGen(p[:0], a.Verdict)
			b = binary.NativeEndian.AppendUint32(b, a.MirredOp)
			e.Put(TCA_MIRRED_PARMS, binary.NativeEndian.AppendUint32(b, uint32(a.Ifindex)))
		case KindTunnelKey:
			e.Put(TCA_TUNNEL_KEY_PARMS, binary.NativeEndian.AppendUint32(tcGen(p[:0], a.Verdict), a.TunnelOp))
			if a.TunnelOp == TCA_TUNNEL_KEY_ACT_SET {
				src, dst := a.TunnelSrc.As4(), a.TunnelDst.As4()
				e.Put(TCA_TUNNEL_KEY_ENC_IPV4_SRC, src[:])
				e.Put(TCA_TUNNEL_KEY_ENC_IPV4_DST, dst[:])
				e.BE32(TCA_TUNNEL_KEY_ENC_KEY_ID, a.TunnelID)
				e.BE16(TCA_TUNNEL_KEY_ENC_DST_PORT, a.TunnelDstPort)
			}
		case KindCt:
			e.Put(TCA_CT_PARMS, tcGen(p[:0], a.Verdict))
			if a.Zone != 0 {
				e.U16(TCA_CT_ZONE, a.Zone)
			}
			var op uint16
			if a.Commit {
				op |= TCA_CT_ACT_COMMIT
			}
			if a.NAT {
				op |= TCA_CT_ACT_NAT
			}
			if op != 0 {
				e.U16(TCA_CT_ACTION, op)
			}
		}
	})
	if len(a.Cookie) > 0 {
		e.Put(TCA_ACT_COOKIE, a.Cookie)
	}
}

// AppendDelete appends the payload of an RTM_DELTFILTER request for f
// (device, parent, chain, priority, protocol and handle) to b.
func (f *Filter) AppendDelete(b []byte) []byte {
	b = tcmsg(b, f.Ifindex, f.handle(), f.parent(), f.info())
	e := rtnl.NewEncoder(b)
	e.String(unix.TCA_KIND, f.kind())
	e.U32(unix.TCA_CHAIN, f.Chain)
	return e.Bytes()
}
