package localapi

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/skiff-sdn/skiff/internal/tlsconf"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// Client calls an agent's local API. It is safe for concurrent use.
type Client struct {
	target string
	conn   *grpc.ClientConn
	err    error
	c      skiffv1.LocalServiceClient
}

// NewClient returns a client of the agent listening on the unix socket
// socket. It connects on the first call.
func NewClient(socket string) *Client {
	if abs, err := filepath.Abs(socket); err == nil {
		socket = abs
	}
	return newClient("unix://"+socket, socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// ClientTLS is the client side of the TCP transport: the CA of the agent's
// certificate and this client's certificate and key.
type ClientTLS struct {
	CA, Cert, Key string
}

// Dial returns a client of the agent serving the local API on TCP at
// addr (host:port), with mutual TLS.
func Dial(addr string, t ClientTLS) (*Client, error) {
	if t.CA == "" || t.Cert == "" || t.Key == "" {
		return nil, &Error{Code: CodeInvalid, Message: fmt.Sprintf("agent %s: the TCP local API needs a CA, a client certificate and its key", addr)}
	}
	creds, err := tlsconf.Client(t.CA, t.Cert, t.Key)
	if err != nil {
		return nil, &Error{Code: CodeInvalid, Message: fmt.Sprintf("agent %s: %v", addr, err)}
	}
	return newClient("dns:///"+addr, addr, grpc.WithTransportCredentials(creds)), nil
}

func newClient(target, name string, opts ...grpc.DialOption) *Client {
	c := &Client{target: name}
	c.conn, c.err = grpc.NewClient(target, opts...)
	if c.err == nil {
		c.c = skiffv1.NewLocalServiceClient(c.conn)
	}
	return c
}

// Close releases the connection.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// Create asks the agent for an endpoint.
func (c *Client) Create(ctx context.Context, r CreateRequest) (*CreateResponse, error) {
	if c.err != nil {
		return nil, c.unreachable(c.err)
	}
	resp, err := c.c.CreateLocalEndpoint(ctx, createPB(r))
	if err != nil {
		return nil, c.apiError(err)
	}
	return createResponse(resp), nil
}

// Delete removes an endpoint and its interface. Deleting what does not
// exist succeeds.
func (c *Client) Delete(ctx context.Context, name string) error {
	return c.DeleteFrom(ctx, DeleteRequest{Name: name})
}

// DeleteFrom removes an endpoint whose interface is in r.NetNS as
// r.IfName (a CNI DEL knows them). Deleting what does not exist succeeds.
func (c *Client) DeleteFrom(ctx context.Context, r DeleteRequest) error {
	if c.err != nil {
		return c.unreachable(c.err)
	}
	_, err := c.c.DeleteLocalEndpoint(ctx, &skiffv1.DeleteLocalEndpointRequest{Name: r.Name, Netns: r.NetNS, IfName: r.IfName})
	return c.apiError(err)
}

// DeleteOwned removes every endpoint of owner on the node (a VM's ports:
// "vm:ID") and returns their names. An owner with no endpoint is
// CodeNotFound.
func (c *Client) DeleteOwned(ctx context.Context, owner string) ([]string, error) {
	if c.err != nil {
		return nil, c.unreachable(c.err)
	}
	resp, err := c.c.DeleteLocalEndpoint(ctx, &skiffv1.DeleteLocalEndpointRequest{Owner: owner})
	if err != nil {
		return nil, c.apiError(err)
	}
	return resp.GetDeleted(), nil
}

// List returns this node's endpoints.
func (c *Client) List(ctx context.Context) ([]Endpoint, error) { return c.ListOwned(ctx, "") }

// ListOwned returns this node's endpoints of owner ("": all).
func (c *Client) ListOwned(ctx context.Context, owner string) ([]Endpoint, error) {
	if c.err != nil {
		return nil, c.unreachable(c.err)
	}
	resp, err := c.c.ListLocalEndpoints(ctx, &skiffv1.ListLocalEndpointsRequest{Owner: owner})
	if err != nil {
		return nil, c.apiError(err)
	}
	out := []Endpoint{}
	for _, e := range resp.GetEndpoints() {
		out = append(out, Endpoint{Name: e.GetName(), Network: e.GetNetwork(), Owner: e.GetOwner(), Labels: e.GetLabels(), HostIf: e.GetHostIf(),
			Kind: e.GetKind(), MAC: e.GetMac(), IPs: e.GetIps(), PCIAddress: e.GetPciAddress(), VFIOGroup: e.GetVfioGroup()})
	}
	return out, nil
}

// Status returns the agent's status.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	if c.err != nil {
		return nil, c.unreachable(c.err)
	}
	s, err := c.c.GetLocalStatus(ctx, &skiffv1.GetLocalStatusRequest{})
	if err != nil {
		return nil, c.apiError(err)
	}
	return &Status{Ready: s.GetReady(), Connected: s.GetConnected(), Revision: s.GetRevision(), Applied: s.GetAppliedRevision(), Reason: s.GetReason()}, nil
}

func (c *Client) unreachable(err error) error {
	return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("skiff-agent is not reachable at %s: %v", c.target, err)}
}

// errorDomain marks the errors the agent itself returns (an ErrorInfo
// detail whose reason is the code), as opposed to transport failures.
const errorDomain = "local.skiff.io"

// apiError turns a gRPC status into an *Error; nil stays nil.
func (c *Client) apiError(err error) error {
	if err == nil {
		return nil
	}
	s, ok := status.FromError(err)
	if !ok {
		return &Error{Code: CodeFailed, Message: err.Error()}
	}
	for _, d := range s.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == errorDomain {
			return &Error{Code: info.GetReason(), Message: s.Message()}
		}
	}
	switch s.Code() {
	case codes.Unavailable:
		return c.unreachable(errors.New(s.Message()))
	case codes.DeadlineExceeded, codes.Canceled:
		return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("skiff-agent at %s: %s", c.target, s.Message())}
	}
	return &Error{Code: codeOf(s.Code()), Message: s.Message()}
}

var toCode = map[codes.Code]string{
	codes.InvalidArgument: CodeInvalid, codes.NotFound: CodeNotFound, codes.AlreadyExists: CodeExists,
	codes.ResourceExhausted: CodeExhausted, codes.Unavailable: CodeUnavailable, codes.PermissionDenied: CodeForbidden,
}

func codeOf(c codes.Code) string {
	if s, ok := toCode[c]; ok {
		return s
	}
	return CodeFailed
}

func grpcCode(code string) codes.Code {
	for c, s := range toCode {
		if s == code {
			return c
		}
	}
	return codes.Internal
}

func createPB(r CreateRequest) *skiffv1.CreateLocalEndpointRequest {
	pb := &skiffv1.CreateLocalEndpointRequest{Name: r.Name, Network: r.Network, Netns: r.NetNS, IfName: r.IfName, Mtu: int32(r.MTU),
		Labels: r.Labels, Owner: r.Owner, Namespace: r.Namespace, Pf: r.PF, Kind: r.Kind, Mac: r.MAC, DeviceId: r.DeviceID}
	if r.VF != nil {
		vf := int32(*r.VF)
		pb.Vf = &vf
	}
	return pb
}

func createRequest(pb *skiffv1.CreateLocalEndpointRequest) CreateRequest {
	r := CreateRequest{Name: pb.GetName(), Network: pb.GetNetwork(), NetNS: pb.GetNetns(), IfName: pb.GetIfName(), MTU: int(pb.GetMtu()),
		Labels: pb.GetLabels(), Owner: pb.GetOwner(), Namespace: pb.GetNamespace(), PF: pb.GetPf(), Kind: pb.GetKind(), MAC: pb.GetMac(), DeviceID: pb.GetDeviceId()}
	if pb.Vf != nil {
		vf := int(pb.GetVf())
		r.VF = &vf
	}
	return r
}

func createResponse(pb *skiffv1.LocalEndpointResult) *CreateResponse {
	return &CreateResponse{Name: pb.GetName(), Network: pb.GetNetwork(), HostIf: pb.GetHostIf(), IfName: pb.GetIfName(), MAC: pb.GetMac(),
		MTU: int(pb.GetMtu()), IPs: pb.GetIps(), Gateways: pb.GetGateways(), Revision: pb.GetRevision(), Kind: pb.GetKind(),
		PCIAddress: pb.GetPciAddress(), VFIOGroup: pb.GetVfioGroup(), DNS: pb.GetDns()}
}

func resultPB(r *CreateResponse) *skiffv1.LocalEndpointResult {
	return &skiffv1.LocalEndpointResult{Name: r.Name, Network: r.Network, HostIf: r.HostIf, IfName: r.IfName, Mac: r.MAC,
		Mtu: int32(r.MTU), Ips: r.IPs, Gateways: r.Gateways, Revision: r.Revision, Kind: r.Kind, PciAddress: r.PCIAddress,
		VfioGroup: r.VFIOGroup, Dns: r.DNS}
}
