package flower

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// Refused is Compile's error when it could not express some networks of
// a plan: it names each network and why. The rules Compile returns with
// it are those of every other network, whole: one network Skiff cannot
// express never takes the node's other networks with it.
type Refused struct {
	Networks map[string]error // by network name
}

func (e *Refused) Error() string {
	var b strings.Builder
	for i, name := range slices.Sorted(maps.Keys(e.Networks)) {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "network %s refused: %v", name, e.Networks[name])
	}
	return b.String()
}

// Unwrap gives each network's error.
func (e *Refused) Unwrap() []error {
	var out []error
	for _, name := range slices.Sorted(maps.Keys(e.Networks)) {
		out = append(out, e.Networks[name])
	}
	return out
}

// RefusedNetworks is the networks err refuses (a *Refused, alone or
// wrapped), nil when it refuses none.
func RefusedNetworks(err error) map[string]error {
	var r *Refused
	if errors.As(err, &r) {
		return r.Networks
	}
	return nil
}

// local is a local endpoint with its ports: rules go on rep; traffic for
// the endpoint goes to to.
type local struct {
	ep      plan.Endpoint
	rep, to string
}

// Compile returns the exact rule set of p: sorted by device, priority and
// match. Bad input is an error naming the field. What is wrong with one
// network (an endpoint, a remote endpoint, a gateway or host port of
// it, or more than its rules can hold) refuses that network alone: the
// error is a *Refused and the rules returned are every other network's.
// An error of another type (the VXLAN device, the node's underlay
// address) returns no rules.
func Compile(p plan.Plan, in Input) ([]Rule, error) {
	if in.VXLAN == "" {
		return nil, fmt.Errorf("vxlan: device name required")
	}
	if len(p.Networks) > 0 && !p.UnderlayIP.Is4() {
		return nil, fmt.Errorf("underlayIP: %q is not an IPv4 address", p.UnderlayIP)
	}
	refused := map[string]error{}
	refuse := func(network string, err error) {
		if _, ok := refused[network]; !ok {
			refused[network] = err
		}
	}
	byNet := map[string][]local{}
	for _, name := range slices.Sorted(maps.Keys(p.Local)) {
		e := p.Local[name]
		rep, ok := in.Reps[name]
		if !ok || rep == "" {
			continue
		}
		if _, ok := p.Networks[e.Network]; !ok {
			refuse(e.Network, fmt.Errorf("local[%s].network: %q is not in the plan", name, e.Network))
			continue
		}
		if !validMAC(e.MAC) {
			refuse(e.Network, fmt.Errorf("local[%s].mac: %q is not a MAC address", name, e.MAC))
			continue
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
			refuse(r.Network, fmt.Errorf("remote[%s].mac: %q is not a MAC address", name, r.MAC))
			continue
		}
		if !r.VTEP.Is4() {
			refuse(r.Network, fmt.Errorf("remote[%s].vtep: %q is not an IPv4 address", name, r.VTEP))
			continue
		}
		r.Name = name
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
		if refused[nname] != nil {
			continue
		}
		rs, err := compileNetwork(p, in, nname, byNet[nname], remotes[nname])
		if err != nil {
			refuse(nname, err)
			continue
		}
		out = append(out, rs...)
	}
	// Sorted by match, then by the whole rule; each key made once. Two
	// rules of one network with one match refuse that network.
	type keyed struct {
		match, all string
		r          Rule
	}
	ks := make([]keyed, len(out))
	for i, r := range out {
		ks[i] = keyed{r.MatchKey(), r.String(), r}
	}
	slices.SortFunc(ks, func(a, b keyed) int { return strings.Compare(a.all, b.all) })
	for i := 1; i < len(ks); i++ {
		a, b := ks[i-1], ks[i]
		if a.match != b.match {
			continue
		}
		err := fmt.Errorf("two rules for %s: %q (endpoint %s) and %q (endpoint %s); duplicate MAC or IP in the plan",
			b.match, a.all, a.r.Endpoint, b.all, b.r.Endpoint)
		if a.r.Network != b.r.Network {
			return nil, err
		}
		refuse(a.r.Network, err)
	}
	out = out[:0]
	for _, k := range ks {
		if refused[k.r.Network] == nil {
			out = append(out, k.r)
		}
	}
	if len(refused) > 0 {
		return out, &Refused{Networks: refused}
	}
	return out, nil
}

// compileNetwork returns the rules of network nname (unsorted): its local
// endpoints' locals, its remote endpoints remotes.
func compileNetwork(p plan.Plan, in Input, nname string, locals []local, remotes []plan.Remote) ([]Rule, error) {
	var out []Rule
	n := p.Networks[nname]
	if n.VNI == 0 || n.VNI > 1<<24-1 {
		return nil, fmt.Errorf("networks[%s].vni: must be 1..16777215, got %d", nname, n.VNI)
	}
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
	var byName map[string]int // remotes by name, when in.Sends limits them
	for _, l := range locals {
		base := Rule{Dev: l.rep, Network: nname, Endpoint: l.ep.Name, EthType: EthAll, Prio: PrioUnicast}
		if l.to != l.rep {
			// The stand-in's traffic enters the representor.
			si := base
			si.Dev, si.Kind, si.Actions = l.to, KindStandIn, []Action{{Kind: IngressRedirect, Dev: l.rep}}
			out = append(out, si)
		}
		// To the other local endpoints of the network (none when only
		// the encap rules are wanted: L x L rules, of no use to them).
		for _, o := range locals {
			if in.encapOnly {
				break
			}
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
		// To remote endpoints: encap. ARP for their addresses is
		// answered by the node's replication bridge (neighbour
		// suppression), as their IPv6 neighbour solicitations are.
		encap := func(rm plan.Remote) {
			r := base
			r.Kind, r.Match = KindEncap, Match{DstMAC: rm.MAC}
			r.Actions = []Action{set(rm.VTEP), {Kind: Redirect, Dev: in.VXLAN}}
			out = append(out, r)
		}
		if in.Sends == nil {
			for _, rm := range remotes {
				encap(rm)
			}
		} else {
			if byName == nil {
				byName = make(map[string]int, len(remotes))
				for i, rm := range remotes {
					byName[rm.Name] = i
				}
			}
			for _, name := range in.Sends(l.ep.Name) {
				if i, ok := byName[name]; ok {
					encap(remotes[i])
				}
			}
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
	// From the node's gateway to the local endpoints: its unicast and
	// its ARP requests for their addresses.
	if gw, ok := in.Gateways[nname]; ok {
		if !validMAC(gw.MAC) {
			return nil, fmt.Errorf("gateways[%s].mac: %q is not a MAC address", nname, gw.MAC)
		}
		for _, l := range locals {
			g := Rule{Dev: gw.Port, Network: nname, Endpoint: l.ep.Name, EthType: EthAll, Prio: PrioUnicast, Kind: KindGateway}
			g.Match, g.Actions = Match{DstMAC: l.ep.MAC}, []Action{{Kind: Redirect, Dev: l.to}}
			out = append(out, g)
			for _, ip := range ipv4s(l.ep.IPs) {
				a := g
				a.Prio, a.EthType, a.Match = PrioARP, EthARP, Match{ArpTIP: ip}
				out = append(out, a)
			}
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
		for _, rm := range remotes {
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
	return out, nil
}
