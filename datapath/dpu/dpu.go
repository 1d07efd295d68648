// Package dpu is the datapath of a node in mode dpu: the agent on a DPU's
// Arm cores. It has no pods of its own; its plan holds its host's
// endpoints (placed there by the controller, with the PF and VF index the
// host gave), and it attaches each one's VF representor to the
// endpoint's network with the datapath it wraps: the offload datapath
// (flower rules on the representor) where the DPU's eswitch is in
// switchdev mode, the software datapath otherwise (the e2e bench).
//
// A representor is adopted: renamed to the endpoint's host interface
// name (datapath.HostIfName) and marked with an alias that names the
// endpoint and the representor's own name, so the wrapped datapath
// treats it as the endpoint's interface (bridge port, policy, counters).
// When the endpoint leaves the plan it is detached and given its name
// back. How a VF's representor is found is the Representors seam:
// EswitchRepresentors (c1pf<N>vf<M> on a BlueField, through
// offload/eswitch) or a vftable.Table on a bench.
package dpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
)

// Representors finds the representors of the host's VFs on this DPU.
// Safe for concurrent use.
type Representors interface {
	// Netdev names the representor of VF index of the host's PF pf (as
	// the host names the PF).
	Netdev(ctx context.Context, pf string, index int) (string, error)
}

// Options configure a Datapath.
type Options struct {
	// Node is this DPU's node name: local endpoints of other nodes are
	// its host's.
	Node  string
	Inner datapath.Datapath // required: the forwarding datapath
	// Kernel is required: a handle of the DPU's namespace, where its
	// representors are, of the datapath's own (its writes count in
	// Writes; Close closes it).
	Kernel       nl.Kernel
	Representors Representors // required
	Logger       *slog.Logger
}

// Datapath is the dpu datapath. Apply, Plumb and Unplumb follow
// datapath.Datapath's rules; Ready and Refused are safe for concurrent
// use.
type Datapath struct {
	o Options

	mu      sync.Mutex
	refused map[string]string // host endpoint -> why it cannot be attached
}

// Learn asks the inner datapath what it learnt, when it learns
// (datapath.Learner).
func (d *Datapath) Learn() (bool, error) {
	if l, ok := d.o.Inner.(datapath.Learner); ok {
		return l.Learn()
	}
	return false, nil
}

// New returns a dpu datapath around o.Inner.
func New(o Options) *Datapath {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Datapath{o: o, refused: map[string]string{}}
}

const markPrefix = datapath.AliasPrefix + "rep "

func mark(endpoint, home string) string { return datapath.Mark(markPrefix, endpoint, home) }

func parseMark(alias string) (endpoint, home string, ok bool) {
	return datapath.ParseMark(markPrefix, alias)
}

// Apply implements datapath.Datapath: the host's endpoints' representors
// are adopted (those of endpoints gone given back), then the wrapped
// datapath applies p whole.
func (d *Datapath) Apply(p plan.Plan) error {
	links, err := d.o.Kernel.Links()
	if err != nil {
		return fmt.Errorf("dpu datapath: %w", err)
	}
	byName := map[string]nl.Link{}
	for _, l := range links {
		byName[l.Name] = l
	}
	refused := map[string]string{}
	var errs []error
	for name, e := range p.Local {
		if e.Node == d.o.Node {
			continue
		}
		why, err := d.adopt(e, byName)
		if why != "" {
			refused[name] = why
		}
		errs = append(errs, err)
	}
	for _, l := range links {
		ep, home, ok := parseMark(l.Alias)
		if !ok {
			continue
		}
		if e, keep := p.Local[ep]; keep && e.Node != d.o.Node && l.Name == datapath.HostIfName(ep) {
			continue
		}
		errs = append(errs, d.release(l, home))
	}
	d.mu.Lock()
	d.refused = refused
	d.mu.Unlock()
	errs = append(errs, d.o.Inner.Apply(p))
	return errors.Join(errs...)
}

// adopt makes e's representor its host interface. why is set when it
// cannot be (waiting will not help); err for a failed kernel call.
func (d *Datapath) adopt(e plan.Endpoint, byName map[string]nl.Link) (why string, err error) {
	hn := datapath.HostIfName(e.Name)
	if l, ok := byName[hn]; ok {
		if ep, _, marked := parseMark(l.Alias); marked && ep == e.Name {
			return "", nil
		}
	}
	if e.Kind != plan.KindVF || e.PF == "" || e.VFIndex < 0 {
		return fmt.Sprintf("endpoint %s of kind %q: a host's endpoint needs a VF (its PF and VF index)", e.Name, e.Kind), nil
	}
	rep, err := d.o.Representors.Netdev(context.Background(), e.PF, e.VFIndex)
	if err != nil {
		return fmt.Sprintf("no representor for VF %d of PF %s on DPU %s: %v", e.VFIndex, e.PF, d.o.Node, err), nil
	}
	l, ok := byName[rep]
	if !ok {
		return fmt.Sprintf("the representor %s of VF %d of PF %s is not on DPU %s", rep, e.VFIndex, e.PF, d.o.Node), nil
	}
	if ep, _, marked := parseMark(l.Alias); marked && ep != e.Name {
		return fmt.Sprintf("the representor %s of VF %d of PF %s serves endpoint %s", rep, e.VFIndex, e.PF, ep), nil
	}
	k := d.o.Kernel
	if err := k.SetAlias(l.Index, mark(e.Name, rep)); err != nil {
		return "", fmt.Errorf("dpu datapath: endpoint %s: mark representor %s: %w", e.Name, rep, err)
	}
	if err := k.Rename(l.Index, hn); err != nil {
		return "", errors.Join(fmt.Errorf("dpu datapath: endpoint %s: rename representor %s to %s: %w", e.Name, rep, hn, err),
			k.SetAlias(l.Index, ""))
	}
	d.o.Logger.Info("representor adopted", "endpoint", e.Name, "representor", rep, "as", hn, "host", e.Node)
	return "", nil
}

// release detaches an adopted representor and gives it its name back.
func (d *Datapath) release(l nl.Link, home string) error {
	if l.Master != 0 {
		if err := d.o.Kernel.SetMaster(l.Index, 0); err != nil && !errors.Is(err, nl.ErrLinkGone) {
			return fmt.Errorf("dpu datapath: detach %s: %w", l.Name, err)
		}
	}
	if l.Name != home {
		if err := d.o.Kernel.Rename(l.Index, home); err != nil {
			return fmt.Errorf("dpu datapath: give %s its name %s back: %w", l.Name, home, err)
		}
	}
	d.o.Logger.Info("representor given back", "representor", home)
	return d.o.Kernel.SetAlias(l.Index, "")
}

// Refused says why a host's endpoint cannot be attached ("": it can),
// as of the last Apply (agent.Refuser).
func (d *Datapath) Refused(endpoint string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.refused[endpoint]
}

// Ready implements datapath.Datapath.
func (d *Datapath) Ready(endpoint string) (bool, string) {
	if why := d.Refused(endpoint); why != "" {
		return false, why
	}
	return d.o.Inner.Ready(endpoint)
}

// Kinds implements datapath.Datapath: a DPU has no pods of its own.
func (d *Datapath) Kinds() []string { return nil }

// Plumb implements datapath.Datapath: nothing is plumbed on a DPU
// through its local API.
func (d *Datapath) Plumb(_ context.Context, req datapath.PlumbRequest) (datapath.Plumbed, error) {
	return datapath.Plumbed{}, fmt.Errorf("dpu datapath: endpoint %s: %w (a DPU has no pods; its host's pods get VFs)", req.Endpoint.Name, datapath.ErrKind)
}

// Unplumb implements datapath.Datapath: nothing to remove.
func (d *Datapath) Unplumb(context.Context, datapath.UnplumbRequest) error { return nil }

// Counters implements datapath.Datapath: the wrapped datapath's (the
// adopted representors count the host's endpoints).
func (d *Datapath) Counters(p plan.Plan) (datapath.Counters, error) { return d.o.Inner.Counters(p) }

// Writes implements datapath.Datapath: the wrapped datapath's, and the
// representors marked, renamed and detached.
func (d *Datapath) Writes() int { return d.o.Inner.Writes() + d.o.Kernel.Writes() }

// Collectors implements datapath.Datapath.
func (d *Datapath) Collectors() []prometheus.Collector { return d.o.Inner.Collectors() }

// Close implements datapath.Datapath: the wrapped datapath's and the
// DPU namespace's handles.
func (d *Datapath) Close() {
	d.o.Inner.Close()
	d.o.Kernel.Close()
}

// Wires names, on a test rig whose representors carry no frames
// (netdevsim), the netdev standing in for a VF's side of the eswitch
// (vftable.Table); "" for none.
type Wires interface {
	Wire(pf string, index int) string
}

// Port is where a host's endpoint meets the eswitch, for the offload
// datapath a dpu datapath wraps on a DPU whose eswitch is in switchdev
// mode: its adopted representor, under the endpoint's host interface
// name (its rules go there), and the netdev wires names for its VF on a
// test rig (wires may be nil). The VF itself is in the host, not in this
// kernel: nothing else of it is the DPU's.
func Port(wires Wires, e plan.Endpoint) (rep, wire string) {
	if wires != nil && e.Kind == plan.KindVF {
		wire = wires.Wire(e.PF, e.VFIndex)
	}
	return datapath.HostIfName(e.Name), wire
}
