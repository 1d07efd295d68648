// Package api serves Skiff's gRPC services: ManagementService for operators
// and integrations, AgentService for skiff-agent. Handlers validate, call
// the store (the only writer of truth) and read plans from the planner; they
// keep no state of their own except the latest counters each node reported.
//
// Identity: when the gRPC server uses mTLS, an agent's client certificate
// must have the common name "node:NAME" and may act only for node NAME;
// management calls need a certificate that is not a node's. Without TLS
// (development), every caller is trusted.
package api

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/skiff-sdn/skiff/controller/store"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// NodeCertPrefix starts the common name of an agent's client certificate.
const NodeCertPrefix = "node:"

// grpcError maps store errors to gRPC status errors with a plain message.
func grpcError(op string, err error) error {
	if err == nil {
		return nil
	}
	var se *store.Error
	if errors.As(err, &se) {
		code := map[store.Kind]codes.Code{
			store.Invalid:            codes.InvalidArgument,
			store.NotFound:           codes.NotFound,
			store.AlreadyExists:      codes.AlreadyExists,
			store.FailedPrecondition: codes.FailedPrecondition,
			store.Exhausted:          codes.ResourceExhausted,
			store.Aborted:            codes.Aborted,
		}[se.Kind]
		return status.Error(code, se.Error())
	}
	if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return status.Error(codes.Canceled, op+": canceled")
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return status.Error(codes.DeadlineExceeded, op+": deadline exceeded")
	}
	return status.Error(codes.Unavailable, fmt.Sprintf("%s: %v", op, err))
}

// callerCN returns the verified client certificate's common name, and
// whether the connection is authenticated by TLS at all.
func callerCN(ctx context.Context) (string, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return "", false
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return "", false
	}
	var cert *x509.Certificate
	if chains := ti.State.VerifiedChains; len(chains) > 0 && len(chains[0]) > 0 {
		cert = chains[0][0]
	}
	if cert == nil {
		return "", true
	}
	return cert.Subject.CommonName, true
}

// authorizeNode checks that the caller may act for node.
func authorizeNode(ctx context.Context, node string) error {
	cn, tls := callerCN(ctx)
	if !tls {
		return nil
	}
	if cn != NodeCertPrefix+node {
		return status.Errorf(codes.PermissionDenied, "node: certificate %q may not act for node %q", cn, node)
	}
	return nil
}

// authorizeSomeNode checks that the caller is a node (any node), or that
// the controller runs without TLS.
func authorizeSomeNode(ctx context.Context) error {
	cn, tls := callerCN(ctx)
	if tls && !strings.HasPrefix(cn, NodeCertPrefix) {
		return status.Errorf(codes.PermissionDenied, "certificate %q is not a node's", cn)
	}
	return nil
}

// authorizeAdmin checks that the caller is not an agent.
func authorizeAdmin(ctx context.Context) error {
	cn, tls := callerCN(ctx)
	if !tls {
		return nil
	}
	if cn == "" || strings.HasPrefix(cn, NodeCertPrefix) {
		return status.Errorf(codes.PermissionDenied, "certificate %q may not use the management API", cn)
	}
	return nil
}

// counters keeps the latest counters each node reported.
type counters struct {
	mu     sync.Mutex
	byNode map[string]*skiffv1.ReportCountersRequest
}

func (c *counters) set(r *skiffv1.ReportCountersRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byNode == nil {
		c.byNode = map[string]*skiffv1.ReportCountersRequest{}
	}
	if r.GetPart() == 0 {
		c.byNode[r.Node] = r
		return
	}
	// A later part of the node's current report adds to it; one of
	// another report (its first part lost, or an older one) is dropped.
	cur := c.byNode[r.Node]
	if cur == nil || !proto.Equal(cur.GetTime(), r.GetTime()) {
		return
	}
	cur.Endpoints = append(cur.Endpoints, r.Endpoints...)
	cur.Networks = append(cur.Networks, r.Networks...)
}

// fill sets the counters of endpoints from their node's latest report.
func (c *counters) fill(eps ...*skiffv1.Endpoint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range eps {
		r := c.byNode[e.Node]
		if r == nil {
			continue
		}
		for _, ec := range r.Endpoints {
			if ec.Endpoint == e.Name {
				e.Counters = ec.Counters
				e.CountersTime = r.Time
				e.PolicyCounters = ec.Policy
				e.OffloadRules = ec.Rules
			}
		}
	}
}
