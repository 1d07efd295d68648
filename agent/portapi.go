package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/internal/plan"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// The local API's side of VM ports: the endpoint is created at the
// controller, and the reconcile loop plumbs it from the plan (ports.go);
// a create waits for that, a delete waits until the reconcile loop has
// removed it, so that the caller finds the tap there, or gone.

// validatePortCreate checks what only a VM port's create needs.
func validatePortCreate(r localapi.CreateRequest) error {
	kind := requestKind(r)
	switch {
	case r.NetNS != "":
		return invalid("netns: a VM port (kind %s) goes into no namespace; the hypervisor attaches the guest to it", kind)
	case r.IfName != "":
		return invalid("ifName: a VM port (kind %s) has no interface name in a namespace; the guest names its own", kind)
	case !strings.HasPrefix(r.Owner, "vm:") || r.Owner == "vm:":
		return invalid("owner: a VM port (kind %s) is owned by its VM: want vm:ID, got %q", kind, r.Owner)
	case kind == plan.KindTap && (r.PF != "" || r.VF != nil):
		return invalid("pf: only for kind vf or vfio, not tap")
	}
	return nil
}

// createPort creates a VM port and returns once this node has plumbed it
// and attached it to its network. A failure deletes the port again and
// waits until its tap (or VF) is gone.
func (a *Agent) createPort(ctx context.Context, r localapi.CreateRequest) (*localapi.CreateResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	want := &skiffv1.Endpoint{Name: r.Name, Network: r.Network, Node: a.cfg.Node, Kind: requestKind(r), Mac: r.MAC, Labels: r.Labels,
		Owner: r.Owner, Namespace: r.Namespace, Pf: r.PF}
	if r.VF != nil {
		vf := int32(*r.VF)
		want.VfIndex = &vf
	}
	ep, err := a.client.CreateEndpoint(ctx, &skiffv1.CreateEndpointRequest{Endpoint: want})
	if err != nil {
		return nil, localErr("create port", err)
	}
	st, err := a.waitPort(ctx, r.Name, ep.Revision)
	if err != nil {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer dcancel()
		if derr := a.deletePort(dctx, r.Name); derr != nil {
			a.log.Error("rolling back a VM port", "endpoint", r.Name, "err", derr)
		}
		return nil, err
	}
	p := a.current()
	local, n := p.Local[r.Name], p.Networks[r.Network]
	resp := &localapi.CreateResponse{Name: r.Name, Network: r.Network, HostIf: st.out.HostIf, MAC: local.MAC, MTU: st.out.MTU,
		Revision: ep.Revision, Kind: local.Kind, PCIAddress: st.out.PCIAddress, VFIOGroup: st.out.VFIOGroup, DNS: portDNS(local, n)}
	resp.IPs, resp.Gateways = addresses(local, n)
	a.log.Info("VM port created", "endpoint", r.Name, "owner", r.Owner, "hostIf", resp.HostIf, "mac", resp.MAC, "ips", resp.IPs)
	return resp, nil
}

// waitPort waits until a reconcile of a plan at rev or later has plumbed
// port name and the datapath attached it, and returns what it plumbed;
// a plumbing error ends the wait at once.
func (a *Agent) waitPort(ctx context.Context, name string, rev int64) (vmPort, error) {
	a.resync()
	var cur vmPort
	var seen bool
	err := a.waitPorts(ctx, func() bool {
		st, ok := a.ports[name]
		if ok {
			cur = *st
		}
		seen = ok && st.status != nil && st.status.PlanRevision >= rev && a.portsRev >= rev
		return seen && (cur.err != nil || cur.status.Ready)
	})
	switch {
	case err != nil:
		why := "it did not reach this node's plan"
		if cur.status != nil {
			why = "not attached: " + cur.status.Reason
		}
		return vmPort{}, &localapi.Error{Code: localapi.CodeUnavailable, Message: fmt.Sprintf("port %s: %s (%v); the port was deleted", name, why, err)}
	case cur.err != nil:
		return vmPort{}, &localapi.Error{Code: localapi.CodeFailed, Message: fmt.Sprintf("plumbing port %s: %v; the port was deleted", name, cur.err)}
	}
	return cur, nil
}

// deletePort deletes a VM port at the controller and waits until the
// reconcile loop has removed its tap (or given its VF back). Idempotent.
func (a *Agent) deletePort(ctx context.Context, name string) error {
	if _, err := a.client.DeleteEndpoint(ctx, &skiffv1.DeleteRequest{Name: name}); err != nil && status.Code(err) != codes.NotFound {
		return localErr("delete port", err)
	}
	// The first plan without the port, then a reconcile of it.
	var gone int64
	if err := a.waitPlan(ctx, func(p plan.Plan) bool {
		_, ok := p.Local[name]
		gone = p.Revision
		return !ok
	}); err != nil {
		return &localapi.Error{Code: localapi.CodeUnavailable, Message: fmt.Sprintf("port %s: its deletion did not reach this node's plan: %v", name, err)}
	}
	a.resync()
	var left *vmPort
	err := a.waitPorts(ctx, func() bool {
		left = a.ports[name]
		return a.portsRev >= gone && left == nil
	})
	if err != nil {
		why := errors.New("no reconcile since")
		if left != nil && left.err != nil {
			why = left.err
		}
		return &localapi.Error{Code: localapi.CodeFailed, Message: fmt.Sprintf("port %s: removing it: %v (%v)", name, why, err)}
	}
	return nil
}

// waitPorts waits until cond, called with portMu held (inside mu) after
// every reconcile, returns true.
func (a *Agent) waitPorts(ctx context.Context, cond func() bool) error {
	return a.waitPlan(ctx, func(plan.Plan) bool {
		a.portMu.Lock()
		defer a.portMu.Unlock()
		return cond()
	})
}

// addresses lists an endpoint's addresses (CIDR form) and, for each, its
// subnet's gateway ("" when none).
func addresses(e plan.Endpoint, n plan.Network) (ips, gateways []string) {
	for _, ip := range e.IPs {
		ips = append(ips, ip.String())
		gw := ""
		for _, s := range n.Subnets {
			if s.CIDR.Contains(ip.Addr()) && s.Gateway.IsValid() {
				gw = s.Gateway.String()
			}
		}
		gateways = append(gateways, gw)
	}
	return ips, gateways
}
