package tc

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// String is the filter on one line in tc's own words (iproute2's
// keywords), without its device: chain, prio, protocol, handle, kind,
// flags, match keys, then each action with its cookie. Devices a mirred
// action names are shown by ifindex ("dev if9"); Format names them.
//
//	chain 3 prio 21249 protocol all handle 0x2a flower skip_sw in_hw dst_mac 02:00:00:00:00:0a action mirred egress redirect dev if9 cookie 736b30
func (f Filter) String() string {
	return f.Format(func(i int) string { return fmt.Sprintf("if%d", i) })
}

// Format is String with the devices of mirred actions named by dev.
func (f Filter) Format(dev func(ifindex int) string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "chain %d prio %d protocol %s handle %#x %s", f.Chain, f.Prio, protoName(f.Proto), f.Handle, f.kind())
	if f.Kind == KindFw {
		fmt.Fprintf(&b, " mark %#x/%#x", f.Match.Mark, f.Match.MarkMask)
	} else {
		for _, fl := range []struct {
			bit  uint32
			name string
		}{{TCA_CLS_FLAGS_SKIP_HW, "skip_hw"}, {TCA_CLS_FLAGS_SKIP_SW, "skip_sw"}, {TCA_CLS_FLAGS_IN_HW, "in_hw"}, {TCA_CLS_FLAGS_NOT_IN_HW, "not_in_hw"}} {
			if f.Flags&fl.bit != 0 {
				b.WriteString(" " + fl.name)
			}
		}
		f.Match.format(&b)
	}
	for _, a := range f.Actions {
		b.WriteString(" action ")
		a.format(&b, dev)
	}
	return b.String()
}

func protoName(p uint16) string {
	switch p {
	case unix.ETH_P_ALL:
		return "all"
	case unix.ETH_P_IP:
		return "ip"
	case unix.ETH_P_IPV6:
		return "ipv6"
	case unix.ETH_P_ARP:
		return "arp"
	case unix.ETH_P_8021Q:
		return "802.1Q"
	}
	return fmt.Sprintf("%#04x", p)
}

func ipProtoName(p uint8) string {
	switch p {
	case unix.IPPROTO_TCP:
		return "tcp"
	case unix.IPPROTO_UDP:
		return "udp"
	case unix.IPPROTO_SCTP:
		return "sctp"
	case unix.IPPROTO_ICMP:
		return "icmp"
	case unix.IPPROTO_ICMPV6:
		return "icmpv6"
	}
	return fmt.Sprint(p)
}

func (m *Match) format(b *strings.Builder) {
	if len(m.DstMAC) > 0 {
		b.WriteString(" dst_mac " + m.DstMAC.String())
		if len(m.DstMACMask) > 0 {
			b.WriteString("/" + m.DstMACMask.String())
		}
	}
	if m.EncKeyID != 0 {
		fmt.Fprintf(b, " enc_key_id %d", m.EncKeyID)
	}
	if m.EncDst.IsValid() {
		b.WriteString(" enc_dst_ip " + m.EncDst.String())
	}
	if m.EncDstPort != 0 {
		fmt.Fprintf(b, " enc_dst_port %d", m.EncDstPort)
	}
	if m.ArpTIP.IsValid() {
		op := map[uint8]string{1: "request", 2: "reply"}[m.ArpOp]
		if op == "" {
			op = fmt.Sprint(m.ArpOp)
		}
		fmt.Fprintf(b, " arp_op %s arp_tip %s", op, m.ArpTIP)
	}
	if m.IPProto != 0 {
		b.WriteString(" ip_proto " + ipProtoName(m.IPProto))
	}
	if m.ICMPType != 0 {
		fmt.Fprintf(b, " type %d", m.ICMPType)
	}
	if m.Src.IsValid() {
		b.WriteString(" src_ip " + m.Src.String())
	}
	if m.Dst.IsValid() {
		b.WriteString(" dst_ip " + m.Dst.String())
	}
	switch {
	case m.DstPortMin == 0:
	case m.DstPortMin == m.DstPortMax:
		fmt.Fprintf(b, " dst_port %d", m.DstPortMin)
	default:
		fmt.Fprintf(b, " dst_port %d-%d", m.DstPortMin, m.DstPortMax)
	}
	if m.CtStateMask != 0 {
		b.WriteString(" ct_state ")
		for _, s := range []struct {
			bit  uint16
			name string
		}{{TCA_FLOWER_KEY_CT_FLAGS_TRACKED, "trk"}, {TCA_FLOWER_KEY_CT_FLAGS_NEW, "new"}, {TCA_FLOWER_KEY_CT_FLAGS_ESTABLISHED, "est"},
			{TCA_FLOWER_KEY_CT_FLAGS_RELATED, "rel"}, {TCA_FLOWER_KEY_CT_FLAGS_INVALID, "inv"}, {TCA_FLOWER_KEY_CT_FLAGS_REPLY, "rpl"}} {
			switch {
			case m.CtStateMask&s.bit == 0:
			case m.CtState&s.bit != 0:
				b.WriteString("+" + s.name)
			default:
				b.WriteString("-" + s.name)
			}
		}
	}
}

// verdictName is a TC_ACT_* as iproute2 names it.
func verdictName(v uint32) string {
	if v&^TC_ACT_EXT_VAL_MASK == TC_ACT_GOTO_CHAIN {
		return fmt.Sprintf("goto chain %d", v&TC_ACT_EXT_VAL_MASK)
	}
	switch v {
	case TC_ACT_UNSPEC:
		return "continue"
	case TC_ACT_OK:
		return "pass"
	case 1:
		return "reclassify"
	case TC_ACT_SHOT:
		return "drop"
	case TC_ACT_PIPE:
		return "pipe"
	case TC_ACT_STOLEN:
		return "stolen"
	case 8:
		return "trap"
	}
	return fmt.Sprintf("verdict %#x", v)
}

func (a *Action) format(b *strings.Builder, dev func(int) string) {
	// The verdict each action has unless told otherwise.
	usual := uint32(TC_ACT_PIPE)
	switch a.Kind {
	case KindGact:
		b.WriteString("gact " + verdictName(a.Verdict))
		usual = a.Verdict
	case KindMirred:
		op := map[uint32]string{TCA_EGRESS_REDIR: "egress redirect", TCA_EGRESS_MIRROR: "egress mirror",
			TCA_INGRESS_REDIR: "ingress redirect", TCA_INGRESS_MIRROR: "ingress mirror"}[a.MirredOp]
		if op == "" {
			op = fmt.Sprintf("op %d", a.MirredOp)
		}
		fmt.Fprintf(b, "mirred %s dev %s", op, dev(a.Ifindex))
		if a.MirredOp == TCA_EGRESS_REDIR || a.MirredOp == TCA_INGRESS_REDIR {
			usual = TC_ACT_STOLEN
		}
	case KindTunnelKey:
		if a.TunnelOp == TCA_TUNNEL_KEY_ACT_RELEASE {
			b.WriteString("tunnel_key unset")
		} else {
			fmt.Fprintf(b, "tunnel_key set id %d src_ip %s dst_ip %s dst_port %d", a.TunnelID, a.TunnelSrc, a.TunnelDst, a.TunnelDstPort)
		}
	case KindCt:
		b.WriteString("ct")
		if a.Commit {
			b.WriteString(" commit")
		}
		if a.Zone != 0 {
			fmt.Fprintf(b, " zone %d", a.Zone)
		}
		if a.NAT {
			b.WriteString(" nat")
		}
	default:
		b.WriteString(a.Kind)
		usual = a.Verdict
	}
	if a.Verdict != usual {
		b.WriteString(" " + verdictName(a.Verdict))
	}
	if len(a.Cookie) > 0 {
		fmt.Fprintf(b, " cookie %x", a.Cookie)
	}
}
