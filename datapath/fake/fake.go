// Package fake is a datapath that touches no kernel: it records what it is
// asked, holds the state a real datapath would hold, and prints it, so
// that everything above the datapath (the agent's session, saved plan,
// local API, events and counters) is tested without root.
//
//	dp := fake.New()
//	dp.FailPlumb("pod-b", errors.New("no VF left")) // the next Plumb of pod-b fails
//	_ = dp.Apply(p)
//	fmt.Print(dp.State())
//	// network blue vni=100 mtu=1450 flood=[192.0.2.2]
//	// endpoint pod-a plumbed=eth0@/run/netns/a host=fkpod-a attached
//	// remote pod-c mac=02:... vtep=192.0.2.2
package fake

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/plan"
)

// Call is one call the datapath received.
type Call struct {
	Op       string // apply, plumb, unplumb
	Endpoint string // plumb and unplumb
	Revision int64  // apply
}

func (c Call) String() string {
	if c.Op == "apply" {
		return fmt.Sprintf("apply@%d", c.Revision)
	}
	return c.Op + " " + c.Endpoint
}

// Datapath is the fake. It is safe for concurrent use.
type Datapath struct {
	mu       sync.Mutex
	calls    []Call
	applied  plan.Plan
	has      bool
	plumbed  map[string]datapath.PlumbRequest
	attached map[string]bool
	writes   int
	kinds    []string
	// Injected failures, consumed by the next matching call.
	failPlumb map[string]error
	failApply []error
	// Endpoints that Apply never attaches.
	stuck    map[string]string
	counters map[string]datapath.IfCounters
	applied1 chan struct{} // closed at every Apply, then replaced
}

// New returns a fake offering endpoint kinds veth (and kinds, when given).
func New(kinds ...string) *Datapath {
	if len(kinds) == 0 {
		kinds = []string{plan.KindVeth}
	}
	return &Datapath{plumbed: map[string]datapath.PlumbRequest{}, attached: map[string]bool{}, kinds: kinds,
		failPlumb: map[string]error{}, stuck: map[string]string{}, counters: map[string]datapath.IfCounters{},
		applied1: make(chan struct{})}
}

// HostIf is the host-side name the fake gives an endpoint's interface.
func HostIf(endpoint string) string { return "fk" + endpoint }

// FailPlumb makes the next Plumb of endpoint fail with err.
func (d *Datapath) FailPlumb(endpoint string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failPlumb[endpoint] = err
}

// FailApply makes the next Apply return err (after applying).
func (d *Datapath) FailApply(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failApply = append(d.failApply, err)
}

// Stick keeps endpoint unattached by every Apply, with reason; an empty
// reason releases it.
func (d *Datapath) Stick(endpoint, reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if reason == "" {
		delete(d.stuck, endpoint)
	} else {
		d.stuck[endpoint] = reason
	}
}

// SetCounters sets what Counters reports for an endpoint's traffic.
func (d *Datapath) SetCounters(endpoint string, c datapath.IfCounters) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.counters[endpoint] = c
}

// Apply implements datapath.Datapath: it records p as the state held and
// attaches every plumbed endpoint that p holds.
func (d *Datapath) Apply(p plan.Plan) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, Call{Op: "apply", Revision: p.Revision})
	if !d.has || !equalState(d.applied, p) {
		d.writes++
	}
	d.applied, d.has = p.Clone(), true
	for name := range d.attached {
		if _, ok := p.Local[name]; !ok {
			delete(d.attached, name)
		}
	}
	for name := range d.plumbed {
		if _, ok := p.Local[name]; ok && d.stuck[name] == "" {
			d.attached[name] = true
		}
	}
	close(d.applied1)
	d.applied1 = make(chan struct{})
	if len(d.failApply) > 0 {
		err := d.failApply[0]
		d.failApply = d.failApply[1:]
		return err
	}
	return nil
}

// Plumb implements datapath.Datapath.
func (d *Datapath) Plumb(_ context.Context, req datapath.PlumbRequest) (datapath.Plumbed, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	name := req.Endpoint.Name
	d.calls = append(d.calls, Call{Op: "plumb", Endpoint: name})
	if !slices.Contains(d.kinds, req.Endpoint.Kind) {
		return datapath.Plumbed{}, fmt.Errorf("fake: %s: kind %q: %w", name, req.Endpoint.Kind, datapath.ErrKind)
	}
	if err, ok := d.failPlumb[name]; ok {
		delete(d.failPlumb, name)
		return datapath.Plumbed{}, err
	}
	if old, ok := d.plumbed[name]; !ok || old.NetNS != req.NetNS || old.IfName != req.IfName {
		d.writes++
	}
	d.plumbed[name] = req
	mtu := int(req.Network.MTU)
	if mtu == 0 {
		mtu = plan.DefaultMTU
	}
	if req.MTU > 0 && req.MTU < mtu {
		mtu = req.MTU
	}
	out := datapath.Plumbed{HostIf: HostIf(name), MTU: mtu}
	for _, ip := range req.Endpoint.IPs {
		for _, s := range req.Network.Subnets {
			if s.CIDR.Contains(ip.Addr()) && s.Gateway.IsValid() {
				out.Gateways = append(out.Gateways, s.Gateway)
			}
		}
	}
	return out, nil
}

// Unplumb implements datapath.Datapath.
func (d *Datapath) Unplumb(_ context.Context, req datapath.UnplumbRequest) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	name := req.Endpoint.Name
	d.calls = append(d.calls, Call{Op: "unplumb", Endpoint: name})
	if _, ok := d.plumbed[name]; ok {
		d.writes++
	}
	delete(d.plumbed, name)
	delete(d.attached, name)
	return nil
}

// Ready implements datapath.Datapath.
func (d *Datapath) Ready(endpoint string) (bool, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.attached[endpoint]:
		return true, ""
	case d.stuck[endpoint] != "":
		return false, d.stuck[endpoint]
	case d.plumbed[endpoint].Endpoint.Name == "":
		return false, "not plumbed"
	}
	return false, "not attached by an Apply yet"
}

// Kinds implements datapath.Datapath.
func (d *Datapath) Kinds() []string { return slices.Clone(d.kinds) }

// Counters implements datapath.Datapath: what SetCounters set, for p's
// plumbed local endpoints.
func (d *Datapath) Counters(p plan.Plan) (datapath.Counters, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := datapath.Counters{Endpoints: map[string]datapath.EndpointCounters{}, Networks: map[string]datapath.IfCounters{}}
	for name := range p.Local {
		if c, ok := d.counters[name]; ok {
			out.Endpoints[name] = datapath.EndpointCounters{Traffic: &c}
		}
	}
	return out, nil
}

// Writes implements datapath.Datapath: state changes made (an Apply that
// changed the held plan, a Plumb that made something, an Unplumb that
// removed something).
func (d *Datapath) Writes() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.writes
}

// Collectors implements datapath.Datapath: none.
func (d *Datapath) Collectors() []prometheus.Collector { return nil }

// Close implements datapath.Datapath.
func (d *Datapath) Close() {}

// Calls returns the calls received so far and forgets them.
func (d *Datapath) Calls() []Call {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.calls
	d.calls = nil
	return c
}

// Applied returns the last plan applied and whether there was one.
func (d *Datapath) Applied() (plan.Plan, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.applied, d.has
}

// Plumbed lists the plumbed endpoints, sorted.
func (d *Datapath) Plumbed() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Sorted(maps.Keys(d.plumbed))
}

// NextApply returns a channel closed by the next Apply.
func (d *Datapath) NextApply() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.applied1
}

// State prints the state the datapath holds, one line per object,
// sorted: networks, local endpoints (plumbed or not, attached or not),
// remote endpoints. "(no plan)" before the first Apply.
func (d *Datapath) State() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var b strings.Builder
	if !d.has {
		b.WriteString("(no plan)\n")
	}
	p := d.applied
	for _, name := range slices.Sorted(maps.Keys(p.Networks)) {
		n := p.Networks[name]
		fmt.Fprintf(&b, "network %s vni=%d mtu=%d flood=%v\n", name, n.VNI, n.MTU, n.FloodVTEPs)
	}
	names := map[string]bool{}
	for n := range p.Local {
		names[n] = true
	}
	for n := range d.plumbed {
		names[n] = true
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		line := "endpoint " + name
		if r, ok := d.plumbed[name]; ok {
			line += fmt.Sprintf(" plumbed=%s@%s host=%s", r.IfName, r.NetNS, HostIf(name))
		} else {
			line += " unplumbed"
		}
		if _, ok := p.Local[name]; !ok {
			line += " (not in plan)"
		}
		switch {
		case d.attached[name]:
			line += " attached"
		case d.stuck[name] != "":
			line += " stuck: " + d.stuck[name]
		}
		b.WriteString(line + "\n")
	}
	for _, name := range slices.Sorted(maps.Keys(p.Remote)) {
		r := p.Remote[name]
		fmt.Fprintf(&b, "remote %s mac=%s vtep=%s\n", name, r.MAC, r.VTEP)
	}
	return b.String()
}

// equalState compares what a datapath holds of two plans (revisions
// ignored).
func equalState(a, b plan.Plan) bool { return a.Equal(b) }

var _ datapath.Datapath = (*Datapath)(nil)

// ErrInjected is a convenience error for tests.
var ErrInjected = errors.New("fake: injected failure")
