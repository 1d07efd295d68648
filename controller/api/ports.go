package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/skiff-sdn/skiff/controller/store"
	"github.com/skiff-sdn/skiff/internal/plan"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// portWait bounds how long CreatePort waits for the node to plumb a port
// (within the caller's deadline).
const portWait = 60 * time.Second

// maxPortIndex bounds the default names VM-0 .. VM-N tried for a VM's
// ports.
const maxPortIndex = 64

// CreatePort implements skiffv1.ManagementServiceServer: a VM port is an
// endpoint of kind tap or vfio owned by vm:ID. Unless NoWait, it returns
// once the node's agent reports the port plumbed and attached; a port the
// node fails to plumb, or does not plumb in time, is deleted again.
func (m *Management) CreatePort(ctx context.Context, r *skiffv1.CreatePortRequest) (*skiffv1.Endpoint, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	kind := r.GetKind()
	if kind == "" {
		kind = plan.KindTap
	}
	if !store.IsPort(kind) {
		return nil, status.Errorf(codes.InvalidArgument, "kind: %q is not a VM port kind (tap or vfio)", kind)
	}
	if err := store.ValidateName("vm", r.GetVm()); err != nil {
		return nil, grpcError("create port", err)
	}
	e := &skiffv1.Endpoint{Name: r.GetName(), Network: r.GetNetwork(), Node: r.GetNode(), Kind: kind, Mac: r.GetMac(),
		Labels: r.GetLabels(), Owner: store.VMPrefix + r.GetVm(), Namespace: r.GetNamespace(), Pf: r.GetPf(), VfIndex: r.VfIndex}
	if !r.GetNoWait() {
		// A port nobody will plumb is refused before anything is stored.
		n, err := m.store.GetNode(ctx, r.GetNode())
		if err == nil && !n.GetConnected() {
			return nil, status.Errorf(codes.Unavailable, "node: the agent of node %q is not connected; nothing would plumb the port (no_wait stores it anyway)", r.GetNode())
		}
	}
	created, err := m.createPortNamed(ctx, e, r.GetName() == "")
	if err != nil {
		return nil, grpcError("create port", err)
	}
	m.log.Info("port created", "port", created.Name, "vm", r.GetVm(), "node", created.Node, "kind", created.Kind, "ips", created.Ips)
	if r.GetNoWait() {
		return created, nil
	}
	wctx, cancel := context.WithTimeout(ctx, portWait)
	defer cancel()
	st, err := m.store.WaitPort(wctx, created.Name, func(st *skiffv1.PortStatus) bool { return st.Ready || st.Error != "" })
	if err == nil && st.Ready {
		created.Port = st
		return created, nil
	}
	why := "the node did not report it plumbed"
	switch {
	case err == nil:
		why = "node " + created.Node + " could not plumb it: " + st.Error
	case errors.Is(err, store.ErrNotFound):
		return nil, grpcError("create port", err)
	case wctx.Err() != nil:
		last, _ := m.portStatus(context.WithoutCancel(ctx), created.Name)
		why = fmt.Sprintf("node %s did not report it plumbed within %v", created.Node, portWait)
		if last != nil && last.Reason != "" {
			why += " (last: " + last.Reason + ")"
		}
	}
	// Nothing half-made: the port goes, and its node unplumbs it.
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer dcancel()
	if derr := m.store.DeleteEndpoint(dctx, created.Name); derr != nil && !errors.Is(derr, store.ErrNotFound) {
		m.log.Error("deleting a port that was not plumbed", "port", created.Name, "err", derr)
	}
	code := codes.FailedPrecondition
	if err != nil {
		code = codes.DeadlineExceeded
	}
	return nil, status.Errorf(code, "create port: %s; the port was deleted", why)
}

// createPortNamed stores e; with auto, its name is the VM's first free
// VM-N.
func (m *Management) createPortNamed(ctx context.Context, e *skiffv1.Endpoint, auto bool) (*skiffv1.Endpoint, error) {
	if !auto {
		return m.store.CreateEndpoint(ctx, e)
	}
	vm := store.VMOf(e)
	for i := range maxPortIndex {
		e.Name = fmt.Sprintf("%s-%d", vm, i)
		out, err := m.store.CreateEndpoint(ctx, e)
		var se *store.Error
		if errors.As(err, &se) && se.Kind == store.AlreadyExists && se.Field == "name" {
			continue
		}
		return out, err
	}
	return nil, status.Errorf(codes.ResourceExhausted, "name: VM %q has no free port name %s-0..%s-%d; give --name", vm, vm, vm, maxPortIndex-1)
}

func (m *Management) portStatus(ctx context.Context, name string) (*skiffv1.PortStatus, error) {
	e, err := m.store.GetEndpoint(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := m.store.FillPortStatus(ctx, e); err != nil {
		return nil, err
	}
	return e.Port, nil
}

// ListPorts implements skiffv1.ManagementServiceServer.
func (m *Management) ListPorts(ctx context.Context, r *skiffv1.ListPortsRequest) (*skiffv1.ListEndpointsResponse, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	ports, err := m.store.ListPorts(ctx, r.GetVm(), r.GetNode())
	if err != nil {
		return nil, grpcError("list ports", err)
	}
	if r.GetVm() != "" && len(ports) == 0 {
		return nil, status.Errorf(codes.NotFound, "vm: VM %q has no ports", r.GetVm())
	}
	if err := m.store.FillPortStatus(ctx, ports...); err != nil {
		return nil, grpcError("list ports", err)
	}
	m.counters.fill(ports...)
	return &skiffv1.ListEndpointsResponse{Endpoints: ports}, nil
}

// DeletePorts implements skiffv1.ManagementServiceServer.
func (m *Management) DeletePorts(ctx context.Context, r *skiffv1.DeletePortsRequest) (*skiffv1.DeletePortsResponse, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	var names []string
	switch {
	case (r.GetName() == "") == (r.GetVm() == ""):
		return nil, status.Error(codes.InvalidArgument, "name, vm: give exactly one (a port, or every port of a VM)")
	case r.GetName() != "":
		e, err := m.store.GetEndpoint(ctx, r.GetName())
		if err != nil {
			return nil, grpcError("delete port", err)
		}
		if !store.IsPort(e.Kind) {
			return nil, status.Errorf(codes.InvalidArgument, "name: %q is an endpoint of kind %s, not a VM port (skiffctl delete endpoint)", e.Name, e.Kind)
		}
		names = []string{e.Name}
	default:
		ports, err := m.store.ListPorts(ctx, r.GetVm(), "")
		if err != nil {
			return nil, grpcError("delete ports", err)
		}
		if len(ports) == 0 {
			return nil, status.Errorf(codes.NotFound, "vm: VM %q has no ports", r.GetVm())
		}
		for _, p := range ports {
			names = append(names, p.Name)
		}
	}
	out := &skiffv1.DeletePortsResponse{}
	for _, n := range names {
		if err := m.store.DeleteEndpoint(ctx, n); err != nil && !errors.Is(err, store.ErrNotFound) {
			return out, grpcError("delete port "+n, err)
		}
		out.Deleted = append(out.Deleted, n)
		m.log.Info("port deleted", "port", n)
	}
	return out, nil
}

// ReportPorts implements skiffv1.AgentServiceServer: a node speaks only
// for its own ports.
func (a *Agent) ReportPorts(ctx context.Context, r *skiffv1.ReportPortsRequest) (*skiffv1.ReportPortsResponse, error) {
	if err := authorizeNode(ctx, r.GetNode()); err != nil {
		return nil, err
	}
	if err := store.ValidateName("node", r.GetNode()); err != nil {
		return nil, grpcError("report ports", err)
	}
	if len(r.GetPorts()) > 10000 {
		return nil, status.Errorf(codes.InvalidArgument, "ports: at most 10000 per report, got %d", len(r.GetPorts()))
	}
	if err := a.store.SetPortStatus(ctx, r.GetNode(), r.GetPorts()); err != nil {
		return nil, grpcError("report ports", err)
	}
	return &skiffv1.ReportPortsResponse{}, nil
}
