package flower

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// VXLANPort is the UDP port of the tunnel (IANA), matched on decap and set
// on encap.
const VXLANPort = 4789

// Skiff's priorities on a device's ingress. Every Skiff rule has one of
// them; rules at other priorities are never Skiff's.
const (
	PrioARP     uint16 = 0x5300 // ARP requests for known addresses, sent to their owner
	PrioUnicast uint16 = 0x5301 // unicast by destination MAC: encap, decap, local
	// PrioLast ends Skiff's range: a filter at PrioARP..PrioLast with
	// Skiff's cookie is Skiff's (and removed when no rule wants it).
	PrioLast uint16 = 0x530f
)

// Ethernet types of Skiff's filters.
const (
	EthAll uint16 = unix.ETH_P_ALL
	EthARP uint16 = unix.ETH_P_ARP
)

// Broadcast is the broadcast MAC.
const Broadcast = "ff:ff:ff:ff:ff:ff"

// Rule kinds.
const (
	KindEncap = "encap" // representor -> tunnel
	KindDecap = "decap" // tunnel -> representor
	KindLocal = "local" // representor -> representor on this node
	KindARP   = "arp"   // ARP request for a known address -> its owner
	// KindStandIn: everything from a veth standing in for a VF enters
	// the VF's representor.
	KindStandIn = "standin"
	// KindGateway: to and from the node's gateway of the network.
	KindGateway = "gateway"
	// KindHostPort: to and from the node's host port of the network (the
	// node's own traffic): other nodes' host ports from the gateway,
	// this node's from the tunnel. The host port's own traffic to remote
	// endpoints is KindEncap (Endpoint "").
	KindHostPort = "hostport"
	cookieLen    = 16         // TC_COOKIE_MAX_SIZE
	magic        = "\x73\x6b" // "sk", first bytes of every Skiff cookie
)

// Match is what a rule matches. Zero fields match anything.
type Match struct {
	DstMAC string     // destination MAC, lower-case colon form
	ArpTIP netip.Addr // ARP target address (requests only)
	// Tunnel metadata (decap, on the VXLAN device).
	EncKeyID   uint32
	EncDst     netip.Addr
	EncDstPort uint16
}

// Rule is one flower filter on a device's ingress.
type Rule struct {
	Dev      string // the device whose ingress holds the rule
	Prio     uint16
	EthType  uint16 // EthAll or EthARP
	Kind     string
	Endpoint string // the local endpoint the rule serves; "" for a network's
	Network  string
	Match    Match
	Actions  []Action
}

func (m Match) String() string { return string(m.appendTo(nil)) }

func (m Match) appendTo(b []byte) []byte {
	n := len(b)
	sep := func() {
		if len(b) > n {
			b = append(b, ' ')
		}
	}
	if m.EncKeyID != 0 {
		b = append(b, "enc_key_id "...)
		b = strconv.AppendUint(b, uint64(m.EncKeyID), 10)
	}
	if m.EncDst.IsValid() {
		sep()
		b = append(b, "enc_dst_ip "...)
		b = m.EncDst.AppendTo(b)
	}
	if m.EncDstPort != 0 {
		sep()
		b = append(b, "enc_dst_port "...)
		b = strconv.AppendUint(b, uint64(m.EncDstPort), 10)
	}
	if m.DstMAC != "" {
		sep()
		b = append(b, "dst_mac "...)
		b = append(b, m.DstMAC...)
	}
	if m.ArpTIP.IsValid() {
		sep()
		b = append(b, "arp_op request arp_tip "...)
		b = m.ArpTIP.AppendTo(b)
	}
	return b
}

// MatchKey identifies a rule's place: two rules with the same MatchKey
// cannot both be installed (the kernel keeps one filter per key), so one
// replaces the other.
func (r Rule) MatchKey() string { return string(r.appendMatchKey(nil)) }

func (r Rule) appendMatchKey(b []byte) []byte {
	b = append(b, r.Dev...)
	b = append(b, " prio "...)
	b = strconv.AppendUint(b, uint64(r.Prio), 10)
	b = append(b, " proto 0x"...)
	b = append(b, hex4(r.EthType)...)
	if m := r.Match.appendTo(nil); len(m) > 0 {
		b = append(b, ' ')
		b = append(b, m...)
	}
	return b
}

func hex4(v uint16) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[v>>12&0xf], digits[v>>8&0xf], digits[v>>4&0xf], digits[v&0xf]})
}

// String is the whole rule in tc's words; equal strings, equal rules.
func (r Rule) String() string {
	b := r.appendMatchKey(make([]byte, 0, 160))
	for _, a := range r.Actions {
		b = append(b, " action "...)
		b = a.appendTo(b)
	}
	return string(b)
}

// Input is what Compile needs besides the plan.
type Input struct {
	// Targets maps a local endpoint to the netdev that reaches it, when
	// that is not its representor: a veth standing in for the VF behind
	// the representor (test rigs whose NIC has no VF netdevs). Its
	// traffic enters the representor's ingress (mirred ingress redirect)
	// as the VF's would, and traffic for it is sent to the veth.
	Targets map[string]string
	// Gateways, by network: the node's gateway of that network, reached
	// through Port (one end of a veth pair whose other end holds the
	// gateway addresses in the node's stack). Optional.
	Gateways map[string]Gateway
	// Reps maps a local endpoint to the netdev that stands for it on the
	// eswitch (its representor). Endpoints without one are not plumbed
	// yet and get no rules.
	Reps map[string]string
	// VXLAN is the external-mode VXLAN device.
	VXLAN string
	// HostPorts, by network: the node's host port on that network, for
	// the node's own traffic to and from pods on other nodes. Optional;
	// a network needs a gateway for one.
	HostPorts map[string]HostPort
	// Sends, when set, limits each representor's encap rules to the
	// remote endpoints its endpoint has sent to: Sends(endpoint) names
	// them (remote endpoint names; others of the plan, or of another
	// network, are skipped). Without an encap rule a frame for a remote
	// endpoint leaves the representor unmatched and the node's kernel
	// forwards it (the offload datapath's replication bridge, which
	// learns the pair and asks for the rule). When nil, every
	// representor gets an encap rule for every remote endpoint of its
	// network. Compile calls it once per local endpoint with a
	// representor, from the calling goroutine.
	Sends func(endpoint string) []string
	// encapOnly leaves out the rules among local endpoints (RemoteRules
	// and SendRules want the encap rules alone).
	encapOnly bool
}

// HostPort is the node's host port on a network: Port is the eswitch
// end of a veth pair whose other end, in the node's stack, has the
// node's underlay address and MAC; Peers are the other nodes' host port
// MACs by their VTEPs (IPv4).
type HostPort struct {
	Port  string
	MAC   string
	Peers map[netip.Addr]string
}

// Gateway is a network's gateway on this node.
type Gateway struct {
	Port string
	MAC  string
	IPs  []netip.Addr
}

// dualStack reports whether n has an IPv6 subnet.
func dualStack(n plan.Network) bool {
	return slices.ContainsFunc(n.Subnets, func(sn plan.Subnet) bool { return sn.CIDR.Addr().Is6() })
}

// ipv6s and ipv4s are the addresses of ps of one family.
func ipv6s(ps []netip.Prefix) []netip.Addr { return addrs(ps, true) }

func ipv4s(ps []netip.Prefix) []netip.Addr { return addrs(ps, false) }

func addrs(ps []netip.Prefix, v6 bool) []netip.Addr {
	var out []netip.Addr
	for _, p := range ps {
		if p.Addr().Is6() == v6 {
			out = append(out, p.Addr())
		}
	}
	return out
}

func validMAC(s string) bool {
	if len(s) != 17 {
		return false
	}
	for i, c := range s {
		if i%3 == 2 {
			if c != ':' {
				return false
			}
		} else if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}
