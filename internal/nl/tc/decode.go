package tc

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/rtnl"
)

// Decode decodes an RTM_NEWTFILTER (or RTM_DELTFILTER) payload: struct
// tcmsg and attributes, from a dump (full or terse) or a notification.
// ok is false for what is not a flower or fw filter: a chain's or
// priority's head (handle 0), another classifier. Keys it does not know
// are skipped.
func Decode(b []byte) (f Filter, ok bool, err error) {
	if err := f.decodeHead(b); err != nil {
		return f, false, err
	}
	var opts []byte
	d := rtnl.NewDecoder(b[20:])
	for d.Next() {
		switch d.Type() {
		case unix.TCA_KIND:
			f.Kind = d.String()
		case unix.TCA_CHAIN:
			f.Chain = d.U32()
		case unix.TCA_OPTIONS:
			opts = d.Bytes()
		}
	}
	if err := d.Err(); err != nil {
		return f, false, fmt.Errorf("tc: filter attributes: %w", err)
	}
	if f.Kind != "flower" && f.Kind != KindFw || f.Handle == 0 || opts == nil {
		return f, false, nil
	}
	decode := f.decodeFlower
	if f.Kind == KindFw {
		decode = f.decodeFw
	}
	if err := decode(opts); err != nil {
		return f, false, fmt.Errorf("tc: filter %#x prio %d chain %d of ifindex %d: %w", f.Handle, f.Prio, f.Chain, f.Ifindex, err)
	}
	return f, true, nil
}

// DecodeHead decodes only struct tcmsg: device, handle, parent, priority
// and protocol.
func DecodeHead(b []byte) (Filter, error) {
	var f Filter
	return f, f.decodeHead(b)
}

func (f *Filter) decodeHead(b []byte) error {
	if len(b) < 20 {
		return fmt.Errorf("tc: tcmsg of %d bytes", len(b))
	}
	f.Ifindex = int(int32(binary.NativeEndian.Uint32(b[4:])))
	f.Handle = binary.NativeEndian.Uint32(b[8:])
	f.Parent = binary.NativeEndian.Uint32(b[12:])
	info := binary.NativeEndian.Uint32(b[16:])
	f.Prio, f.Proto = uint16(info>>16), htons(uint16(info))
	return nil
}

func (f *Filter) decodeFlower(b []byte) error {
	d := rtnl.NewDecoder(b)
	m := &f.Match
	var src, dst, src6, dst6, src6Mask, dst6Mask netip.Addr
	var srcMask, dstMask uint32
	// Keys by how they are written, made when the first key comes (a
	// terse dump has none).
	var addrs map[uint16]*netip.Addr
	var be32s map[uint16]*uint32
	var be16s, u16s map[uint16]*uint16
	var u8s map[uint16]*uint8
	for d.Next() {
		t := d.Type()
		if t != TCA_FLOWER_FLAGS && t != TCA_FLOWER_ACT && addrs == nil {
			addrs = map[uint16]*netip.Addr{TCA_FLOWER_KEY_ARP_TIP: &m.ArpTIP, TCA_FLOWER_KEY_ENC_IPV4_DST: &m.EncDst,
				TCA_FLOWER_KEY_IPV4_SRC: &src, TCA_FLOWER_KEY_IPV4_DST: &dst, TCA_FLOWER_KEY_IPV6_SRC: &src6,
				TCA_FLOWER_KEY_IPV6_DST: &dst6, TCA_FLOWER_KEY_IPV6_SRC_MASK: &src6Mask, TCA_FLOWER_KEY_IPV6_DST_MASK: &dst6Mask}
			be32s = map[uint16]*uint32{TCA_FLOWER_KEY_ENC_KEY_ID: &m.EncKeyID, TCA_FLOWER_KEY_IPV4_SRC_MASK: &srcMask,
				TCA_FLOWER_KEY_IPV4_DST_MASK: &dstMask}
			be16s = map[uint16]*uint16{TCA_FLOWER_KEY_ENC_UDP_DST_PORT: &m.EncDstPort, TCA_FLOWER_KEY_PORT_DST_MIN: &m.DstPortMin,
				TCA_FLOWER_KEY_PORT_DST_MAX: &m.DstPortMax}
			u16s = map[uint16]*uint16{TCA_FLOWER_KEY_CT_STATE: &m.CtState, TCA_FLOWER_KEY_CT_STATE_MASK: &m.CtStateMask}
			u8s = map[uint16]*uint8{TCA_FLOWER_KEY_ARP_OP: &m.ArpOp, TCA_FLOWER_KEY_IP_PROTO: &m.IPProto,
				TCA_FLOWER_KEY_ICMPV4_TYPE: &m.ICMPType, TCA_FLOWER_KEY_ICMPV6_TYPE: &m.ICMPType}
		}
		if p, ok := addrs[t]; ok {
			*p = addr(d.Bytes())
		} else if p, ok := be32s[t]; ok {
			*p = d.BE32()
		} else if p, ok := be16s[t]; ok {
			*p = d.BE16()
		} else if p, ok := u16s[t]; ok {
			*p = d.U16()
		} else if p, ok := u8s[t]; ok {
			*p = d.U8()
		}
		switch t {
		case TCA_FLOWER_KEY_ETH_DST:
			if v := d.Bytes(); len(v) == 6 {
				m.DstMAC = net.HardwareAddr(append([]byte(nil), v...))
			}
		case TCA_FLOWER_KEY_ETH_DST_MASK:
			// A whole-address mask (what the kernel dumps for a key
			// given without one) is left nil, as it was encoded.
			if v := d.Bytes(); len(v) == 6 && !bytes.Equal(v, fullMAC) {
				m.DstMACMask = net.HardwareAddr(append([]byte(nil), v...))
			}
		case TCA_FLOWER_KEY_TCP_DST, TCA_FLOWER_KEY_UDP_DST, TCA_FLOWER_KEY_SCTP_DST:
			m.DstPortMin = d.BE16()
			m.DstPortMax = m.DstPortMin
		case TCA_FLOWER_FLAGS:
			f.Flags = d.U32()
		case TCA_FLOWER_ACT:
			if err := f.decodeActions(d.Nested()); err != nil {
				return err
			}
		}
	}
	if err := d.Err(); err != nil {
		return err
	}
	var err error
	if m.Src, err = prefix("ipv4 src", src, srcMask); err != nil {
		return err
	}
	if m.Dst, err = prefix("ipv4 dst", dst, dstMask); err != nil {
		return err
	}
	if src6.IsValid() {
		m.Src = prefix6(src6, src6Mask)
	}
	if dst6.IsValid() {
		m.Dst = prefix6(dst6, dst6Mask)
	}
	return nil
}

// decodeActions appends the actions of a nest (TCA_FLOWER_ACT, TCA_FW_ACT)
// to f's.
func (f *Filter) decodeActions(ad *rtnl.Decoder) error {
	for ad.Next() {
		a, err := decodeAction(ad.Nested())
		if err != nil {
			return err
		}
		f.Actions = append(f.Actions, a)
	}
	return ad.Err()
}

// fullMAC is the mask of a whole MAC address.
var fullMAC = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// prefix6 is an IPv6 key under its mask (the leading ones of the mask;
// no mask: the whole address).
func prefix6(a, mask netip.Addr) netip.Prefix {
	if !mask.IsValid() {
		return netip.PrefixFrom(a.Unmap(), 128)
	}
	ones := 0
	for _, b := range mask.As16() {
		for b&0x80 != 0 {
			ones, b = ones+1, b<<1
		}
		if b != 0 || ones%8 != 0 {
			break
		}
	}
	return netip.PrefixFrom(a, ones).Masked()
}

// addr is an address attribute's value (invalid when it is not 4 or 16
// bytes).
func addr(b []byte) netip.Addr {
	a, _ := netip.AddrFromSlice(b)
	return a
}

func prefix(name string, a netip.Addr, mask uint32) (netip.Prefix, error) {
	if !a.IsValid() {
		return netip.Prefix{}, nil
	}
	if !a.Is4() {
		return netip.Prefix{}, fmt.Errorf("%s: %s is not IPv4", name, a)
	}
	ones := 0
	for v := mask; v&(1<<31) != 0; v <<= 1 {
		ones++
	}
	return netip.PrefixFrom(a, ones).Masked(), nil
}

// decodeAction decodes one action (TCA_ACT_*).
func decodeAction(d *rtnl.Decoder) (Action, error) {
	var a Action
	var opts, stats []byte
	for d.Next() {
		switch d.Type() {
		case TCA_ACT_KIND:
			a.Kind = d.String()
		case TCA_ACT_OPTIONS:
			opts = d.Bytes()
		case TCA_ACT_STATS:
			stats = d.Bytes()
		case TCA_ACT_COOKIE:
			a.Cookie = append([]byte(nil), d.Bytes()...)
		}
	}
	if err := d.Err(); err != nil {
		return a, fmt.Errorf("action: %w", err)
	}
	od := rtnl.NewDecoder(opts)
	for od.Next() {
		v := od.Bytes()
		verdict := func() {
			if len(v) >= 12 {
				a.Verdict = binary.NativeEndian.Uint32(v[8:])
			}
		}
		switch t := od.Type(); {
		case a.Kind == KindGact && t == TCA_GACT_PARMS:
			verdict()
		case a.Kind == KindMirred && t == TCA_MIRRED_PARMS && len(v) >= 28:
			verdict()
			a.MirredOp, a.Ifindex = binary.NativeEndian.Uint32(v[20:]), int(binary.NativeEndian.Uint32(v[24:]))
		case a.Kind == KindTunnelKey && t == TCA_TUNNEL_KEY_PARMS && len(v) >= 24:
			verdict()
			a.TunnelOp = binary.NativeEndian.Uint32(v[20:])
		case a.Kind == KindTunnelKey && t == TCA_TUNNEL_KEY_ENC_IPV4_SRC:
			a.TunnelSrc = addr(v)
		case a.Kind == KindTunnelKey && t == TCA_TUNNEL_KEY_ENC_IPV4_DST:
			a.TunnelDst = addr(v)
		case a.Kind == KindTunnelKey && t == TCA_TUNNEL_KEY_ENC_KEY_ID:
			a.TunnelID = od.BE32()
		case a.Kind == KindTunnelKey && t == TCA_TUNNEL_KEY_ENC_DST_PORT:
			a.TunnelDstPort = od.BE16()
		case a.Kind == KindCt && t == TCA_CT_PARMS:
			verdict()
		case a.Kind == KindCt && t == TCA_CT_ZONE:
			a.Zone = od.U16()
		case a.Kind == KindCt && t == TCA_CT_ACTION:
			op := od.U16()
			a.Commit, a.NAT = op&TCA_CT_ACT_COMMIT != 0, op&TCA_CT_ACT_NAT != 0
		}
	}
	if err := od.Err(); err != nil {
		return a, fmt.Errorf("action %s options: %w", a.Kind, err)
	}
	a.Stats = decodeStats(stats)
	return a, nil
}

// decodeStats decodes an action's TCA_ACT_STATS.
func decodeStats(b []byte) Stats {
	var s Stats
	sd := rtnl.NewDecoder(b)
	for sd.Next() {
		v := sd.Bytes()
		switch sd.Type() {
		case TCA_STATS_BASIC:
			if len(v) >= 12 {
				s.Bytes, s.Packets = binary.NativeEndian.Uint64(v), uint64(binary.NativeEndian.Uint32(v[8:]))
			}
		case TCA_STATS_BASIC_HW:
			if len(v) >= 12 {
				s.HWBytes, s.HWPackets = binary.NativeEndian.Uint64(v), uint64(binary.NativeEndian.Uint32(v[8:]))
			}
		case TCA_STATS_PKT64:
			if len(v) == 8 {
				s.Packets = binary.NativeEndian.Uint64(v)
			}
		}
	}
	return s
}
