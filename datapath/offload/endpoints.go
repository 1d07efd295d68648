package offload

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
)

// What the offload datapath offers the agent (datapath.Datapath):
// endpoint plumbing, readiness from the last Apply, counters and metrics.

// Kinds implements datapath.Datapath: a veth (its host side is the
// endpoint's port on the eswitch), a pod's VF (vfpods.go: moved into the
// pod; its representor is its port), and a VM's tap or vfio-bound VF
// (vmports.go). On a NIC whose VFs are not PCI functions (netdevsim), a
// VF endpoint is plumbed as a veth standing in for the VF: its traffic
// enters the VF's representor.
func (d *Datapath) Kinds() []string {
	return []string{plan.KindVeth, plan.KindVF, plan.KindTap, plan.KindVFIO}
}

// Plumb implements datapath.Datapath. A VF endpoint needs its VF on
// a PF in switchdev mode, with a representor, on this node; otherwise it
// is refused and nothing is made (no veth instead).
func (d *Datapath) Plumb(_ context.Context, req datapath.PlumbRequest) (datapath.Plumbed, error) {
	e := req.Endpoint
	// An Apply begun before the interface existed made no rules for it.
	defer d.gate.Plumbed(e.Name)
	switch e.Kind {
	case plan.KindTap:
		d.gate.Plumbing(e.Name)
		return datapath.PlumbTap(d.opts.Open, d.k.Path(), req)
	case plan.KindVFIO:
		return d.plumbVFIO(req)
	case plan.KindVF:
		return d.plumbVF(req)
	case plan.KindVeth:
	default:
		return datapath.Plumbed{}, fmt.Errorf("offload datapath: endpoint %s of kind %q: %w", e.Name, e.Kind, datapath.ErrKind)
	}
	d.gate.Plumbing(e.Name)
	return datapath.PlumbVeth(d.opts.Open, d.k.Path(), req)
}

// Unplumb implements datapath.Datapath.
func (d *Datapath) Unplumb(_ context.Context, req datapath.UnplumbRequest) error {
	switch req.Endpoint.Kind {
	case plan.KindTap:
		return datapath.UnplumbTap(d.opts.Open, d.k.Path(), req.Endpoint.Name)
	case plan.KindVFIO:
		return d.unplumbVFIO(req.Endpoint)
	case plan.KindVF:
		return d.unplumbVF(req)
	}
	return datapath.UnplumbVeth(d.opts.Open, d.k.Path(), req.Endpoint.Name)
}

// Ready implements datapath.Datapath: the endpoint's decap rule was
// installed (in hardware or software) by the last Apply that began after
// its latest Plumb.
func (d *Datapath) Ready(endpoint string) (bool, string) {
	if !d.gate.Current(endpoint) {
		return false, datapath.NotCurrent
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if r, ok := d.refusedEps[endpoint]; ok {
		if r.software {
			return true, ""
		}
		return false, r.reason
	}
	for _, s := range d.states {
		if s.Rule.Endpoint == endpoint && s.Rule.Kind == flower.KindDecap {
			if s.State == "" {
				return false, fmt.Sprintf("decap rule on %s not installed: %s", s.Rule.Dev, s.Reason)
			}
			return true, ""
		}
	}
	return false, "no rules yet (not plumbed, or its representor is missing)"
}

// Counters implements datapath.Datapath: traffic of endpoints that
// have a host interface, every endpoint's forwarding and policy rules
// with their counters, and the policy counters.
func (d *Datapath) Counters(p plan.Plan) (datapath.Counters, error) {
	out := datapath.Counters{Endpoints: map[string]datapath.EndpointCounters{}, Networks: map[string]datapath.IfCounters{},
		PolicyWrites: map[string]int{"filter": d.PolicyWrites()}}
	d.mu.Lock()
	for kind, n := range d.polW {
		out.PolicyWrites[kind] = n
	}
	d.mu.Unlock()
	stats, err := d.k.Stats()
	if err != nil {
		return out, err
	}
	rules := d.Rules()
	pol := d.PolicyRules()
	byEp := map[string][]datapath.Rule{}
	for ep, states := range rules {
		for _, s := range states {
			byEp[ep] = append(byEp[ep], datapath.Rule{Device: s.Rule.Dev, Kind: s.Rule.Kind, Text: s.Rule.String(), State: s.State,
				Reason: s.Reason, Handle: s.Handle, Packets: s.Packets, Bytes: s.Bytes, HWPackets: s.HWPackets, HWBytes: s.HWBytes})
		}
	}
	d.mu.Lock()
	for ep, r := range d.refusedEps {
		state := ""
		if r.software {
			state = "software"
		}
		byEp[ep] = append(byEp[ep], datapath.Rule{Device: r.rep, Kind: RefusedKind, State: state, Reason: r.reason})
	}
	d.mu.Unlock()
	for _, s := range pol {
		kind := "policy"
		if s.Rule.Direction != "" {
			kind += "-" + s.Rule.Direction
		}
		byEp[s.Rule.Endpoint] = append(byEp[s.Rule.Endpoint], datapath.Rule{Device: s.Rule.Dev, Kind: kind, Text: s.Rule.String(), State: s.State,
			Reason: s.Reason, Handle: s.Handle, Packets: s.Packets, Bytes: s.Bytes, HWPackets: s.HWPackets, HWBytes: s.HWBytes})
	}
	for name := range p.Local {
		ec := datapath.EndpointCounters{Rules: byEp[name]}
		// The endpoint's host side (veth, tap), or else its VF's
		// representor (a vfio port), which counts what the NIC forwarded
		// too: either's receive is the endpoint's transmit.
		s, ok := stats[datapath.HostIfName(name)]
		if !ok {
			if port, found := d.opts.Representor(p.Local[name]); found {
				s, ok = stats[port.Rep]
			}
		}
		if ok {
			ec.Traffic = &datapath.IfCounters{RxPackets: s.TxPackets, RxBytes: s.TxBytes, RxDropped: s.TxDropped,
				TxPackets: s.RxPackets, TxBytes: s.RxBytes, TxDropped: s.RxDropped}
		}
		if ec.Traffic != nil || len(ec.Rules) > 0 {
			out.Endpoints[name] = ec
		}
	}
	if len(p.Policies) > 0 {
		cs, err := d.PolicyCounters()
		if err != nil {
			return out, err
		}
		out.Policy = cs
	}
	return out, nil
}

// Collectors implements datapath.Datapath: the offload rules by
// endpoint and state, their counters, writes and policy filters.
func (d *Datapath) Collectors() []prometheus.Collector { return []prometheus.Collector{&collector{d}} }

var _ datapath.Datapath = (*Datapath)(nil)
