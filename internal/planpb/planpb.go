// Package planpb converts between the plain-Go model of internal/plan and the
// skiff.v1 protobuf messages. Conversions from protobuf validate what they
// parse and name the field that is wrong, because plans arrive over the
// network.
package planpb

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/skiff-sdn/skiff/internal/plan"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// Subnet converts a stored subnet to the plan model.
func Subnet(s *skiffv1.Subnet) (plan.Subnet, error) {
	p, err := netip.ParsePrefix(s.GetCidr())
	if err != nil {
		return plan.Subnet{}, fmt.Errorf("subnet %q: cidr: %w", s.GetName(), err)
	}
	out := plan.Subnet{Name: s.GetName(), Network: s.GetNetwork(), CIDR: p}
	if s.GetGateway() != "" {
		gw, err := netip.ParseAddr(s.GetGateway())
		if err != nil {
			return plan.Subnet{}, fmt.Errorf("subnet %q: gateway: %w", s.GetName(), err)
		}
		out.Gateway = gw
	}
	for i, d := range s.GetDns() {
		a, err := netip.ParseAddr(d)
		if err != nil {
			return plan.Subnet{}, fmt.Errorf("subnet %q: dns[%d]: %w", s.GetName(), i, err)
		}
		out.DNS = append(out.DNS, a)
	}
	return out, nil
}

// SubnetPB converts a plan subnet to protobuf.
func SubnetPB(s plan.Subnet) *skiffv1.Subnet {
	out := &skiffv1.Subnet{Name: s.Name, Network: s.Network, Cidr: s.CIDR.String()}
	if s.Gateway.IsValid() {
		out.Gateway = s.Gateway.String()
	}
	for _, d := range s.DNS {
		out.Dns = append(out.Dns, d.String())
	}
	return out
}

// Network converts a stored network to the plan model (without subnets and
// flood list, which the planner fills).
func Network(n *skiffv1.Network) plan.Network {
	mtu := n.GetMtu()
	if mtu == 0 {
		mtu = plan.DefaultMTU
	}
	egress := n.GetEgress()
	if egress == "" {
		egress = plan.EgressNone // stored before networks had one
	}
	return plan.Network{Name: n.GetName(), VNI: n.GetVni(), MTU: mtu, Egress: egress}
}

// Endpoint converts an endpoint to the plan model.
func Endpoint(e *skiffv1.Endpoint) (plan.Endpoint, error) {
	ips, err := prefixes(e.GetIps())
	if err != nil {
		return plan.Endpoint{}, fmt.Errorf("endpoint %q: ips: %w", e.GetName(), err)
	}
	mac := ""
	if e.GetMac() != "" {
		hw, err := net.ParseMAC(e.GetMac())
		if err != nil {
			return plan.Endpoint{}, fmt.Errorf("endpoint %q: mac: %w", e.GetName(), err)
		}
		mac = hw.String()
	}
	vf := -1
	if e.VfIndex != nil {
		vf = int(e.GetVfIndex())
	}
	return plan.Endpoint{
		Name: e.GetName(), Network: e.GetNetwork(), Node: e.GetNode(), Kind: e.GetKind(),
		MAC: mac, IPs: ips, Labels: e.GetLabels(), Owner: e.GetOwner(), Namespace: e.GetNamespace(),
		PF: e.GetPf(), VFIndex: vf, DPUReady: e.GetDpuReady(), DPUReason: e.GetDpuReason(), DPUError: e.GetDpuError(),
	}, nil
}

// EndpointPB converts a plan endpoint to protobuf.
func EndpointPB(e plan.Endpoint) *skiffv1.Endpoint {
	out := &skiffv1.Endpoint{
		Name: e.Name, Network: e.Network, Node: e.Node, Kind: e.Kind, Mac: e.MAC,
		Ips: prefixStrings(e.IPs), Labels: e.Labels, Owner: e.Owner, Namespace: e.Namespace, Pf: e.PF,
		DpuReady: e.DPUReady, DpuReason: e.DPUReason, DpuError: e.DPUError,
	}
	if e.VFIndex >= 0 {
		v := int32(e.VFIndex)
		out.VfIndex = &v
	}
	return out
}

// Node converts a node to the plan model. A node without a valid underlay
// address converts to one with a zero address (not registered).
func Node(n *skiffv1.Node) plan.Node {
	ip, _ := netip.ParseAddr(n.GetUnderlayIp())
	host, _ := netip.ParseAddr(n.GetHostIp())
	return plan.Node{Name: n.GetName(), UnderlayIP: ip, HostIP: host, Mode: n.GetMode(), DPU: n.GetDpu()}
}

// DPUStatusPB converts a DPU status to protobuf (nil for the zero status).
func DPUStatusPB(d plan.DPUStatus) *skiffv1.DPUStatus {
	if d == (plan.DPUStatus{}) {
		return nil
	}
	out := &skiffv1.DPUStatus{Node: d.Node, Registered: d.Registered, Connected: d.Connected}
	if !d.Since.IsZero() {
		out.Since = timestamppb.New(d.Since)
	}
	return out
}

// DPUStatus converts a protobuf DPU status (nil: none) to the plan model.
func DPUStatus(d *skiffv1.DPUStatus) plan.DPUStatus {
	if d == nil {
		return plan.DPUStatus{}
	}
	out := plan.DPUStatus{Node: d.GetNode(), Registered: d.GetRegistered(), Connected: d.GetConnected()}
	if d.Since != nil {
		out.Since = d.GetSince().AsTime()
	}
	return out
}

// PlanPB converts a plan to protobuf, items sorted by name.
func PlanPB(p plan.Plan) *skiffv1.Plan { return PlanPBWith(p, RemotePB) }

// PlanPBWith is PlanPB converting remote endpoints with remote (which may
// return messages shared with other plans: they must not be changed).
func PlanPBWith(p plan.Plan, remote func(plan.Remote) *skiffv1.RemoteEndpoint) *skiffv1.Plan {
	out := &skiffv1.Plan{Node: p.Node, Revision: p.Revision, UnderlayIp: addrString(p.UnderlayIP), Dpu: DPUStatusPB(p.DPU)}
	d := plan.Diff(plan.New(p.Node), p)
	for _, n := range d.UpsertNetworks {
		out.Networks = append(out.Networks, NetworkPB(n))
	}
	for _, e := range d.UpsertLocal {
		out.LocalEndpoints = append(out.LocalEndpoints, EndpointPB(e))
	}
	out.RemoteEndpoints = make([]*skiffv1.RemoteEndpoint, 0, len(d.UpsertRemote))
	for _, r := range d.UpsertRemote {
		out.RemoteEndpoints = append(out.RemoteEndpoints, remote(r))
	}
	for _, e := range d.UpsertPolicies {
		out.Policies = append(out.Policies, PolicyPB(e))
	}
	for _, g := range d.UpsertGroups {
		out.Groups = append(out.Groups, GroupPB(g))
	}
	return out
}

// Plan converts a protobuf plan to the plan model.
func Plan(p *skiffv1.Plan) (plan.Plan, error) {
	out := plan.New(p.GetNode())
	out.Revision = p.GetRevision()
	var err error
	if out.UnderlayIP, err = optAddr(p.GetUnderlayIp()); err != nil {
		return plan.Plan{}, fmt.Errorf("plan: underlayIp: %w", err)
	}
	out.DPU = DPUStatus(p.GetDpu())
	d := &skiffv1.PlanDelta{
		Node: p.GetNode(), FromRevision: p.GetRevision(), Revision: p.GetRevision(),
		UpsertNetworks: p.GetNetworks(), UpsertLocal: p.GetLocalEndpoints(), UpsertRemote: p.GetRemoteEndpoints(),
		UpsertPolicies: p.GetPolicies(), UpsertGroups: p.GetGroups(),
	}
	pd, err := Delta(d)
	if err != nil {
		return plan.Plan{}, err
	}
	if err := out.Apply(pd); err != nil {
		return plan.Plan{}, err
	}
	return out, nil
}

// NetworkPB converts a plan network to protobuf.
func NetworkPB(n plan.Network) *skiffv1.PlanNetwork {
	out := &skiffv1.PlanNetwork{Name: n.Name, Vni: n.VNI, Mtu: n.MTU, Egress: n.Egress}
	for _, s := range n.Subnets {
		out.Subnets = append(out.Subnets, SubnetPB(s))
	}
	// Own (the node's VTEP in lists shared between nodes) is never sent.
	out.FloodVteps, out.HostPortVteps = addrStringsWithout(n.FloodVTEPs, n.Own), addrStringsWithout(n.HostPortVTEPs, n.Own)
	for _, h := range n.HostAddrs {
		out.HostAddresses = append(out.HostAddresses, &skiffv1.HostAddress{Vtep: h.VTEP.String(), Ip: h.IP.String()})
	}
	return out
}

// PlanNetwork converts a protobuf plan network to the plan model.
func PlanNetwork(n *skiffv1.PlanNetwork) (plan.Network, error) {
	out := plan.Network{Name: n.GetName(), VNI: n.GetVni(), MTU: n.GetMtu(), Egress: n.GetEgress()}
	if out.VNI == 0 || out.VNI > 1<<24-1 {
		return plan.Network{}, fmt.Errorf("network %q: vni: must be 1..16777215, got %d", n.GetName(), out.VNI)
	}
	if out.Egress != "" && !plan.ValidEgress(out.Egress) { // "": none (a controller from before egress)
		return plan.Network{}, fmt.Errorf("network %q: egress: %q is not none, snat or routed", n.GetName(), out.Egress)
	}
	for _, s := range n.GetSubnets() {
		ps, err := Subnet(s)
		if err != nil {
			return plan.Network{}, fmt.Errorf("network %q: %w", n.GetName(), err)
		}
		out.Subnets = append(out.Subnets, ps)
	}
	for _, v := range n.GetFloodVteps() {
		a, err := netip.ParseAddr(v)
		if err != nil {
			return plan.Network{}, fmt.Errorf("network %q: floodVteps: %w", n.GetName(), err)
		}
		out.FloodVTEPs = append(out.FloodVTEPs, a)
	}
	for _, v := range n.GetHostPortVteps() {
		a, err := netip.ParseAddr(v)
		if err != nil {
			return plan.Network{}, fmt.Errorf("network %q: hostPortVteps: %w", n.GetName(), err)
		}
		out.HostPortVTEPs = append(out.HostPortVTEPs, a)
	}
	for i, h := range n.GetHostAddresses() {
		vtep, err := netip.ParseAddr(h.GetVtep())
		if err != nil {
			return plan.Network{}, fmt.Errorf("network %q: hostAddresses[%d]: vtep: %w", n.GetName(), i, err)
		}
		ip, err := netip.ParseAddr(h.GetIp())
		if err != nil {
			return plan.Network{}, fmt.Errorf("network %q: hostAddresses[%d]: ip: %w", n.GetName(), i, err)
		}
		if ip.Is4() == vtep.Is4() {
			return plan.Network{}, fmt.Errorf("network %q: hostAddresses[%d]: ip: %s is of its VTEP %s's family; a host address is of the other", n.GetName(), i, ip, vtep)
		}
		out.HostAddrs = append(out.HostAddrs, plan.HostAddr{VTEP: vtep, IP: ip})
	}
	return out, nil
}

// RemotePB converts a remote endpoint to protobuf.
func RemotePB(r plan.Remote) *skiffv1.RemoteEndpoint {
	return &skiffv1.RemoteEndpoint{Name: r.Name, Network: r.Network, Node: r.Node, Vtep: addrString(r.VTEP), Mac: r.MAC, Ips: prefixStrings(r.IPs)}
}

// Remote converts a protobuf remote endpoint to the plan model.
func Remote(r *skiffv1.RemoteEndpoint) (plan.Remote, error) {
	vtep, err := netip.ParseAddr(r.GetVtep())
	if err != nil {
		return plan.Remote{}, fmt.Errorf("remote endpoint %q: vtep: %w", r.GetName(), err)
	}
	hw, err := net.ParseMAC(r.GetMac())
	if err != nil {
		return plan.Remote{}, fmt.Errorf("remote endpoint %q: mac: %w", r.GetName(), err)
	}
	ips, err := prefixes(r.GetIps())
	if err != nil {
		return plan.Remote{}, fmt.Errorf("remote endpoint %q: ips: %w", r.GetName(), err)
	}
	return plan.Remote{Name: r.GetName(), Network: r.GetNetwork(), Node: r.GetNode(), VTEP: vtep, MAC: hw.String(), IPs: ips}, nil
}

// DeltaPB converts a delta to protobuf.
func DeltaPB(d plan.Delta) *skiffv1.PlanDelta { return DeltaPBWith(d, RemotePB) }

// DeltaPBWith is DeltaPB converting remote endpoints with remote (which may
// return messages shared with other deltas: they must not be changed).
func DeltaPBWith(d plan.Delta, remote func(plan.Remote) *skiffv1.RemoteEndpoint) *skiffv1.PlanDelta {
	out := &skiffv1.PlanDelta{
		Node: d.Node, FromRevision: d.From, Revision: d.Revision,
		RemoveNetworks: d.RemoveNetworks, RemoveLocal: d.RemoveLocal, RemoveRemote: d.RemoveRemote,
		RemovePolicies: d.RemovePolicies, RemoveGroups: d.RemoveGroups,
	}
	for _, e := range d.UpsertPolicies {
		out.UpsertPolicies = append(out.UpsertPolicies, PolicyPB(e))
	}
	for _, g := range d.UpsertGroups {
		out.UpsertGroups = append(out.UpsertGroups, GroupPB(g))
	}
	for _, c := range d.ChangeGroups {
		out.ChangeGroups = append(out.ChangeGroups, GroupChangePB(c))
	}
	if d.UnderlayIP != nil {
		s := addrString(*d.UnderlayIP)
		out.UnderlayIp = &s
	}
	if d.DPU != nil {
		out.Dpu = DPUStatusPB(*d.DPU)
		if out.Dpu == nil {
			out.Dpu = &skiffv1.DPUStatus{}
		}
	}
	for _, n := range d.UpsertNetworks {
		out.UpsertNetworks = append(out.UpsertNetworks, NetworkPB(n))
	}
	for _, e := range d.UpsertLocal {
		out.UpsertLocal = append(out.UpsertLocal, EndpointPB(e))
	}
	for _, r := range d.UpsertRemote {
		out.UpsertRemote = append(out.UpsertRemote, remote(r))
	}
	return out
}

// Delta converts a protobuf delta to the plan model.
func Delta(d *skiffv1.PlanDelta) (plan.Delta, error) {
	out := plan.Delta{
		Node: d.GetNode(), From: d.GetFromRevision(), Revision: d.GetRevision(),
		RemoveNetworks: d.GetRemoveNetworks(), RemoveLocal: d.GetRemoveLocal(), RemoveRemote: d.GetRemoveRemote(),
		RemovePolicies: d.GetRemovePolicies(), RemoveGroups: d.GetRemoveGroups(),
	}
	for _, e := range d.GetUpsertPolicies() {
		pe, err := Policy(e)
		if err != nil {
			return plan.Delta{}, err
		}
		out.UpsertPolicies = append(out.UpsertPolicies, pe)
	}
	for _, g := range d.GetUpsertGroups() {
		pg, err := Group(g)
		if err != nil {
			return plan.Delta{}, err
		}
		out.UpsertGroups = append(out.UpsertGroups, pg)
	}
	for i, c := range d.GetChangeGroups() {
		pc, err := GroupChange(c)
		if err != nil {
			return plan.Delta{}, fmt.Errorf("delta: changeGroups[%d]: %w", i, err)
		}
		out.ChangeGroups = append(out.ChangeGroups, pc)
	}
	if d.UnderlayIp != nil {
		a, err := optAddr(d.GetUnderlayIp())
		if err != nil {
			return plan.Delta{}, fmt.Errorf("delta: underlayIp: %w", err)
		}
		out.UnderlayIP = &a
	}
	if d.Dpu != nil {
		st := DPUStatus(d.GetDpu())
		out.DPU = &st
	}
	for _, n := range d.GetUpsertNetworks() {
		pn, err := PlanNetwork(n)
		if err != nil {
			return plan.Delta{}, err
		}
		out.UpsertNetworks = append(out.UpsertNetworks, pn)
	}
	for _, e := range d.GetUpsertLocal() {
		pe, err := Endpoint(e)
		if err != nil {
			return plan.Delta{}, err
		}
		out.UpsertLocal = append(out.UpsertLocal, pe)
	}
	for _, r := range d.GetUpsertRemote() {
		pr, err := Remote(r)
		if err != nil {
			return plan.Delta{}, err
		}
		out.UpsertRemote = append(out.UpsertRemote, pr)
	}
	return out, nil
}

func prefixes(ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range ss {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func prefixStrings(ps []netip.Prefix) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

func optAddr(s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	return netip.ParseAddr(s)
}

// PolicyPB converts an endpoint policy to protobuf.
func PolicyPB(e plan.EndpointPolicy) *skiffv1.EndpointPolicy {
	rules := func(rs []plan.PolicyRule) []*skiffv1.PolicyRule {
		var out []*skiffv1.PolicyRule
		for _, r := range rs {
			pr := &skiffv1.PolicyRule{}
			for _, p := range r.Peers {
				pp := &skiffv1.PolicyPeer{Group: p.Group, Except: prefixStrings(p.Except)}
				if p.CIDR.IsValid() {
					pp.Cidr = p.CIDR.String()
				}
				pr.Peers = append(pr.Peers, pp)
			}
			for _, p := range r.Ports {
				pr.Ports = append(pr.Ports, &skiffv1.PolicyPort{Protocol: p.Protocol, Port: uint32(p.Port), EndPort: uint32(p.EndPort)})
			}
			out = append(out, pr)
		}
		return out
	}
	return &skiffv1.EndpointPolicy{Endpoint: e.Endpoint, IngressIsolated: e.IngressIsolated, EgressIsolated: e.EgressIsolated,
		Ingress: rules(e.Ingress), Egress: rules(e.Egress)}
}

// Policy converts a protobuf endpoint policy to the plan model.
func Policy(e *skiffv1.EndpointPolicy) (plan.EndpointPolicy, error) {
	rules := func(dir string, rs []*skiffv1.PolicyRule) ([]plan.PolicyRule, error) {
		var out []plan.PolicyRule
		for i, r := range rs {
			var pr plan.PolicyRule
			for j, p := range r.GetPeers() {
				pp := plan.PolicyPeer{Group: p.GetGroup()}
				if p.GetCidr() != "" {
					c, err := netip.ParsePrefix(p.GetCidr())
					if err != nil {
						return nil, fmt.Errorf("policy of %q: %s[%d].peers[%d].cidr: %w", e.GetEndpoint(), dir, i, j, err)
					}
					pp.CIDR = c
				}
				ex, err := prefixes(p.GetExcept())
				if err != nil {
					return nil, fmt.Errorf("policy of %q: %s[%d].peers[%d].except: %w", e.GetEndpoint(), dir, i, j, err)
				}
				pp.Except = ex
				if (pp.Group == "") == !pp.CIDR.IsValid() {
					return nil, fmt.Errorf("policy of %q: %s[%d].peers[%d]: exactly one of group and cidr", e.GetEndpoint(), dir, i, j)
				}
				pr.Peers = append(pr.Peers, pp)
			}
			for j, p := range r.GetPorts() {
				if p.GetPort() > 65535 || p.GetEndPort() > 65535 || p.GetEndPort() < p.GetPort() {
					return nil, fmt.Errorf("policy of %q: %s[%d].ports[%d]: bad range %d-%d", e.GetEndpoint(), dir, i, j, p.GetPort(), p.GetEndPort())
				}
				switch p.GetProtocol() {
				case "TCP", "UDP", "SCTP":
				default:
					return nil, fmt.Errorf("policy of %q: %s[%d].ports[%d].protocol: %q", e.GetEndpoint(), dir, i, j, p.GetProtocol())
				}
				pr.Ports = append(pr.Ports, plan.PolicyPort{Protocol: p.GetProtocol(), Port: uint16(p.GetPort()), EndPort: uint16(p.GetEndPort())})
			}
			out = append(out, pr)
		}
		return out, nil
	}
	in, err := rules("ingress", e.GetIngress())
	if err != nil {
		return plan.EndpointPolicy{}, err
	}
	eg, err := rules("egress", e.GetEgress())
	if err != nil {
		return plan.EndpointPolicy{}, err
	}
	return plan.EndpointPolicy{Endpoint: e.GetEndpoint(), IngressIsolated: e.GetIngressIsolated(), EgressIsolated: e.GetEgressIsolated(), Ingress: in, Egress: eg}, nil
}

// GroupPB converts an address group to protobuf.
func GroupPB(g plan.AddressGroup) *skiffv1.AddressGroup {
	return &skiffv1.AddressGroup{Name: g.Name, Members: addrStrings(g.Members)}
}

// Group converts a protobuf address group to the plan model.
func Group(g *skiffv1.AddressGroup) (plan.AddressGroup, error) {
	out := plan.AddressGroup{Name: g.GetName()}
	for i, m := range g.GetMembers() {
		a, err := netip.ParseAddr(m)
		if err != nil {
			return plan.AddressGroup{}, fmt.Errorf("group %q: members[%d]: %w", g.GetName(), i, err)
		}
		out.Members = append(out.Members, a)
	}
	if !slices.IsSortedFunc(out.Members, netip.Addr.Compare) { // the plan keeps them sorted (member changes search them)
		slices.SortFunc(out.Members, netip.Addr.Compare)
	}
	return out, nil
}

// GroupChangePB converts a group member change to protobuf.
func GroupChangePB(c plan.GroupChange) *skiffv1.GroupChange {
	return &skiffv1.GroupChange{Name: c.Name, Add: addrStrings(c.Add), Remove: addrStrings(c.Remove)}
}

// addrStrings is addresses in text (nil for none).
func addrStrings(as []netip.Addr) []string { return addrStringsWithout(as, netip.Addr{}) }

// addrStringsWithout is addrStrings leaving out own (none when zero).
func addrStringsWithout(as []netip.Addr, own netip.Addr) []string {
	var out []string
	for _, a := range as {
		if a != own {
			out = append(out, a.String())
		}
	}
	return out
}

// GroupChange converts a protobuf group member change to the plan model,
// its addresses sorted. It fails naming the field on an empty name, an
// address that does not parse, an address twice in one list, or a change
// of nothing. Whether the change applies to the plan (the group held,
// removed members in it) is plan.Plan.Apply's to say.
func GroupChange(c *skiffv1.GroupChange) (plan.GroupChange, error) {
	if c.GetName() == "" {
		return plan.GroupChange{}, errors.New("name: empty")
	}
	if len(c.GetAdd())+len(c.GetRemove()) == 0 {
		return plan.GroupChange{}, fmt.Errorf("group %q: add, remove: both empty", c.GetName())
	}
	out := plan.GroupChange{Name: c.GetName()}
	var err error
	if out.Add, err = memberList(c.GetName(), "add", c.GetAdd()); err != nil {
		return plan.GroupChange{}, err
	}
	if out.Remove, err = memberList(c.GetName(), "remove", c.GetRemove()); err != nil {
		return plan.GroupChange{}, err
	}
	return out, nil
}

func memberList(group, field string, ss []string) ([]netip.Addr, error) {
	var out []netip.Addr
	for i, m := range ss {
		a, err := netip.ParseAddr(m)
		if err != nil {
			return nil, fmt.Errorf("group %q: %s[%d]: %w", group, field, i, err)
		}
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	for i := 1; i < len(out); i++ {
		if out[i] == out[i-1] {
			return nil, fmt.Errorf("group %q: %s: %s listed twice", group, field, out[i])
		}
	}
	return out, nil
}
