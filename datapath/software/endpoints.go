package software

import (
	"context"
	"fmt"
	"maps"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/datapath/firewall"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
)

// Kinds implements datapath.Datapath: veth pairs (pods) and taps (VMs); a
// node without a switchdev eswitch has no VF to give.
func (d *Datapath) Kinds() []string { return []string{plan.KindVeth, plan.KindTap} }

// Plumb implements datapath.Datapath. A veth endpoint: a veth pair, its
// host side named datapath.HostIfName and marked with
// datapath.HostIfAlias, its peer moved into req.NetNS as req.IfName with
// the endpoint's MAC, MTU, addresses and default routes. A tap endpoint
// (a VM's port): a persistent tap of that name for the hypervisor; the
// guest's MAC is the hypervisor's to set. Apply puts the host side on the
// network's bridge.
func (d *Datapath) Plumb(_ context.Context, req datapath.PlumbRequest) (datapath.Plumbed, error) {
	e := req.Endpoint
	// An Apply begun before the interface existed made no rules for it.
	defer d.gate.Plumbed(e.Name)
	switch e.Kind {
	case plan.KindVeth:
		d.gate.Plumbing(e.Name)
		return datapath.PlumbVeth(d.open, d.k.Path(), req)
	case plan.KindTap:
		d.gate.Plumbing(e.Name)
		return datapath.PlumbTap(d.open, d.k.Path(), req)
	}
	return datapath.Plumbed{}, fmt.Errorf("software datapath: endpoint %s of kind %q: %w (it plumbs veth pairs and taps; VFs need a node with a switchdev eswitch)", e.Name, e.Kind, datapath.ErrKind)
}

// Unplumb implements datapath.Datapath: deleting a veth's host side takes
// the peer with it, wherever it is; a tap goes (its hypervisor loses the
// link).
func (d *Datapath) Unplumb(_ context.Context, req datapath.UnplumbRequest) error {
	if req.Endpoint.Kind == plan.KindTap {
		return datapath.UnplumbTap(d.open, d.k.Path(), req.Endpoint.Name)
	}
	return datapath.UnplumbVeth(d.open, d.k.Path(), req.Endpoint.Name)
}

// Ready implements datapath.Datapath: the endpoint's host side is a port
// of its network's bridge, as of the last Apply that began after its
// latest Plumb.
func (d *Datapath) Ready(endpoint string) (bool, string) {
	if !d.gate.Current(endpoint) {
		return false, datapath.NotCurrent
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	why, ok := d.attached[endpoint]
	switch {
	case !ok:
		return false, "not in the plan of the last apply"
	case why != "":
		return false, why
	}
	return true, ""
}

// Counters implements datapath.Datapath: each endpoint's host side seen
// from the endpoint (what the host side sends, the endpoint received),
// each network's VXLAN device, and the policy table's rule counters.
func (d *Datapath) Counters(p plan.Plan) (datapath.Counters, error) {
	stats, err := d.k.Stats()
	if err != nil {
		return datapath.Counters{}, err
	}
	out := datapath.Counters{Endpoints: map[string]datapath.EndpointCounters{}, Networks: map[string]datapath.IfCounters{}}
	for name := range p.Local {
		if s, ok := stats[datapath.HostIfName(name)]; ok {
			out.Endpoints[name] = datapath.EndpointCounters{Traffic: &datapath.IfCounters{
				RxPackets: s.TxPackets, RxBytes: s.TxBytes, RxDropped: s.TxDropped,
				TxPackets: s.RxPackets, TxBytes: s.RxBytes, TxDropped: s.RxDropped}}
		}
	}
	for name, n := range p.Networks {
		if s, ok := stats[VXLANName(n.VNI)]; ok {
			out.Networks[name] = datapath.IfCounters(s)
		}
	}
	d.mu.Lock()
	out.PolicyWrites = maps.Clone(d.policy)
	d.mu.Unlock()
	if len(p.Policies) > 0 {
		cs, err := d.k.TableCounters(nl.NftInet, firewall.PolicyTable)
		if err != nil {
			return out, fmt.Errorf("software datapath: policy counters: %w", err)
		}
		out.Policy = firewall.PolicyCounters(cs)
	}
	return out, nil
}

// Writes implements datapath.Datapath.
func (d *Datapath) Writes() int { return d.k.Writes() }

// Collectors implements datapath.Datapath: none of its own.
func (d *Datapath) Collectors() []prometheus.Collector { return nil }

// Close implements datapath.Datapath.
func (d *Datapath) Close() { d.k.Close() }

var _ datapath.Datapath = (*Datapath)(nil)
