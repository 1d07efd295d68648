// Package dpuhost is the datapath of a node in mode dpu-host: the host
// side of a DPU. It has no forwarding of its own (the paired DPU's agent
// owns the eswitch, the representors, the tunnels and every rule); it
// moves a pod's VF netdev into the pod, names and addresses it, and
// reports the endpoint ready when the DPU's report on it (carried in this
// node's plan, Endpoint.DPUReady) says its representor is attached.
//
//	dp, err := dpuhost.New(dpuhost.Options{VFs: table, StateFile: "/var/lib/skiff-agent/dpuhost-vfs.json", Logger: log})
//	out, err := dp.Plumb(ctx, req) // the VF into req.NetNS as req.IfName
//	dp.Apply(p)                    // takes the DPU's reports from p
//	ok, why := dp.Ready("pod-a")
//
// How the host finds a VF's netdev is the VFs seam: sysfs (SysfsVFs,
// through offload/eswitch) on a real host, a vftable.Table on a bench
// without SR-IOV (the e2e suite's veth stand-ins).
package dpuhost

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

// VFs finds this host's VFs. Safe for concurrent use.
type VFs interface {
	// ByPCI finds a VF by PCI address (a CNI's deviceID): its PF as
	// endpoints name it, and its index.
	ByPCI(ctx context.Context, pci string) (pf string, index int, err error)
	// Netdev names the netdev of VF index of pf in the host namespace
	// (when no pod holds it).
	Netdev(ctx context.Context, pf string, index int) (string, error)
}

// Options configure a Datapath.
type Options struct {
	VFs VFs // required
	// Open opens namespaces by path (pods', and HostNS); nl.Open when
	// nil.
	Open nl.OpenFunc
	// HostNS is the namespace VFs live in when no pod holds them (a
	// path; "" is the caller's, the host's on a node).
	HostNS string
	// StateFile, when set, keeps where each VF was put (pod namespace
	// and interface name) across agent restarts, so that a VF
	// re-created by a reset of its PF (a DPU reboot) is moved back into
	// its pod even by an agent started after the reset.
	StateFile string
	Logger    *slog.Logger
}

// Datapath is the dpu-host datapath. Safe for concurrent use.
type Datapath struct {
	vfs  VFs
	open nl.OpenFunc
	host nl.Kernel // HostNS
	log  *slog.Logger

	// moves serializes moving VFs (Plumb, Unplumb) with Apply's
	// sweep, which must not take a VF mid-move for a stranded one.
	moves  sync.Mutex
	mu     sync.Mutex
	why    map[string]string // endpoint -> "" when its DPU reports it attached, else why not
	writes int
	// put is where each plumbed VF went (restore.go), saved in state.
	put   map[string]placement
	state string
}

// New returns a dpu-host datapath, with the placements of o.StateFile
// when it is set (an error names the file and what is wrong in it).
func New(o Options) (*Datapath, error) {
	d := &Datapath{vfs: o.VFs, open: o.Open, log: o.Logger, why: map[string]string{}, state: o.StateFile}
	if d.open == nil {
		d.open = nl.Open
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	put, err := loadPlacements(o.StateFile)
	if err != nil {
		return nil, fmt.Errorf("dpu-host datapath: %w", err)
	}
	d.put = put
	if d.host, err = d.open(o.HostNS); err != nil {
		return nil, fmt.Errorf("dpu-host datapath: %w", err)
	}
	return d, nil
}

// markPrefix starts the alias of a VF netdev this datapath moved: it
// names the endpoint and the netdev's name at home, and travels with the
// netdev between namespaces.
const markPrefix = "skiff:dpuvf "

func mark(endpoint, home string) string { return datapath.Mark(markPrefix, endpoint, home) }

func parseMark(alias string) (endpoint, home string, ok bool) {
	return datapath.ParseMark(markPrefix, alias)
}

// Kinds implements datapath.Datapath: a dpu-host's pods get VFs only.
func (d *Datapath) Kinds() []string { return []string{plan.KindVF} }

// Apply implements datapath.Datapath: the host has nothing to forward;
// it takes each local endpoint's readiness from its DPU's report in p,
// gives back to the host, under their names and unmarked, VFs the
// kernel returned from destroyed pod namespaces (still marked, perhaps
// renamed), and moves VFs re-created by a reset of their PF back into
// their pods where the pods still exist (restore.go).
func (d *Datapath) Apply(p plan.Plan) error {
	why := map[string]string{}
	for name, e := range p.Local {
		switch {
		case e.DPUReady:
			why[name] = ""
		case e.DPUError != "":
			why[name] = "DPU " + p.DPU.Node + ": " + e.DPUError
		case e.DPUReason != "":
			why[name] = "DPU " + p.DPU.Node + ": " + e.DPUReason
		default:
			why[name] = "DPU " + p.DPU.Node + " has not reported it yet"
		}
	}
	d.mu.Lock()
	d.why = why
	d.mu.Unlock()
	return errors.Join(d.giveBack(), d.restore(p))
}

// giveBack renames and unmarks the marked VFs in the host namespace: in
// the host, a VF is in no pod.
func (d *Datapath) giveBack() error {
	d.moves.Lock()
	defer d.moves.Unlock()
	devs, err := d.host.Links()
	if err != nil {
		return fmt.Errorf("dpu-host datapath: %w", err)
	}
	var errs []error
	for _, l := range devs {
		ep, home, ok := parseMark(l.Alias)
		if !ok {
			continue
		}
		d.log.Info("giving back a VF whose pod's namespace is gone", "endpoint", ep, "vf", home, "as", l.Name)
		if l.Name != home {
			if err := d.count(d.host.Rename(l.Index, home)); err != nil {
				errs = append(errs, fmt.Errorf("dpu-host datapath: VF %s back to its name %s: %w", l.Name, home, err))
				continue
			}
		}
		errs = append(errs, d.count(d.host.SetAlias(l.Index, "")))
	}
	return errors.Join(errs...)
}

// Ready implements datapath.Datapath: the DPU reported the endpoint's
// representor attached, as of the last Apply.
func (d *Datapath) Ready(endpoint string) (bool, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	why, ok := d.why[endpoint]
	if !ok {
		return false, "not in the plan of the last apply"
	}
	return why == "", why
}

// Plumb implements datapath.Datapath: the VF's netdev (found by its PF
// and index) goes into req.NetNS as req.IfName with the endpoint's MAC,
// MTU, addresses and default routes. Idempotent: a VF already in the pod
// is configured again. On error the VF goes back home.
func (d *Datapath) Plumb(ctx context.Context, req datapath.PlumbRequest) (datapath.Plumbed, error) {
	e := req.Endpoint
	if e.Kind != plan.KindVF {
		return datapath.Plumbed{}, fmt.Errorf("dpu-host datapath: endpoint %s of kind %q: %w (a dpu-host's pods get VFs)", e.Name, e.Kind, datapath.ErrKind)
	}
	if req.NetNS == "" || req.IfName == "" {
		return datapath.Plumbed{}, fmt.Errorf("dpu-host datapath: endpoint %s: a VF needs the pod's namespace and interface name", e.Name)
	}
	d.moves.Lock()
	defer d.moves.Unlock()
	out, err := d.plumb(ctx, req)
	if err == nil {
		err = d.placed(e.Name, placement{NetNS: req.NetNS, IfName: req.IfName, MTU: req.MTU, Home: out.HostIf})
	}
	return out, err
}

// plumb moves the VF into the pod; d.moves is held.
func (d *Datapath) plumb(ctx context.Context, req datapath.PlumbRequest) (datapath.Plumbed, error) {
	e := req.Endpoint
	out := datapath.Plumbed{MTU: datapath.EndpointMTU(req.Network, req.MTU), Gateways: datapath.Gateways(e, req.Network)}
	cfg := nl.LinkConfig{MAC: e.MAC, MTU: out.MTU, Addrs: e.IPs}
	for _, g := range out.Gateways {
		cfg.Routes = append(cfg.Routes, nl.LinkRoute{Gw: g})
	}
	pod, err := d.open(req.NetNS)
	if err != nil {
		return datapath.Plumbed{}, fmt.Errorf("dpu-host datapath: endpoint %s: %w", e.Name, err)
	}
	defer pod.Close()
	if l, err := pod.LinkByName(req.IfName); err == nil {
		if ep, home, ok := parseMark(l.Alias); ok && ep == e.Name {
			out.HostIf = home
			return out, d.count(nl.Configure(pod, req.IfName, cfg))
		}
		return datapath.Plumbed{}, fmt.Errorf("dpu-host datapath: endpoint %s: the pod already has an interface %s", e.Name, req.IfName)
	}
	home, err := d.vfs.Netdev(ctx, e.PF, e.VFIndex)
	if err != nil {
		return datapath.Plumbed{}, fmt.Errorf("dpu-host datapath: endpoint %s: %w", e.Name, err)
	}
	out.HostIf = home
	l, err := d.host.LinkByName(home)
	if err != nil {
		return datapath.Plumbed{}, fmt.Errorf("dpu-host datapath: endpoint %s: VF %d of %s (netdev %s) is not in the host namespace: %w", e.Name, e.VFIndex, e.PF, home, err)
	}
	if ep, _, ok := parseMark(l.Alias); ok && ep != e.Name {
		return datapath.Plumbed{}, fmt.Errorf("dpu-host datapath: endpoint %s: VF %d of %s is marked as endpoint %s's", e.Name, e.VFIndex, e.PF, ep)
	}
	var undo []func() error
	fail := func(err error) (datapath.Plumbed, error) {
		var errs []error
		for i := len(undo) - 1; i >= 0; i-- {
			errs = append(errs, undo[i]())
		}
		if uerr := errors.Join(errs...); uerr != nil {
			d.log.Error("giving a VF back after a failed plumb", "endpoint", e.Name, "vf", home, "err", uerr)
		}
		return datapath.Plumbed{}, fmt.Errorf("dpu-host datapath: endpoint %s: VF %s into the pod: %w", e.Name, home, err)
	}
	in := func(k nl.Kernel, name string, f func(l nl.Link) error) func() error {
		return func() error {
			l, err := k.LinkByName(name)
			if err != nil {
				return err
			}
			return f(l)
		}
	}
	steps := []struct {
		do, undo func() error
	}{
		{func() error { return d.host.SetDown(l.Index) }, nil},
		{func() error { return d.host.SetAlias(l.Index, mark(e.Name, home)) }, in(d.host, home, func(l nl.Link) error { return d.host.SetAlias(l.Index, "") })},
		{func() error { return d.host.MoveLink(l.Index, pod) }, in(pod, home, func(l nl.Link) error { return pod.MoveLink(l.Index, d.host) })},
		{in(pod, home, func(l nl.Link) error { return pod.Rename(l.Index, req.IfName) }), in(pod, req.IfName, func(l nl.Link) error { return pod.Rename(l.Index, home) })},
		{func() error { return nl.Configure(pod, req.IfName, cfg) }, nil},
	}
	for _, s := range steps {
		if err := d.count(s.do()); err != nil {
			return fail(err)
		}
		if s.undo != nil {
			undo = append(undo, s.undo)
		}
	}
	d.log.Info("VF moved into the pod", "endpoint", e.Name, "vf", home, "netns", req.NetNS, "ifname", req.IfName)
	return out, nil
}

// Unplumb implements datapath.Datapath: the VF goes back to the host
// under its name, its mark cleared. A VF in no namespace in reach (its
// pod's is gone) is not an error.
func (d *Datapath) Unplumb(_ context.Context, req datapath.UnplumbRequest) error {
	d.moves.Lock()
	defer d.moves.Unlock()
	if err := d.unplumb(req); err != nil {
		return err
	}
	return d.placed(req.Endpoint.Name, placement{})
}

// unplumb brings the VF home; d.moves is held.
func (d *Datapath) unplumb(req datapath.UnplumbRequest) error {
	name := req.Endpoint.Name
	if req.NetNS != "" {
		pod, err := d.open(req.NetNS)
		switch {
		case errors.Is(err, nl.ErrNoNetNS):
		case err != nil:
			return fmt.Errorf("dpu-host datapath: endpoint %s: %w", name, err)
		default:
			done, err := d.fromPod(pod, name)
			pod.Close()
			if done || err != nil {
				return err
			}
		}
	}
	// Back in the host already (the kernel returns a VF whose namespace
	// was destroyed): clear its mark.
	devs, err := d.host.Links()
	if err != nil {
		return fmt.Errorf("dpu-host datapath: endpoint %s: %w", name, err)
	}
	for _, l := range devs {
		if ep, home, ok := parseMark(l.Alias); ok && ep == name {
			if l.Name != home {
				if err := d.count(d.host.Rename(l.Index, home)); err != nil {
					return err
				}
			}
			return d.count(d.host.SetAlias(l.Index, ""))
		}
	}
	return nil
}

// fromPod brings the endpoint's VF home from its pod, if the pod holds
// it (done).
func (d *Datapath) fromPod(pod nl.Kernel, name string) (done bool, err error) {
	devs, err := pod.Links()
	if err != nil {
		return false, fmt.Errorf("dpu-host datapath: endpoint %s: %w", name, err)
	}
	for _, l := range devs {
		ep, home, ok := parseMark(l.Alias)
		if !ok || ep != name {
			continue
		}
		if err := d.count(pod.Rename(l.Index, home)); err != nil {
			return true, fmt.Errorf("dpu-host datapath: endpoint %s: %w", name, err)
		}
		if err := d.count(pod.MoveLink(l.Index, d.host)); err != nil {
			return true, fmt.Errorf("dpu-host datapath: endpoint %s: VF %s back home: %w", name, home, err)
		}
		back, err := d.host.LinkByName(home)
		if err != nil {
			return true, fmt.Errorf("dpu-host datapath: endpoint %s: VF %s back home: %w", name, home, err)
		}
		return true, d.count(d.host.SetAlias(back.Index, ""))
	}
	return false, nil
}

func (d *Datapath) count(err error) error {
	d.mu.Lock()
	d.writes++
	d.mu.Unlock()
	return err
}

// Counters implements datapath.Datapath: the host forwards nothing; its
// DPU counts the endpoints' traffic on their representors.
func (d *Datapath) Counters(plan.Plan) (datapath.Counters, error) { return datapath.Counters{}, nil }

// Writes implements datapath.Datapath.
func (d *Datapath) Writes() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.writes
}

// Collectors implements datapath.Datapath: none.
func (d *Datapath) Collectors() []prometheus.Collector { return nil }

// Close implements datapath.Datapath: the host namespace's handle.
func (d *Datapath) Close() { d.host.Close() }
