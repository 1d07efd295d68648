package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/skiff-sdn/skiff/agent/datapath/software"
	"github.com/skiff-sdn/skiff/agent/localapi"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

var ifNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,15}$`)

// localErr maps a controller error to a local API error.
func localErr(op string, err error) error {
	code := map[codes.Code]string{
		codes.InvalidArgument: "invalid", codes.NotFound: "not-found", codes.AlreadyExists: "exists",
		codes.ResourceExhausted: "exhausted", codes.Unavailable: "unavailable", codes.FailedPrecondition: "invalid",
		codes.DeadlineExceeded: "unavailable", codes.PermissionDenied: "forbidden",
	}[status.Code(err)]
	if code == "" {
		code = "failed"
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

// Create implements localapi.Backend.
func (a *Agent) Create(ctx context.Context, r localapi.CreateRequest) (*localapi.CreateResponse, error) {
	switch {
	case r.Name == "":
		return nil, &localapi.Error{Code: "invalid", Message: "name: required"}
	case r.Network == "":
		return nil, &localapi.Error{Code: "invalid", Message: "network: required"}
	case !ifNameRE.MatchString(r.IfName):
		return nil, &localapi.Error{Code: "invalid", Message: fmt.Sprintf("ifName: %q is not an interface name (1-15 of [A-Za-z0-9_.-])", r.IfName)}
	case r.MTU < 0 || r.MTU > 65535:
		return nil, &localapi.Error{Code: "invalid", Message: fmt.Sprintf("mtu: %d is out of range", r.MTU)}
	}
	if r.VF != nil && (r.PF == "" || *r.VF < 0) {
		return nil, &localapi.Error{Code: "invalid", Message: fmt.Sprintf("vf: %d needs a pf and must be 0 or more", *r.VF)}
	}
	if st, err := os.Stat(r.NetNS); err != nil || st.IsDir() {
		return nil, &localapi.Error{Code: "invalid", Message: fmt.Sprintf("netns: %q is not a network namespace file", r.NetNS)}
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	want := &skiffv1.Endpoint{Name: r.Name, Network: r.Network, Node: a.cfg.Node, Kind: plan.KindVeth, Labels: r.Labels, Owner: r.Owner, Namespace: r.Namespace}
	if r.VF != nil {
		vf := int32(*r.VF)
		want.Kind, want.Pf, want.VfIndex = plan.KindVF, r.PF, &vf
	}
	ep, err := a.client.CreateEndpoint(ctx, &skiffv1.CreateEndpointRequest{Endpoint: want})
	if err != nil {
		return nil, localErr("create endpoint", err)
	}
	hostIf := software.HostIfName(r.Name)
	undo := func(cause error) error {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer dcancel()
		var errs []error
		if k, err := nl.Open(nl.Options{}); err == nil {
			errs = append(errs, nl.DeleteByName(k, hostIf))
		}
		if _, err := a.client.DeleteEndpoint(dctx, &skiffv1.DeleteRequest{Name: r.Name}); err != nil && status.Code(err) != codes.NotFound {
			errs = append(errs, err)
		}
		if err := errors.Join(errs...); err != nil {
			a.log.Error("rolling back endpoint", "endpoint", r.Name, "err", err)
		}
		return cause
	}
	// The plan must hold the endpoint and its network before we can plumb.
	var netw plan.Network
	var local plan.Endpoint
	if err := a.waitPlan(ctx, func(p plan.Plan) bool {
		e, ok := p.Local[r.Name]
		n, nok := p.Networks[r.Network]
		netw, local = n, e
		return ok && nok && p.Revision >= ep.Revision
	}); err != nil {
		return nil, undo(&localapi.Error{Code: "unavailable", Message: fmt.Sprintf("endpoint %s did not reach this node's plan: %v", r.Name, err)})
	}
	mtu := int(netw.MTU)
	if r.MTU > 0 && r.MTU < mtu {
		mtu = r.MTU
	}
	resp := &localapi.CreateResponse{Name: r.Name, Network: r.Network, HostIf: hostIf, IfName: r.IfName, MAC: local.MAC, MTU: mtu, Revision: ep.Revision}
	var gws []netip.Addr
	for _, ip := range local.IPs {
		resp.IPs = append(resp.IPs, ip.String())
		gw := ""
		for _, s := range netw.Subnets {
			if s.CIDR.Contains(ip.Addr()) && s.Gateway.IsValid() {
				gw = s.Gateway.String()
				gws = append(gws, s.Gateway)
			}
		}
		resp.Gateways = append(resp.Gateways, gw)
	}
	k, err := nl.Open(nl.Options{})
	if err != nil {
		return nil, undo(err)
	}
	if err := k.(nl.VethAPI).AddVeth(nl.Veth{Name: hostIf, Alias: software.HostIfAlias(r.Name), MTU: mtu, PeerName: r.IfName, PeerNS: r.NetNS}); err != nil {
		return nil, undo(&localapi.Error{Code: "failed", Message: err.Error()})
	}
	pk, err := nl.Open(nl.Options{NetNS: r.NetNS})
	if err != nil {
		return nil, undo(err)
	}
	if err := nl.Configure(pk, nl.Iface{Name: r.IfName, MAC: local.MAC, MTU: mtu, Addrs: local.IPs, Gateway: gws}); err != nil {
		return nil, undo(&localapi.Error{Code: "failed", Message: err.Error()})
	}
	// Done when the datapath has put the host side on the bridge (or,
	// offloaded, installed the endpoint's rules).
	if err := a.waitAttached(ctx, k, r.Name, hostIf, netw.VNI); err != nil {
		return nil, undo(&localapi.Error{Code: "failed", Message: fmt.Sprintf("datapath did not attach %s: %v", hostIf, err)})
	}
	a.log.Info("endpoint plumbed", "endpoint", r.Name, "hostIf", hostIf, "ips", resp.IPs)
	return resp, nil
}

// Delete implements localapi.Backend: idempotent.
func (a *Agent) Delete(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := a.client.DeleteEndpoint(ctx, &skiffv1.DeleteRequest{Name: name}); err != nil && status.Code(err) != codes.NotFound {
		return localErr("delete endpoint", err)
	}
	k, err := nl.Open(nl.Options{})
	if err != nil {
		return err
	}
	if err := nl.DeleteByName(k, software.HostIfName(name)); err != nil {
		return &localapi.Error{Code: "failed", Message: err.Error()}
	}
	a.resync()
	return nil
}

// List implements localapi.Backend: this node's endpoints in the current
// plan, sorted by name.
func (a *Agent) List() []localapi.Endpoint {
	p := a.current()
	out := []localapi.Endpoint{}
	for _, name := range slices.Sorted(maps.Keys(p.Local)) {
		e := p.Local[name]
		out = append(out, localapi.Endpoint{Name: name, Network: e.Network, Owner: e.Owner, Labels: e.Labels, HostIf: software.HostIfName(name)})
	}
	return out
}

// Status implements localapi.Backend.
func (a *Agent) Status() localapi.Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := localapi.Status{Connected: a.isConnected, Revision: a.plan.Revision}
	switch {
	case !a.hasPlan:
		s.Reason = "no plan from the controller yet"
	case !a.isConnected:
		s.Reason = "not connected to the controller " + a.cfg.Controller
	case a.healthy != nil:
		s.Reason = "datapath: " + a.healthy.Error()
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

// waitAttached asks for a reconcile and waits until hostIf is a port of the
// network's bridge, or, on the offload datapath, until the endpoint's decap
// rule is installed.
func (a *Agent) waitAttached(ctx context.Context, k nl.Kernel, endpoint, hostIf string, vni uint32) error {
	a.resync()
	for {
		a.mu.Lock()
		ch := a.changed
		a.mu.Unlock()
		if a.off != nil {
			if ok, _ := a.offloadReady(endpoint); ok {
				return nil
			}
			select {
			case <-ch:
			case <-time.After(200 * time.Millisecond):
			case <-ctx.Done():
				_, why := a.offloadReady(endpoint)
				return fmt.Errorf("%w (%s)", ctx.Err(), why)
			}
			continue
		}
		links, err := k.Links()
		if err != nil {
			return err
		}
		br, port := -1, 0
		for _, l := range links {
			if l.Name == software.BridgeName(vni) {
				br = l.Index
			}
			if l.Name == hostIf {
				port = l.Master
			}
		}
		if br > 0 && port == br {
			return nil
		}
		select {
		case <-ch:
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
