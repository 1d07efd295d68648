package flower

// Policy rules: tc-flower filters with conntrack (act_ct) for stateful
// NetworkPolicy, as plain values (the wire encoding is internal/nl/tc's,
// see policyconn.go).

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/tc"
)

// Ethernet types of policy rules.
const (
	EthIPv4 uint16 = unix.ETH_P_IP
	EthIPv6 uint16 = unix.ETH_P_IPV6
)

// Conntrack state bits of a flower ct_state match
// (TCA_FLOWER_KEY_CT_FLAGS_*).
const (
	CtNew         uint16 = tc.TCA_FLOWER_KEY_CT_FLAGS_NEW
	CtEstablished uint16 = tc.TCA_FLOWER_KEY_CT_FLAGS_ESTABLISHED
	CtRelated     uint16 = tc.TCA_FLOWER_KEY_CT_FLAGS_RELATED
	CtTracked     uint16 = tc.TCA_FLOWER_KEY_CT_FLAGS_TRACKED
	CtInvalid     uint16 = tc.TCA_FLOWER_KEY_CT_FLAGS_INVALID
	CtReply       uint16 = tc.TCA_FLOWER_KEY_CT_FLAGS_REPLY
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

	policyMagic = "skP" // first bytes of a policy rule's cookie
)

// PolicyRule is one flower filter of a conntrack-based policy on a
// device's ingress.
type PolicyRule struct {
	Dev     string // the device's name, for messages
	Index   int    // the device's ifindex
	Chain   uint32
	Prio    uint16 // not Skiff's datapath priorities (PrioARP..PrioLast)
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
// keys need EthIPv4 or EthIPv6, with prefixes of that family.
type PolicyMatch struct {
	EthType  uint16 // EthIPv4, EthIPv6, EthARP, or EthAll (every protocol)
	EncKeyID uint32 // the tunnel's VNI (on the VXLAN device); 0: any
	// DstMAC is the destination MAC ("aa:bb:cc:dd:ee:ff", lower case);
	// "": any.
	DstMAC  string
	IPProto uint8 // 0: any; unix.IPPROTO_TCP, _UDP, _SCTP for ports
	// ICMPType with IPProto ICMP (IPv4) or ICMPV6 (IPv6); 0: any.
	ICMPType uint8
	Src, Dst netip.Prefix
	// DstPortMin..DstPortMax: one port when equal, a range
	// (TCA_FLOWER_KEY_PORT_DST_MIN/MAX) otherwise; 0: any.
	DstPortMin, DstPortMax uint16
	// CtState under CtStateMask: +trk+est is CtTracked|CtEstablished
	// under the same mask; 0 mask: conntrack state not matched.
	CtState, CtStateMask uint16
	// Mark: the packet's mark has these bits set (a fw filter, not
	// flower, whose handle is the mark: at most one such rule per
	// chain and priority); with EthAll and no other key. 0: not
	// matched.
	Mark uint32
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
	if m.DstMAC != "" {
		b.WriteString(" dst_mac " + m.DstMAC)
	}
	if m.IPProto != 0 {
		fmt.Fprintf(&b, " ip_proto %d", m.IPProto)
	}
	if m.ICMPType != 0 {
		fmt.Fprintf(&b, " type %d", m.ICMPType)
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
	if m.Mark != 0 {
		fmt.Fprintf(&b, " mark %#x", m.Mark)
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
		return fmt.Errorf("policy rule on %s: prio %#x: in the datapath's range %#x-%#x", r.Dev, r.Prio, PrioARP, PrioLast)
	}
	m := r.Match
	ip := m.IPProto != 0 || m.Src.IsValid() || m.Dst.IsValid() || m.DstPortMin != 0 || m.ICMPType != 0
	v6 := m.EthType == EthIPv6
	icmp := uint8(unix.IPPROTO_ICMP)
	if v6 {
		icmp = unix.IPPROTO_ICMPV6
	}
	switch {
	case m.EthType == 0:
		return fmt.Errorf("policy rule %s on %s: match.EthType: required", r, r.Dev)
	case m.Mark != 0 && (m != PolicyMatch{EthType: EthAll, Mark: m.Mark}):
		return fmt.Errorf("policy rule %s on %s: match.Mark: matched alone (a fw filter), for every protocol", r, r.Dev)
	case m.DstMAC != "" && !canonicalMAC(m.DstMAC):
		return fmt.Errorf("policy rule %s on %s: match.DstMAC %q: not a lower-case 6-byte MAC address", r, r.Dev, m.DstMAC)
	case ip && m.EthType != EthIPv4 && !v6:
		return fmt.Errorf("policy rule %s on %s: match.EthType %#04x: IP keys need IPv4 or IPv6", r, r.Dev, m.EthType)
	case m.Src.IsValid() && m.Src.Addr().Is6() != v6, m.Dst.IsValid() && m.Dst.Addr().Is6() != v6:
		return fmt.Errorf("policy rule %s on %s: match.Src/Dst: prefixes of another family than the eth type's", r, r.Dev)
	case m.ICMPType != 0 && m.IPProto != icmp:
		return fmt.Errorf("policy rule %s on %s: match.ICMPType %d: needs IPProto %d", r, r.Dev, m.ICMPType, icmp)
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

// canonicalMAC reports whether s is a 6-byte MAC address as
// net.HardwareAddr.String writes it (what a dump decodes to).
func canonicalMAC(s string) bool {
	mac, err := net.ParseMAC(s)
	return err == nil && len(mac) == 6 && mac.String() == s
}
