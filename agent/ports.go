package agent

import (
	"context"
	"maps"
	"net"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/skiff-sdn/skiff/agent/dhcp"
	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/plan"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// VM ports (endpoints of kind tap or vfio) have no namespace to be
// plumbed into, and nobody waits on the node to plumb them: the plan is
// enough. Every reconcile makes the datapath plumb the VM ports of the
// plan (Plumb is idempotent) before Apply attaches them, and unplumb
// those that left it after Apply removed their rules; level-triggered, so a restarted agent finds its
// taps as it left them and a port created or deleted while it was away
// is plumbed or removed at its first reconcile. What was plumbed goes to
// the controller (ReportPorts), to the local API's answers, and to the
// DHCP responder, which answers the guests on the ports' host
// interfaces.

// portTimeout bounds the plumbing of the VM ports in one reconcile.
const portTimeout = 30 * time.Second

// vmPort is a VM port as this agent plumbed it.
type vmPort struct {
	ep     plan.Endpoint
	out    datapath.Plumbed
	err    error // the last Plumb's
	status *skiffv1.PortStatus
}

// plumbPorts plumbs p's VM ports and unplumbs those whose kind or VF
// changed (their old plumbing is in the way). Ports that left p stay as
// they are: releasePorts unplumbs them after the Apply that removed
// their rules, so a tap or a VF is never given back while rules still
// send traffic to it. It runs on the reconcile loop only.
func (a *Agent) plumbPorts(p plan.Plan) {
	ctx, cancel := context.WithTimeout(context.Background(), portTimeout)
	defer cancel()
	a.portMu.Lock()
	old := maps.Clone(a.ports)
	a.portMu.Unlock()
	next := map[string]*vmPort{}
	for _, name := range slices.Sorted(maps.Keys(old)) {
		st := old[name]
		e, ok := p.Local[name]
		if !ok || !datapath.IsVMPort(e.Kind) || e.Kind == st.ep.Kind && e.PF == st.ep.PF && e.VFIndex == st.ep.VFIndex {
			next[name] = st // unchanged, or left the plan (releasePorts)
			continue
		}
		if err := a.dp.Unplumb(ctx, datapath.UnplumbRequest{Endpoint: st.ep}); err != nil {
			a.log.Error("unplumbing a VM port", "endpoint", name, "err", err)
			next[name] = st // tried again at the next reconcile
			continue
		}
		a.log.Info("VM port unplumbed", "endpoint", name, "hostIf", st.out.HostIf)
	}
	for _, name := range slices.Sorted(maps.Keys(p.Local)) {
		e := p.Local[name]
		if !datapath.IsVMPort(e.Kind) {
			continue
		}
		if st, ok := next[name]; ok && st.ep.Kind != e.Kind {
			continue // its old plumbing could not be removed yet
		}
		st := &vmPort{ep: e}
		if prev, had := next[name]; had {
			st.status = prev.status // so that only a change is reported
		}
		n, ok := p.Networks[e.Network]
		if !ok {
			continue // the network reaches the plan with it
		}
		st.out, st.err = a.dp.Plumb(ctx, datapath.PlumbRequest{Endpoint: e, Network: n})
		if prev, had := next[name]; st.err != nil && (!had || prev.err == nil || prev.err.Error() != st.err.Error()) {
			a.log.Error("plumbing a VM port", "endpoint", name, "kind", e.Kind, "err", st.err)
		} else if st.err == nil && (!had || !samePlumbed(prev.out, st.out)) {
			a.log.Info("VM port plumbed", "endpoint", name, "kind", e.Kind, "hostIf", st.out.HostIf, "pci", st.out.PCIAddress)
		}
		next[name] = st
	}
	a.portMu.Lock()
	a.ports, a.portsRev = next, p.Revision
	a.portMu.Unlock()
}

// releasePorts unplumbs, after the Apply of p, the VM ports that left p:
// their rules are gone by then. A port that cannot be unplumbed stays
// and is tried again at the next reconcile. It runs on the reconcile
// loop only.
func (a *Agent) releasePorts(p plan.Plan) {
	a.portMu.Lock()
	cur := maps.Clone(a.ports)
	a.portMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), portTimeout)
	defer cancel()
	for _, name := range slices.Sorted(maps.Keys(cur)) {
		if e, ok := p.Local[name]; ok && datapath.IsVMPort(e.Kind) {
			continue
		}
		st := cur[name]
		if err := a.dp.Unplumb(ctx, datapath.UnplumbRequest{Endpoint: st.ep}); err != nil {
			a.log.Error("unplumbing a VM port", "endpoint", name, "err", err)
			continue
		}
		a.log.Info("VM port unplumbed", "endpoint", name, "hostIf", st.out.HostIf)
		a.portMu.Lock()
		delete(a.ports, name)
		a.portMu.Unlock()
	}
}

// portsApplied records, after an Apply of p, each VM port's status, hands
// the ports' leases to the DHCP responder, and wakes the reporter when a
// status changed.
func (a *Agent) portsApplied(p plan.Plan) {
	a.portMu.Lock()
	changed := !a.portsKnown
	a.portsKnown = true
	var leases []dhcp.Port
	for name, st := range a.ports {
		if _, ok := p.Local[name]; !ok {
			continue // left the plan; not unplumbed yet (releasePorts)
		}
		s := &skiffv1.PortStatus{HostIf: st.out.HostIf, PciAddress: st.out.PCIAddress, VfioGroup: st.out.VFIOGroup, PlanRevision: p.Revision}
		switch ready, why := a.dp.Ready(name); {
		case st.err != nil:
			s.Error = st.err.Error()
		case !ready:
			s.Reason = why
		default:
			s.Ready = true
		}
		if st.status == nil || !proto.Equal(withoutRevision(st.status), withoutRevision(s)) {
			changed = true
		}
		st.status = s
		if st.err == nil && st.out.HostIf != "" {
			if l, ok := leaseOf(st.ep, p); ok {
				leases = append(leases, dhcp.Port{Endpoint: name, Interface: st.out.HostIf, Lease: l})
			}
		}
	}
	a.portMu.Unlock()
	if err := a.dhcp.Set(leases); err != nil {
		a.log.Warn("DHCP responder: some VM ports are not served", "err", err)
	}
	if changed {
		select {
		case a.portsSig <- struct{}{}:
		default:
		}
	}
}

// samePlumbed reports whether two plumbings of a port are the same.
func samePlumbed(a, b datapath.Plumbed) bool {
	return a.HostIf == b.HostIf && a.MTU == b.MTU && a.PCIAddress == b.PCIAddress && a.VFIOGroup == b.VFIOGroup && slices.Equal(a.Gateways, b.Gateways)
}

func withoutRevision(s *skiffv1.PortStatus) *skiffv1.PortStatus {
	c := proto.Clone(s).(*skiffv1.PortStatus)
	c.PlanRevision = 0
	return c
}

// leaseOf is what the DHCP responder gives a VM port's guest: its IPv4
// address, its subnet's gateway and DNS servers, its network's MTU and
// gateway MAC. false: the port has no IPv4 address (an L2-only network,
// the guest addresses itself).
func leaseOf(e plan.Endpoint, p plan.Plan) (dhcp.Lease, bool) {
	n, ok := p.Networks[e.Network]
	mac, err := net.ParseMAC(e.MAC)
	if !ok || err != nil {
		return dhcp.Lease{}, false
	}
	srv, _ := net.ParseMAC(datapath.GatewayMAC(n.VNI))
	for _, ip := range e.IPs {
		if !ip.Addr().Is4() {
			continue
		}
		l := dhcp.Lease{MAC: mac, Addr: ip, ServerMAC: srv, MTU: datapath.EndpointMTU(n, 0)}
		for _, s := range n.Subnets {
			if s.CIDR.Contains(ip.Addr()) {
				l.Gateway, l.DNS = s.Gateway, s.DNS
			}
		}
		return l, true
	}
	return dhcp.Lease{}, false
}

// reportPorts sends the VM ports' statuses to the controller whenever
// they change and after every reconnection, until ctx ends; a failed
// report is sent again a second later.
func (a *Agent) reportPorts(ctx context.Context) {
	reportOnSignal(ctx, a.portsSig, func(ctx context.Context) error {
		a.portMu.Lock()
		known := a.portsKnown
		req := &skiffv1.ReportPortsRequest{Node: a.cfg.Node}
		for _, name := range slices.Sorted(maps.Keys(a.ports)) {
			if st := a.ports[name].status; st != nil {
				s := proto.Clone(st).(*skiffv1.PortStatus)
				s.Time = timestamppb.Now()
				req.Ports = append(req.Ports, &skiffv1.PortReport{Endpoint: name, Status: s})
			}
		}
		a.portMu.Unlock()
		if !known {
			return nil // nothing reconciled yet: an empty report would erase statuses
		}
		_, err := a.client.ReportPorts(ctx, req)
		if err != nil {
			a.log.Debug("reporting VM ports; retrying", "ports", len(req.Ports), "err", err)
		}
		return err
	})
}

// reportOnSignal calls send on every signal until ctx ends, with a
// context of 5 s; a send that fails is tried again a second later.
func reportOnSignal(ctx context.Context, sig <-chan struct{}, send func(ctx context.Context) error) {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sig:
		case <-retry.C:
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := send(rctx)
		cancel()
		if err != nil {
			retry.Reset(time.Second)
		}
	}
}

// kickPorts asks for a port report (after a reconnection).
func (a *Agent) kickPorts() {
	select {
	case a.portsSig <- struct{}{}:
	default:
	}
}

// port returns what this agent plumbed of a VM port.
func (a *Agent) port(name string) (vmPort, bool) {
	a.portMu.Lock()
	defer a.portMu.Unlock()
	st, ok := a.ports[name]
	if !ok {
		return vmPort{}, false
	}
	return *st, true
}

// portDNS lists the DNS servers of the subnets holding a port's
// addresses.
func portDNS(e plan.Endpoint, n plan.Network) []string {
	var out []string
	for _, ip := range e.IPs {
		for _, s := range n.Subnets {
			if s.CIDR.Contains(ip.Addr()) {
				for _, d := range s.DNS {
					out = append(out, d.String())
				}
			}
		}
	}
	return slices.Compact(out)
}
