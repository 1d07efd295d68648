package api

import (
	"context"
	"net/netip"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/skiff-sdn/skiff/controller/policy"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// ExplainPolicy reads the stored policies for one flow.
func (m *Management) ExplainPolicy(ctx context.Context, r *skiffv1.ExplainPolicyRequest) (*skiffv1.ExplainPolicyResponse, error) {
	if err := m.guard(ctx); err != nil {
		return nil, err
	}
	proto := strings.ToUpper(r.GetProtocol())
	switch proto {
	case "TCP", "UDP", "SCTP":
		if r.GetPort() < 1 || r.GetPort() > 65535 {
			return nil, status.Errorf(codes.InvalidArgument, "port: %d is not 1..65535", r.GetPort())
		}
	case "ICMP":
		if r.GetPort() != 0 {
			return nil, status.Error(codes.InvalidArgument, "port: ICMP has no port")
		}
	default:
		return nil, status.Errorf(codes.InvalidArgument, "protocol: %q is not TCP, UDP, SCTP or ICMP", r.GetProtocol())
	}
	eps, err := m.store.ListEndpoints(ctx, "", "")
	if err != nil {
		return nil, grpcError("explain", err)
	}
	stored, err := m.store.ListPolicies(ctx, "")
	if err != nil {
		return nil, grpcError("explain", err)
	}
	nss, err := m.store.ListNamespaces(ctx)
	if err != nil {
		return nil, grpcError("explain", err)
	}
	var pols []policy.Policy
	for _, p := range stored {
		ps, err := policy.ParseYAML([]byte(p.GetDocument()))
		if err != nil || len(ps) != 1 {
			return nil, status.Errorf(codes.Internal, "stored policy %s/%s does not parse: %v", p.GetNamespace(), p.GetName(), err)
		}
		pols = append(pols, ps[0])
	}
	nsLabels := map[string]map[string]string{}
	for _, n := range nss {
		nsLabels[n.GetName()] = n.GetLabels()
	}
	src, srcIP, err := flowEnd(eps, "source", r.GetSource())
	if err != nil {
		return nil, err
	}
	dst, dstIP, err := flowEnd(eps, "destination", r.GetDestination())
	if err != nil {
		return nil, err
	}
	e := policy.Explain(pols, src, dst, srcIP, dstIP, proto, uint16(r.GetPort()), nsLabels)
	side := func(s policy.Side) *skiffv1.PolicySide {
		return &skiffv1.PolicySide{Endpoint: s.Endpoint, Isolated: s.Isolated, SelectedBy: s.SelectedBy, AllowedBy: s.AllowedBy, Allowed: s.Allowed}
	}
	return &skiffv1.ExplainPolicyResponse{Allowed: e.Allowed, Egress: side(e.Egress), Ingress: side(e.Ingress)}, nil
}

// flowEnd resolves an endpoint name or an address: an address that no
// endpoint holds is outside the cluster (nil endpoint).
func flowEnd(eps []*skiffv1.Endpoint, field, s string) (*policy.Endpoint, netip.Addr, error) {
	if s == "" {
		return nil, netip.Addr{}, status.Errorf(codes.InvalidArgument, "%s: required (an endpoint name or an IP address)", field)
	}
	ip, ipErr := netip.ParseAddr(s)
	var found []*policy.Endpoint
	var addr netip.Addr
	for _, e := range eps {
		pe := policy.Endpoint{Name: e.GetName(), Node: e.GetNode(), Namespace: e.GetNamespace(), Labels: e.GetLabels()}
		match := e.GetName() == s
		for _, a := range e.GetIps() {
			if p, err := netip.ParsePrefix(a); err == nil {
				pe.IPs = append(pe.IPs, p.Addr())
				match = match || (ipErr == nil && p.Addr() == ip)
			}
		}
		if match {
			found = append(found, &pe)
		}
	}
	switch {
	case len(found) > 1:
		var names []string
		for _, f := range found {
			names = append(names, f.Name)
		}
		return nil, netip.Addr{}, status.Errorf(codes.InvalidArgument, "%s: %s is held by endpoints %s (networks may reuse addresses): name the endpoint instead", field, s, strings.Join(names, ", "))
	case len(found) == 1:
		if len(found[0].IPs) > 0 {
			addr = found[0].IPs[0]
		}
		if ipErr == nil {
			addr = ip
		}
		return found[0], addr, nil
	}
	if ipErr == nil {
		return nil, ip, nil
	}
	return nil, netip.Addr{}, status.Errorf(codes.NotFound, "%s: %q is neither an endpoint nor an IP address", field, s)
}
