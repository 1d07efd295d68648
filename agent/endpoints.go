package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/plan"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

var ifNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,15}$`)

// createTimeout bounds a create: the controller's answer, the plan
// reaching this node, plumbing and attachment.
const createTimeout = 60 * time.Second

// localErr maps a controller error to a local API error.
func localErr(op string, err error) error {
	code := map[codes.Code]string{
		codes.InvalidArgument: localapi.CodeInvalid, codes.NotFound: localapi.CodeNotFound, codes.AlreadyExists: localapi.CodeExists,
		codes.ResourceExhausted: localapi.CodeExhausted, codes.Unavailable: localapi.CodeUnavailable, codes.FailedPrecondition: localapi.CodeInvalid,
		codes.DeadlineExceeded: localapi.CodeUnavailable, codes.PermissionDenied: localapi.CodeForbidden,
	}[status.Code(err)]
	if code == "" {
		code = localapi.CodeFailed
	}
	msg := err.Error()
	if s, ok := status.FromError(err); ok {
		msg = s.Message()
		if s.Code() == codes.Unavailable {
			msg = "the controller is not reachable: " + msg
		}
	}
	return &localapi.Error{Code: code, Message: op + ": " + msg}
}

func invalid(format string, args ...any) error {
	return &localapi.Error{Code: localapi.CodeInvalid, Message: fmt.Sprintf(format, args...)}
}

func (a *Agent) validateCreate(r localapi.CreateRequest) error {
	kind := requestKind(r)
	switch {
	case r.Name == "":
		return invalid("name: required")
	case r.Network == "":
		return invalid("network: required")
	case r.MTU < 0 || r.MTU > 65535:
		return invalid("mtu: %d is out of range", r.MTU)
	}
	if r.VF != nil && (r.PF == "" || *r.VF < 0) {
		return invalid("vf: %d needs a pf and must be 0 or more", *r.VF)
	}
	switch kind {
	case plan.KindVeth, plan.KindVF, plan.KindTap, plan.KindVFIO:
	default:
		return invalid("kind: %q is not veth, vf, tap or vfio", r.Kind)
	}
	if datapath.IsVMPort(kind) {
		if err := validatePortCreate(r); err != nil {
			return err
		}
	} else {
		if !ifNameRE.MatchString(r.IfName) {
			return invalid("ifName: %q is not an interface name (1-15 of [A-Za-z0-9_.-])", r.IfName)
		}
		if st, err := os.Stat(r.NetNS); err != nil || st.IsDir() {
			return invalid("netns: %q is not a network namespace file", r.NetNS)
		}
		if r.MAC != "" {
			return invalid("mac: only for a VM port (kind tap or vfio); a pod's MAC is allocated")
		}
	}
	if !slices.Contains(a.dp.Kinds(), kind) {
		return invalid("kind %s: this node's datapath (mode %s) offers %v", kind, a.mode, a.dp.Kinds())
	}
	return nil
}

// requestKind is the endpoint kind a create asks for.
func requestKind(r localapi.CreateRequest) string {
	switch {
	case r.Kind != "":
		return r.Kind
	case r.VF != nil:
		return plan.KindVF
	}
	return plan.KindVeth
}

// Create implements localapi.Backend: the endpoint is created at the
// controller (which allocates its addresses), plumbed by the datapath once
// this node's plan holds it, and answered when the datapath reports it
// attached. Whatever fails undoes what was done.
func (a *Agent) Create(ctx context.Context, r localapi.CreateRequest) (*localapi.CreateResponse, error) {
	if why := dpuAway(a.current().DPU, time.Now()); why != "" {
		// Fail fast, before anything is asked or done: nothing would
		// plumb the endpoint's representor.
		return nil, &localapi.Error{Code: localapi.CodeUnavailable, Message: "create endpoint: " + why}
	}
	r, err := a.resolveDevice(ctx, r)
	if err != nil {
		return nil, err
	}
	if err := a.validateCreate(r); err != nil {
		return nil, err
	}
	if datapath.IsVMPort(requestKind(r)) {
		return a.createPort(ctx, r)
	}
	ctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	want := &skiffv1.Endpoint{Name: r.Name, Network: r.Network, Node: a.cfg.Node, Kind: requestKind(r), Labels: r.Labels, Owner: r.Owner, Namespace: r.Namespace}
	if r.VF != nil {
		vf := int32(*r.VF)
		want.Pf, want.VfIndex = r.PF, &vf
	}
	ep, err := a.createAtController(ctx, want)
	if err != nil {
		return nil, localErr("create endpoint", err)
	}
	var plumbed bool
	var local plan.Endpoint
	undo := func(cause error) error {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer dcancel()
		var errs []error
		if plumbed {
			errs = append(errs, a.dp.Unplumb(dctx, datapath.UnplumbRequest{Endpoint: local, NetNS: r.NetNS, IfName: r.IfName}))
		}
		if _, err := a.client.DeleteEndpoint(dctx, &skiffv1.DeleteRequest{Name: r.Name}); err != nil && status.Code(err) != codes.NotFound {
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err != nil {
			a.log.Error("rolling back endpoint", "endpoint", r.Name, "err", err)
		}
		a.resync()
		return cause
	}
	// The plan must hold the endpoint and its network before it is
	// plumbed.
	var netw plan.Network
	if err := a.waitPlan(ctx, func(p plan.Plan) bool {
		e, ok := p.Local[r.Name]
		n, nok := p.Networks[r.Network]
		netw, local = n, e
		return ok && nok && p.Revision >= ep.Revision
	}); err != nil {
		return nil, undo(&localapi.Error{Code: localapi.CodeUnavailable, Message: fmt.Sprintf("endpoint %s did not reach this node's plan: %v", r.Name, err)})
	}
	out, err := a.dp.Plumb(ctx, datapath.PlumbRequest{Endpoint: local, Network: netw, NetNS: r.NetNS, IfName: r.IfName, MTU: r.MTU})
	if err != nil {
		return nil, undo(&localapi.Error{Code: localapi.CodeFailed, Message: fmt.Sprintf("plumbing %s: %v", r.Name, err)})
	}
	plumbed = true
	if err := a.waitReady(ctx, r.Name); err != nil {
		return nil, undo(&localapi.Error{Code: localapi.CodeFailed, Message: fmt.Sprintf("datapath did not attach %s: %v", out.HostIf, err)})
	}
	resp := &localapi.CreateResponse{Name: r.Name, Network: r.Network, HostIf: out.HostIf, IfName: r.IfName, MAC: local.MAC, MTU: out.MTU, Revision: ep.Revision}
	resp.IPs, resp.Gateways = addresses(local, netw)
	a.log.Info("endpoint plumbed", "endpoint", r.Name, "hostIf", out.HostIf, "ips", resp.IPs)
	return resp, nil
}

// createAtController creates the endpoint at the controller, first
// finishing a delete of the same name that waits for it (the runtime
// retrying the same container), or the create would find the old one.
func (a *Agent) createAtController(ctx context.Context, want *skiffv1.Endpoint) (*skiffv1.Endpoint, error) {
	a.pendOp.RLock()
	defer a.pendOp.RUnlock()
	if a.isPending(want.Name) {
		if done, err := a.finishPending(ctx, want.Name); !done {
			return nil, fmt.Errorf("an earlier delete of %s is not finished: %w", want.Name, err)
		}
	}
	return a.client.CreateEndpoint(ctx, &skiffv1.CreateEndpointRequest{Endpoint: want})
}

// deleteWait bounds how long a local delete waits for the controller
// before it records the controller-side delete for later.
const deleteWait = 3 * time.Second

// Delete implements localapi.Backend: idempotent. The interface is
// removed at once; the controller-side delete is finished later when the
// controller cannot be reached now (pending.go), so a pod's deletion never
// waits for the controller.
func (a *Agent) Delete(ctx context.Context, r localapi.DeleteRequest) error {
	name := r.Name
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	e, ok := a.current().Local[name]
	if !ok {
		e = plan.Endpoint{Name: name, VFIndex: -1}
	}
	if _, plumbed := a.port(name); plumbed || datapath.IsVMPort(e.Kind) {
		return a.deletePort(ctx, name)
	}
	if err := a.dp.Unplumb(ctx, datapath.UnplumbRequest{Endpoint: e, NetNS: r.NetNS, IfName: r.IfName}); err != nil {
		return &localapi.Error{Code: localapi.CodeFailed, Message: err.Error()}
	}
	a.resync()
	if a.isPending(name) {
		return nil
	}
	cctx, ccancel := context.WithTimeout(ctx, deleteWait)
	_, err := a.client.DeleteEndpoint(cctx, &skiffv1.DeleteRequest{Name: name})
	ccancel()
	switch {
	case err == nil || status.Code(err) == codes.NotFound:
		return nil
	case unreachable(err):
		if perr := a.addPending(name); perr != nil {
			return &localapi.Error{Code: localapi.CodeFailed, Message: fmt.Sprintf("delete endpoint: the controller is not reachable (%v) and the delete could not be recorded: %v", err, perr)}
		}
		a.log.Warn("controller not reachable: the interface is removed, the endpoint's delete is recorded and finished when it returns", "endpoint", name, "err", err)
		return nil
	}
	return localErr("delete endpoint", err)
}

// List implements localapi.Backend: this node's endpoints in the current
// plan, sorted by name.
func (a *Agent) List() []localapi.Endpoint {
	p := a.current()
	out := []localapi.Endpoint{}
	for _, name := range slices.Sorted(maps.Keys(p.Local)) {
		e := p.Local[name]
		le := localapi.Endpoint{Name: name, Network: e.Network, Owner: e.Owner, Labels: e.Labels, HostIf: datapath.HostIfName(name), Kind: e.Kind, MAC: e.MAC}
		for _, ip := range e.IPs {
			le.IPs = append(le.IPs, ip.String())
		}
		if st, ok := a.port(name); ok && st.out.HostIf != "" {
			le.HostIf, le.PCIAddress, le.VFIOGroup = st.out.HostIf, st.out.PCIAddress, st.out.VFIOGroup
		}
		out = append(out, le)
	}
	return out
}

// Status implements localapi.Backend.
func (a *Agent) Status() localapi.Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := localapi.Status{Connected: a.isConnected, Revision: a.plan.Revision, Applied: a.appliedRev}
	switch {
	case !a.hasPlan:
		s.Reason = "no plan from the controller yet"
	case !a.isConnected:
		s.Reason = "not connected to the controller " + a.cfg.Controller
	case a.healthy != nil:
		s.Reason = "datapath: " + a.healthy.Error()
	case dpuAway(a.plan.DPU, time.Now()) != "":
		s.Reason = dpuAway(a.plan.DPU, time.Now())
	default:
		s.Ready = true
	}
	return s
}

// waitPlan waits until cond holds for the current plan.
func (a *Agent) waitPlan(ctx context.Context, cond func(plan.Plan) bool) error {
	for {
		a.mu.Lock()
		ok := cond(a.plan)
		ch := a.changed
		a.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitReady asks for a reconcile and waits until the datapath reports the
// endpoint attached. Every reconcile ends by waking the waiters (pushed;
// nothing polls). A reconcile already under way (one a netlink event about
// the new interface started, say) may attach it first: the datapath's
// Ready counts only reconciles that began after the Plumb.
func (a *Agent) waitReady(ctx context.Context, endpoint string) error {
	a.resyncNow()
	for {
		a.mu.Lock()
		ch := a.changed
		a.mu.Unlock()
		if ok, _ := a.dp.Ready(endpoint); ok {
			return nil
		}
		if err := a.dpuProblem(endpoint); err != nil {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			_, why := a.dp.Ready(endpoint)
			return fmt.Errorf("%w (%s)", ctx.Err(), why)
		}
	}
}
