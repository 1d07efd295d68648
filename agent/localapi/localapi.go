// Package localapi is the agent's local API: what the CNI plugin and VM
// managers call to create and delete endpoints on a node. It is described
// once, as the gRPC service skiff.v1.LocalService
// (proto/skiff/v1/local.proto: requests, responses, error codes), and
// served on two transports: a unix socket only root may use, and, when
// configured, TCP with mutual TLS (a host's CNI reaching the agent on its
// DPU). This package is its one client and its server.
//
//	c := localapi.NewClient("/run/skiff/agent.sock")
//	defer c.Close()
//	r, err := c.Create(ctx, localapi.CreateRequest{Name: "pod-a", Network: "blue", NetNS: "/var/run/netns/x", IfName: "eth0"})
//	var e *localapi.Error
//	if errors.As(err, &e) && e.Code == localapi.CodeExhausted { ... }
//
// Over TCP: localapi.Dial("dpu1:7401", localapi.ClientTLS{CA: ..., Cert: ..., Key: ...}).
package localapi

// DefaultSocket is the agent's socket unless --socket says otherwise.
const DefaultSocket = "/run/skiff/agent.sock"

// Error codes (Error.Code), each a gRPC status code on the wire.
const (
	CodeInvalid     = "invalid"     // InvalidArgument
	CodeNotFound    = "not-found"   // NotFound
	CodeExists      = "exists"      // AlreadyExists
	CodeExhausted   = "exhausted"   // ResourceExhausted
	CodeUnavailable = "unavailable" // Unavailable
	CodeForbidden   = "forbidden"   // PermissionDenied
	CodeFailed      = "failed"      // Internal (and anything else)
)

// CreateRequest asks for an endpoint plumbed into a namespace
// (skiff.v1.CreateLocalEndpointRequest).
type CreateRequest struct {
	Name      string
	Network   string
	NetNS     string // path of the namespace
	IfName    string // interface name inside it
	MTU       int
	Labels    map[string]string
	Owner     string
	Namespace string
	// PF and VF: a VF endpoint, VF VF of PF PF (netdev name or PCI
	// address). On a NIC whose VFs have no netdev (netdevsim), the
	// offload datapath plumbs a veth standing in for the VF.
	PF string
	VF *int
	// Kind is veth, vf, tap or vfio; empty: vf when VF is set, else
	// veth. Kinds tap and vfio are a VM's ports: no NetNS nor IfName,
	// Owner "vm:ID"; a vfio port without PF gets a free VF.
	Kind string
	// MAC is a VM port's guest MAC; derived when empty.
	MAC string
	// DeviceID is a pod's VF by PCI address (as the kubelet allocated
	// it): the agent finds its PF and index. PF and VF must be empty.
	DeviceID string
}

// DeleteRequest removes one endpoint
// (skiff.v1.DeleteLocalEndpointRequest with a name). NetNS and IfName,
// when known, say where its interface is (a pod's VF is given back from
// there); empty when the namespace is gone or not known.
type DeleteRequest struct {
	Name   string
	NetNS  string
	IfName string
}

// CreateResponse describes the plumbed endpoint
// (skiff.v1.LocalEndpointResult).
type CreateResponse struct {
	Name     string
	Network  string
	HostIf   string
	IfName   string
	MAC      string
	MTU      int
	IPs      []string // CIDR form
	Gateways []string // one per address, "" when none
	Revision int64
	Kind     string
	// A vfio port's VF: its PCI address and /dev/vfio group.
	PCIAddress string
	VFIOGroup  string
	// DNS servers of the endpoint's subnets (DHCP gives them to a VM).
	DNS []string
}

// Endpoint is one of this node's endpoints as the list call shows it.
type Endpoint struct {
	Name    string
	Network string
	Owner   string
	Labels  map[string]string
	HostIf  string
	Kind    string
	MAC     string
	IPs     []string
	// A vfio port's VF.
	PCIAddress string
	VFIOGroup  string
}

// Status tells whether the agent can serve.
type Status struct {
	Ready     bool
	Connected bool
	// Revision is the plan the agent holds; Applied the last plan its
	// datapath applied without error (0: none since it started).
	Revision, Applied int64
	Reason            string
}

// Error is an error of the API: one of the Code* codes and a message that
// names the field and the reason.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Message }
