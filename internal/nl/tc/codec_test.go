package tc

import (
	"net"
	"net/netip"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

// Every key and action the codec encodes decodes back as it went in.
func TestRoundTrip(t *testing.T) {
	for _, f := range codecFilters() {
		got, ok, err := Decode(f.Encode())
		if err != nil || !ok {
			t.Fatalf("decode of %+v: ok %v err %v", f, ok, err)
		}
		got.Parent = 0
		if !reflect.DeepEqual(got, f) {
			t.Errorf("decoded\n%+v\nwant\n%+v", got, f)
		}
	}
}

// codecFilters are filters of every key and action the codec encodes.
func codecFilters() []Filter {
	mac, _ := net.ParseMAC("02:00:00:00:00:0a")
	mcast, _ := net.ParseMAC("33:33:00:00:00:00")
	mcastMask, _ := net.ParseMAC("ff:ff:00:00:00:00")
	a4 := netip.MustParseAddr
	return []Filter{
		{Ifindex: 7, Chain: 3, Prio: 0x5301, Proto: unix.ETH_P_ALL, Handle: 42, Kind: "flower", Flags: TCA_CLS_FLAGS_SKIP_SW,
			Match: Match{DstMAC: mac},
			Actions: []Action{
				{Kind: KindTunnelKey, Verdict: TC_ACT_PIPE, TunnelOp: TCA_TUNNEL_KEY_ACT_SET, TunnelID: 100,
					TunnelSrc: a4("192.0.2.1"), TunnelDst: a4("192.0.2.2"), TunnelDstPort: 4789, Cookie: []byte("sk0123456789abcd")},
				{Kind: KindMirred, Verdict: TC_ACT_STOLEN, MirredOp: TCA_EGRESS_REDIR, Ifindex: 9},
			}},
		{Ifindex: 8, Chain: 3, Prio: 0x5300, Proto: unix.ETH_P_ARP, Handle: 1, Kind: "flower",
			Match: Match{EncKeyID: 100, EncDst: a4("192.0.2.1"), EncDstPort: 4789, ArpOp: 1, ArpTIP: a4("198.51.100.10")},
			Actions: []Action{{Kind: KindTunnelKey, Verdict: TC_ACT_PIPE, TunnelOp: TCA_TUNNEL_KEY_ACT_RELEASE},
				{Kind: KindMirred, Verdict: TC_ACT_PIPE, MirredOp: TCA_EGRESS_MIRROR, Ifindex: 3},
				{Kind: KindGact, Verdict: TC_ACT_UNSPEC}}},
		{Ifindex: 9, Chain: 2, Prio: 0x5400, Proto: unix.ETH_P_IP, Handle: 3, Kind: "flower",
			Match: Match{IPProto: unix.IPPROTO_SCTP, Src: netip.MustParsePrefix("198.51.100.8/29"), Dst: netip.MustParsePrefix("198.51.100.20/32"),
				DstPortMin: 80, DstPortMax: 80, CtState: TCA_FLOWER_KEY_CT_FLAGS_TRACKED | TCA_FLOWER_KEY_CT_FLAGS_NEW,
				CtStateMask: TCA_FLOWER_KEY_CT_FLAGS_TRACKED | TCA_FLOWER_KEY_CT_FLAGS_NEW},
			Actions: []Action{{Kind: KindCt, Verdict: TC_ACT_PIPE, Zone: 101, Commit: true}, {Kind: KindGact, Verdict: Goto(3)}}},
		{Ifindex: 7, Chain: 3, Prio: 0x5302, Proto: unix.ETH_P_ALL, Handle: 5, Kind: "flower",
			Match:   Match{DstMAC: mcast, DstMACMask: mcastMask},
			Actions: []Action{{Kind: KindMirred, Verdict: TC_ACT_STOLEN, MirredOp: TCA_EGRESS_REDIR, Ifindex: 9}}},
		{Ifindex: 8, Chain: 3, Prio: 0x5300, Proto: unix.ETH_P_ALL, Handle: 9, Kind: "flower",
			Match: Match{EncKeyID: 100, EncDst: a4("192.0.2.1"), EncDstPort: 4789, DstMAC: mac},
			Actions: []Action{{Kind: KindCt, Verdict: TC_ACT_PIPE, NAT: true},
				{Kind: KindTunnelKey, Verdict: TC_ACT_PIPE, TunnelOp: TCA_TUNNEL_KEY_ACT_RELEASE},
				{Kind: KindMirred, Verdict: TC_ACT_STOLEN, MirredOp: TCA_EGRESS_REDIR, Ifindex: 3}}},
		{Ifindex: 9, Chain: 2, Prio: 0x5400, Proto: unix.ETH_P_IPV6, Handle: 6, Kind: "flower",
			Match: Match{IPProto: unix.IPPROTO_TCP, Src: netip.MustParsePrefix("2001:db8:100::/52"), Dst: netip.MustParsePrefix("2001:db8:100::a/128"),
				DstPortMin: 80, DstPortMax: 80},
			Actions: []Action{{Kind: KindGact, Verdict: Goto(3)}}},
		{Ifindex: 9, Chain: 1, Prio: 0x5314, Proto: unix.ETH_P_IPV6, Handle: 7, Kind: "flower",
			Match:   Match{IPProto: unix.IPPROTO_ICMPV6, ICMPType: 135},
			Actions: []Action{{Kind: KindGact, Verdict: Goto(3)}}},
		{Ifindex: 9, Chain: 1, Prio: 0x5315, Proto: unix.ETH_P_IP, Handle: 8, Kind: "flower",
			Match:   Match{IPProto: unix.IPPROTO_ICMP, ICMPType: 8},
			Actions: []Action{{Kind: KindGact, Verdict: Goto(3)}}},
		{Ifindex: 9, Chain: 1, Prio: 0x5401, Proto: unix.ETH_P_IP, Handle: 4, Kind: "flower",
			Match:   Match{IPProto: unix.IPPROTO_TCP, DstPortMin: 8000, DstPortMax: 8099},
			Actions: []Action{{Kind: KindGact, Verdict: TC_ACT_SHOT}}},
		// A fw filter: its handle is the mark it matches.
		{Ifindex: 9, Chain: 0, Prio: 0x52ff, Proto: unix.ETH_P_ALL, Handle: 0x200000, Kind: KindFw,
			Match:   Match{Mark: 0x200000, MarkMask: 0x200000},
			Actions: []Action{{Kind: KindGact, Verdict: Goto(3), Cookie: []byte("sk-fw-cookie")}}},
	}
}

// The SCTP port goes in the SCTP keys, not in the TCP or UDP ones, and
// with a mask that is its own.
func TestPortKeys(t *testing.T) {
	for proto, want := range map[uint8][2]uint16{
		unix.IPPROTO_TCP:  {TCA_FLOWER_KEY_TCP_DST, TCA_FLOWER_KEY_TCP_DST_MASK},
		unix.IPPROTO_UDP:  {TCA_FLOWER_KEY_UDP_DST, TCA_FLOWER_KEY_UDP_DST_MASK},
		unix.IPPROTO_SCTP: {TCA_FLOWER_KEY_SCTP_DST, TCA_FLOWER_KEY_SCTP_DST_MASK},
	} {
		if k, m := portKeys(proto); k != want[0] || m != want[1] {
			t.Errorf("proto %d: keys %d/%d, want %d/%d", proto, k, m, want[0], want[1])
		}
	}
}
