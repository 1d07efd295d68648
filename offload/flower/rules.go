package flower

import (
	"fmt"
	"maps"
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
	// PrioFlood up to PrioFloodLast: broadcast to every local endpoint and
	// remote VTEP of the VNI, in chunks of a few copies each (a filter
	// with many actions does not fit in a netlink dump message), every
	// chunk but the last ending in "continue" to the next.
	PrioFlood     uint16 = 0x5302
	PrioFloodLast uint16 = 0x530f
)

// Ethernet types of Skiff's filters.
const (
	EthAll uint16 = unix.ETH_P_ALL
	EthARP uint16 = unix.ETH_P_ARP
)

// Broadcast is the broadcast MAC.
const Broadcast = "ff:ff:ff:ff:ff:ff"

// Multicast6 matches every IPv6 multicast frame (33:33:xx:xx:xx:xx, RFC
// 2464): neighbour solicitations to solicited-node groups, DAD, MLD. A
// network with an IPv6 subnet floods it as broadcast, and from its local
// endpoints to the node's gateway too (whose address they solicit).
const Multicast6 = "33:33:00:00:00:00/ff:ff:00:00:00:00"

// Rule kinds.
const (
	KindEncap = "encap" // representor -> tunnel
	KindDecap = "decap" // tunnel -> representor
	KindLocal = "local" // representor -> representor on this node
	KindARP   = "arp"   // ARP request for a known address -> its owner
	KindFlood = "flood" // broadcast -> every endpoint of the VNI
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
	chunkActs    = 7          // copies' actions per flood filter
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

// Compile returns the exact rule set of p: sorted by device, priority and
// match. Bad input is an error naming the field.
func Compile(p plan.Plan, in Input) ([]Rule, error) {
	if in.VXLAN == "" {
		return nil, fmt.Errorf("vxlan: device name required")
	}
	if len(p.Networks) > 0 && !p.UnderlayIP.Is4() {
		return nil, fmt.Errorf("underlayIP: %q is not an IPv4 address", p.UnderlayIP)
	}
	type local struct {
		ep      plan.Endpoint
		rep, to string // rules go on rep; traffic for the endpoint goes to to
	}
	byNet := map[string][]local{}
	for _, name := range slices.Sorted(maps.Keys(p.Local)) {
		e := p.Local[name]
		rep, ok := in.Reps[name]
		if !ok || rep == "" {
			continue
		}
		if _, ok := p.Networks[e.Network]; !ok {
			return nil, fmt.Errorf("local[%s].network: %q is not in the plan", name, e.Network)
		}
		if !validMAC(e.MAC) {
			return nil, fmt.Errorf("local[%s].mac: %q is not a MAC address", name, e.MAC)
		}
		to := rep
		if t := in.Targets[name]; t != "" {
			to = t
		}
		byNet[e.Network] = append(byNet[e.Network], local{e, rep, to})
	}
	remotes := map[string][]plan.Remote{}
	for _, name := range slices.Sorted(maps.Keys(p.Remote)) {
		r := p.Remote[name]
		if _, ok := p.Networks[r.Network]; !ok {
			continue // the planner sends remotes of our networks only
		}
		if !validMAC(r.MAC) {
			return nil, fmt.Errorf("remote[%s].mac: %q is not a MAC address", name, r.MAC)
		}
		if !r.VTEP.Is4() {
			return nil, fmt.Errorf("remote[%s].vtep: %q is not an IPv4 address", name, r.VTEP)
		}
		remotes[r.Network] = append(remotes[r.Network], r)
	}
	// The networks with local endpoints, and those with only the node's
	// host port (a node with no endpoint on a network that routes out).
	nets := slices.Collect(maps.Keys(byNet))
	for nname := range in.HostPorts {
		if _, ok := byNet[nname]; !ok {
			if _, inPlan := p.Networks[nname]; inPlan {
				nets = append(nets, nname)
			}
		}
	}
	slices.Sort(nets)
	var out []Rule
	for _, nname := range nets {
		n := p.Networks[nname]
		if n.VNI == 0 || n.VNI > 1<<24-1 {
			return nil, fmt.Errorf("networks[%s].vni: must be 1..16777215, got %d", nname, n.VNI)
		}
		locals := byNet[nname]
		// A network that routes out through a host port here carries
		// its pods' Service connections through the node's stack
		// (kube-proxy's DNAT) without masquerade: what is delivered to
		// one of its endpoints from another endpoint or the tunnel
		// (a backend's reply among it) gets the reverse translation
		// on the way (CtNAT). What comes from the gateway port was
		// translated by the node's stack already.
		// act_ct drops what is neither IPv4 nor IPv6: the ARP
		// frames among (replies, unicast requests) are delivered by
		// ARP rules of their own (deliverARP), ahead of it; other
		// protocols are dropped on such networks.
		_, services := in.HostPorts[nname]
		deliver := func(acts ...Action) []Action {
			if services {
				acts = append([]Action{{Kind: CtNAT}}, acts...)
			}
			return acts
		}
		deliverARP := func(r Rule, m Match, acts ...Action) {
			if services {
				r.Prio, r.EthType, r.Kind, r.Match, r.Actions = PrioARP, EthARP, KindARP, m, acts
				out = append(out, r)
			}
		}
		set := func(vtep netip.Addr) Action {
			return Action{Kind: TunnelSet, VNI: n.VNI, Src: p.UnderlayIP, Dst: vtep, DstPort: VXLANPort}
		}
		decap := Match{EncKeyID: n.VNI, EncDst: p.UnderlayIP, EncDstPort: VXLANPort}
		for _, l := range locals {
			base := Rule{Dev: l.rep, Network: nname, Endpoint: l.ep.Name, EthType: EthAll, Prio: PrioUnicast}
			if l.to != l.rep {
				// The stand-in's traffic enters the representor.
				si := base
				si.Dev, si.Kind, si.Actions = l.to, KindStandIn, []Action{{Kind: IngressRedirect, Dev: l.rep}}
				out = append(out, si)
			}
			// To the other local endpoints of the network.
			for _, o := range locals {
				if o.ep.Name == l.ep.Name {
					continue
				}
				r := base
				r.Kind, r.Match, r.Actions = KindLocal, Match{DstMAC: o.ep.MAC}, deliver(Action{Kind: Redirect, Dev: o.to})
				out = append(out, r)
				deliverARP(base, r.Match, Action{Kind: Redirect, Dev: o.to})
				for _, ip := range ipv4s(o.ep.IPs) {
					a := base
					a.Prio, a.EthType, a.Kind = PrioARP, EthARP, KindARP
					a.Match, a.Actions = Match{ArpTIP: ip}, []Action{{Kind: Redirect, Dev: o.to}}
					out = append(out, a)
				}
			}
			// To the node's gateway.
			if gw, ok := in.Gateways[nname]; ok {
				r := base
				r.Kind, r.Match, r.Actions = KindGateway, Match{DstMAC: gw.MAC}, []Action{{Kind: Redirect, Dev: gw.Port}}
				out = append(out, r)
				for _, ip := range gw.IPs {
					if !ip.Is4() {
						continue // IPv6: solicited by multicast (floods)
					}
					a := base
					a.Prio, a.EthType, a.Kind = PrioARP, EthARP, KindGateway
					a.Match, a.Actions = Match{ArpTIP: ip}, []Action{{Kind: Redirect, Dev: gw.Port}}
					out = append(out, a)
				}
			}
			// To remote endpoints: encap.
			for _, rm := range remotes[nname] {
				r := base
				r.Kind, r.Match = KindEncap, Match{DstMAC: rm.MAC}
				r.Actions = []Action{set(rm.VTEP), {Kind: Redirect, Dev: in.VXLAN}}
				out = append(out, r)
				for _, ip := range ipv4s(rm.IPs) {
					a := base
					a.Prio, a.EthType, a.Kind = PrioARP, EthARP, KindARP
					a.Match, a.Actions = Match{ArpTIP: ip}, []Action{set(rm.VTEP), {Kind: Redirect, Dev: in.VXLAN}}
					out = append(out, a)
				}
			}
			// Broadcast (and IPv6 multicast): mirrored to every other
			// local endpoint and every remote VTEP (IPv6 multicast to
			// the gateway too), the last copy redirected.
			for _, dst := range floods(n) {
				var copies [][]Action
				for _, o := range locals {
					if o.ep.Name != l.ep.Name {
						copies = append(copies, []Action{{Kind: Mirror, Dev: o.to}})
					}
				}
				if gw, ok := in.Gateways[nname]; ok && dst == Multicast6 {
					copies = append(copies, []Action{{Kind: Mirror, Dev: gw.Port}})
				}
				for _, v := range n.FloodVTEPs {
					copies = append(copies, []Action{set(v), {Kind: Mirror, Dev: in.VXLAN}})
				}
				f := base
				f.Kind, f.Match = KindFlood, Match{DstMAC: dst}
				fl, err := flood(f, nil, copies)
				if err != nil {
					return nil, fmt.Errorf("networks[%s].floodVTEPs: broadcast from %s: %w", nname, l.ep.Name, err)
				}
				out = append(out, fl...)
			}
			// Decap on the VXLAN device, to this endpoint.
			d := Rule{Dev: in.VXLAN, Network: nname, Endpoint: l.ep.Name, EthType: EthAll, Prio: PrioUnicast, Kind: KindDecap}
			d.Match = decap
			d.Match.DstMAC = l.ep.MAC
			d.Actions = []Action{{Kind: TunnelUnset}, {Kind: Redirect, Dev: l.to}}
			arp := d
			if services {
				d.Actions = []Action{{Kind: TunnelUnset}, {Kind: CtNAT}, {Kind: Redirect, Dev: l.to}}
			}
			out = append(out, d)
			deliverARP(d, d.Match, arp.Actions...)
			for _, ip := range ipv4s(l.ep.IPs) {
				a := arp
				a.Prio, a.EthType, a.Kind = PrioARP, EthARP, KindARP
				a.Match = decap
				a.Match.ArpTIP = ip
				out = append(out, a)
			}
		}
		// From the node's gateway to the local endpoints: its unicast,
		// its ARP requests for their addresses, its broadcast.
		if gw, ok := in.Gateways[nname]; ok {
			if !validMAC(gw.MAC) {
				return nil, fmt.Errorf("gateways[%s].mac: %q is not a MAC address", nname, gw.MAC)
			}
			var copies [][]Action
			for _, l := range locals {
				g := Rule{Dev: gw.Port, Network: nname, Endpoint: l.ep.Name, EthType: EthAll, Prio: PrioUnicast, Kind: KindGateway}
				g.Match, g.Actions = Match{DstMAC: l.ep.MAC}, []Action{{Kind: Redirect, Dev: l.to}}
				out = append(out, g)
				for _, ip := range ipv4s(l.ep.IPs) {
					a := g
					a.Prio, a.EthType, a.Match = PrioARP, EthARP, Match{ArpTIP: ip}
					out = append(out, a)
				}
				copies = append(copies, []Action{{Kind: Mirror, Dev: l.to}})
			}
			for _, dst := range floods(n) {
				fl, err := flood(Rule{Dev: gw.Port, Network: nname, EthType: EthAll, Kind: KindFlood, Match: Match{DstMAC: dst}}, nil, copies)
				if err != nil {
					return nil, fmt.Errorf("gateways[%s]: %w", nname, err)
				}
				out = append(out, fl...)
			}
		}
		// The node's host port: its packets to remote endpoints
		// encapsulated to their VTEPs; the node's own MAC from the
		// tunnel to it; other nodes' host port MACs (the pods' replies,
		// routed by the node out of its gateway) from the gateway
		// encapsulated to those nodes.
		// A node with no endpoint on the network has a host port and no
		// gateway: nothing of the network is routed back out of it.
		if hp, ok := in.HostPorts[nname]; ok {
			gw, hasGW := in.Gateways[nname]
			if hp.Port == "" {
				return nil, fmt.Errorf("hostPorts[%s].port: required", nname)
			}
			if !validMAC(hp.MAC) {
				return nil, fmt.Errorf("hostPorts[%s].mac: %q is not a MAC address", nname, hp.MAC)
			}
			base := Rule{Dev: hp.Port, Network: nname, EthType: EthAll, Prio: PrioUnicast, Kind: KindEncap}
			for _, rm := range remotes[nname] {
				r := base
				r.Match, r.Actions = Match{DstMAC: rm.MAC}, []Action{set(rm.VTEP), {Kind: Redirect, Dev: in.VXLAN}}
				out = append(out, r)
			}
			d := Rule{Dev: in.VXLAN, Network: nname, EthType: EthAll, Prio: PrioUnicast, Kind: KindHostPort, Match: decap}
			d.Match.DstMAC = hp.MAC
			d.Actions = []Action{{Kind: TunnelUnset}, {Kind: Redirect, Dev: hp.Port}}
			out = append(out, d)
			for _, v := range slices.SortedFunc(maps.Keys(hp.Peers), netip.Addr.Compare) {
				if !hasGW {
					break
				}
				mac := hp.Peers[v]
				if !v.Is4() {
					return nil, fmt.Errorf("hostPorts[%s].peers: %q is not an IPv4 address", nname, v)
				}
				if !validMAC(mac) {
					return nil, fmt.Errorf("hostPorts[%s].peers[%s]: %q is not a MAC address", nname, v, mac)
				}
				r := Rule{Dev: gw.Port, Network: nname, EthType: EthAll, Prio: PrioUnicast, Kind: KindHostPort,
					Match: Match{DstMAC: mac}, Actions: []Action{set(v), {Kind: Redirect, Dev: in.VXLAN}}}
				out = append(out, r)
			}
		}
		// Broadcast from the tunnel to every local endpoint. The tunnel
		// metadata goes (unset) only in the last chunk: the chunks
		// after a first one match on it too.
		var copies [][]Action
		for _, l := range locals {
			copies = append(copies, []Action{{Kind: Mirror, Dev: l.to}})
		}
		for _, dst := range floods(n) {
			f := Rule{Dev: in.VXLAN, Network: nname, EthType: EthAll, Kind: KindFlood, Match: decap}
			f.Match.DstMAC = dst
			fl, err := flood(f, []Action{{Kind: TunnelUnset}}, copies)
			if err != nil {
				return nil, fmt.Errorf("networks[%s]: broadcast to %d local endpoints: %w", nname, len(locals), err)
			}
			out = append(out, fl...)
		}
	}
	// Sorted by match, then by the whole rule; each key made once.
	type keyed struct {
		match, all string
		r          Rule
	}
	ks := make([]keyed, len(out))
	for i, r := range out {
		ks[i] = keyed{r.MatchKey(), r.String(), r}
	}
	slices.SortFunc(ks, func(a, b keyed) int { return strings.Compare(a.all, b.all) })
	for i := range ks {
		out[i] = ks[i].r
		if i > 0 && ks[i].match == ks[i-1].match {
			return nil, fmt.Errorf("two rules for %s: %q (endpoint %s) and %q (endpoint %s); duplicate MAC or IP in the plan",
				ks[i].match, ks[i-1].all, ks[i-1].r.Endpoint, ks[i].all, ks[i].r.Endpoint)
		}
	}
	return out, nil
}

// flood spreads copies (each one or more actions ending in a mirror) over
// filters at PrioFlood, PrioFlood+1, ...: each holds at most chunkActs
// actions of copies; every filter but the last ends in Continue; the last
// starts with last and turns its final mirror into a redirect. No copies,
// no filter.
func flood(base Rule, last []Action, copies [][]Action) ([]Rule, error) {
	if len(copies) == 0 {
		return nil, nil
	}
	var chunks [][]Action
	var cur []Action
	for _, c := range copies {
		if len(cur) > 0 && len(cur)+len(c) > chunkActs {
			chunks = append(chunks, cur)
			cur = nil
		}
		cur = append(cur, c...)
	}
	chunks = append(chunks, cur)
	if n := len(chunks); n > int(PrioFloodLast-PrioFlood)+1 {
		return nil, fmt.Errorf("%d copies need %d flood filters, more than Skiff's %d priorities", len(copies), n, PrioFloodLast-PrioFlood+1)
	}
	var out []Rule
	for i, c := range chunks {
		r := base
		r.Prio = PrioFlood + uint16(i)
		if i < len(chunks)-1 {
			r.Actions = append(slices.Clone(c), Action{Kind: Continue})
		} else {
			r.Actions = append(slices.Clone(last), c...)
			r.Actions[len(r.Actions)-1].Kind = Redirect
		}
		out = append(out, r)
	}
	return out, nil
}

// floods are the destination MACs a network floods: broadcast, and IPv6
// multicast when the network has an IPv6 subnet.
func floods(n plan.Network) []string {
	if dualStack(n) {
		return []string{Broadcast, Multicast6}
	}
	return []string{Broadcast}
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
