package localapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// Backend does the work behind the API. Implementations must be safe for
// concurrent use. Errors that are not *Error are reported as CodeFailed.
type Backend interface {
	Create(ctx context.Context, r CreateRequest) (*CreateResponse, error)
	// Delete is idempotent.
	Delete(ctx context.Context, r DeleteRequest) error
	List() []Endpoint
	Status() Status
}

// Server serves a Backend on listeners made by ListenUnix and ListenTLS.
type Server struct {
	Backend Backend
	Logger  *slog.Logger
}

// Listener is where the API is served; it knows its transport's
// credentials and who may call.
type Listener struct {
	net.Listener
	creds credentials.TransportCredentials
}

// ListenUnix listens on the unix socket path (replacing a stale socket
// file) with mode 0600; only callers whose uid is 0 are served.
func ListenUnix(path string) (*Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("localapi: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("localapi: remove stale socket: %w", err)
	}
	old := unix.Umask(0o077)
	l, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("localapi: listen %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("localapi: %w", err)
	}
	return &Listener{Listener: l, creds: unixCreds{}}, nil
}

// TLS is the server side of the TCP transport: its certificate and key,
// the CA that signs client certificates, and the client certificate
// common names that may call (for example "node:host1", the host whose
// DPU this agent runs on). Every field is required.
type TLS struct {
	Cert, Key, ClientCA string
	Allow               []string
}

// Set reports whether the TCP transport is configured.
func (t TLS) Set() bool { return t.Cert != "" && t.Key != "" && t.ClientCA != "" }

// ListenTLS listens on TCP addr with mutual TLS: a client needs a
// certificate signed by t.ClientCA whose common name t.Allow lists.
func ListenTLS(addr string, t TLS) (*Listener, error) {
	if !t.Set() {
		return nil, errors.New("localapi: TCP needs a certificate, its key and a client CA")
	}
	if len(t.Allow) == 0 {
		return nil, errors.New("localapi: TCP needs the names of the clients it serves (allow)")
	}
	cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
	if err != nil {
		return nil, fmt.Errorf("localapi: certificate: %w", err)
	}
	pem, err := os.ReadFile(t.ClientCA)
	if err != nil {
		return nil, fmt.Errorf("localapi: client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("localapi: client CA %s: no certificate in it", t.ClientCA)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("localapi: listen %s: %w", addr, err)
	}
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs: pool, MinVersion: tls.VersionTLS13})
	return &Listener{Listener: l, creds: allowCreds{TransportCredentials: creds, allow: slices.Clone(t.Allow)}}, nil
}

// Serve serves l until ctx ends, then stops gracefully (calls under way
// finish).
func (s Server) Serve(ctx context.Context, l *Listener) error {
	log := s.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv := grpc.NewServer(grpc.Creds(l.creds), grpc.UnaryInterceptor(authorize))
	skiffv1.RegisterLocalServiceServer(srv, service{b: s.Backend, log: log})
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	if err := srv.Serve(l.Listener); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("localapi: %w", err)
	}
	return nil
}

// authorize refuses callers their transport did not vouch for: a unix
// peer that is not root, a TLS client whose name is not allowed.
func authorize(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, statusOf(&Error{Code: CodeForbidden, Message: "unknown caller"})
	}
	switch ai := p.AuthInfo.(type) {
	case unixAuth:
		if ai.uid != 0 {
			return nil, statusOf(&Error{Code: CodeForbidden, Message: "only root may use the skiff-agent socket"})
		}
	case allowedAuth:
		if !ai.ok {
			return nil, statusOf(&Error{Code: CodeForbidden, Message: fmt.Sprintf("client %q may not use this agent", ai.name)})
		}
	default:
		return nil, statusOf(&Error{Code: CodeForbidden, Message: "unauthenticated transport"})
	}
	return h(ctx, req)
}

// statusOf turns an error into the status the client decodes: an *Error
// keeps its code (in an ErrorInfo detail) and message.
func statusOf(err error) error {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Code: CodeFailed, Message: err.Error()}
	}
	msg := e.Message
	if msg == "" {
		msg = "failed"
	}
	st, derr := status.New(grpcCode(e.Code), msg).WithDetails(&errdetails.ErrorInfo{Domain: errorDomain, Reason: e.Code})
	if derr != nil {
		return status.Error(grpcCode(e.Code), msg)
	}
	return st.Err()
}

type service struct {
	skiffv1.UnimplementedLocalServiceServer
	b   Backend
	log *slog.Logger
}

func (s service) CreateLocalEndpoint(ctx context.Context, pb *skiffv1.CreateLocalEndpointRequest) (*skiffv1.LocalEndpointResult, error) {
	resp, err := s.b.Create(ctx, createRequest(pb))
	if err != nil {
		s.log.Warn("endpoint create failed", "endpoint", pb.GetName(), "err", err)
		return nil, statusOf(err)
	}
	return resultPB(resp), nil
}

func (s service) DeleteLocalEndpoint(ctx context.Context, pb *skiffv1.DeleteLocalEndpointRequest) (*skiffv1.DeleteLocalEndpointResponse, error) {
	out := &skiffv1.DeleteLocalEndpointResponse{}
	switch {
	case (pb.GetName() == "") == (pb.GetOwner() == ""):
		return nil, statusOf(&Error{Code: CodeInvalid, Message: "name, owner: give exactly one (an endpoint, or every endpoint of an owner)"})
	case pb.GetName() != "":
		if err := s.b.Delete(ctx, DeleteRequest{Name: pb.GetName(), NetNS: pb.GetNetns(), IfName: pb.GetIfName()}); err != nil {
			return nil, statusOf(err)
		}
		out.Deleted = []string{pb.GetName()}
		return out, nil
	}
	for _, e := range s.b.List() {
		if e.Owner != pb.GetOwner() {
			continue
		}
		if err := s.b.Delete(ctx, DeleteRequest{Name: e.Name}); err != nil {
			return nil, statusOf(err)
		}
		out.Deleted = append(out.Deleted, e.Name)
	}
	if len(out.Deleted) == 0 {
		return nil, statusOf(&Error{Code: CodeNotFound, Message: fmt.Sprintf("owner: no endpoint of %q on this node", pb.GetOwner())})
	}
	return out, nil
}

func (s service) ListLocalEndpoints(_ context.Context, pb *skiffv1.ListLocalEndpointsRequest) (*skiffv1.ListLocalEndpointsResponse, error) {
	out := &skiffv1.ListLocalEndpointsResponse{}
	for _, e := range s.b.List() {
		if pb.GetOwner() != "" && e.Owner != pb.GetOwner() {
			continue
		}
		out.Endpoints = append(out.Endpoints, &skiffv1.LocalEndpointSummary{Name: e.Name, Network: e.Network, Owner: e.Owner, Labels: e.Labels,
			HostIf: e.HostIf, Kind: e.Kind, Mac: e.MAC, Ips: e.IPs, PciAddress: e.PCIAddress, VfioGroup: e.VFIOGroup})
	}
	return out, nil
}

func (s service) GetLocalStatus(context.Context, *skiffv1.GetLocalStatusRequest) (*skiffv1.LocalStatus, error) {
	st := s.b.Status()
	return &skiffv1.LocalStatus{Ready: st.Ready, Connected: st.Connected, Revision: st.Revision, AppliedRevision: st.Applied, Reason: st.Reason}, nil
}
