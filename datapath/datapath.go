// Package datapath defines what the agent asks of a datapath: make the
// kernel (or the NIC) match a whole plan, plumb and unplug the interfaces
// of local endpoints, tell when an endpoint is attached, and read counters.
// The agent chooses a datapath once, at start (software, offload, or the
// fake in tests), and otherwise never asks which one it runs.
//
// A new endpoint kind (a VF moved into a pod, a tap for a VM, a VF bound
// to vfio-pci) is a case of Plumb and Unplumb in the datapaths that offer
// it, listed by Kinds; the agent and its local API do not change.
//
//	dp := software.New(software.Options{...})
//	err := dp.Apply(p)                       // whole desired state
//	iface, err := dp.Plumb(ctx, datapath.PlumbRequest{...})
//	ok, why := dp.Ready("pod-a")             // as of the last Apply
package datapath

import (
	"context"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// Datapath executes plans and plumbs local endpoints. Apply, Plumb,
// Unplumb, Counters and Close are not called concurrently with one
// another by the agent, except that Plumb and Unplumb of different
// endpoints may run while Apply does; Ready, Kinds and Collectors are
// safe for concurrent use.
type Datapath interface {
	// Apply makes the datapath match p, whole: it creates what is missing,
	// corrects what differs, and removes what it owns that p no longer
	// holds, adding before deleting. It is idempotent (applying the same
	// plan to a matching datapath writes nothing), level-triggered (it
	// compares with what the kernel reports), touches only objects it
	// owns, and returns every error it met, joined, after doing all it
	// could. It attaches plumbed endpoints to their networks; when it
	// returns, Ready answers for p.
	Apply(p plan.Plan) error
	// Plumb creates the interface of a local endpoint of the current plan
	// (req.Endpoint.Kind says which kind) and configures its far side
	// (the pod's or VM's): name, MAC, MTU, addresses, routes. It is
	// idempotent: an interface that already matches is kept. On error
	// it leaves nothing behind. Attaching the interface to the network
	// is Apply's job. A kind the datapath does not offer is an error
	// (ErrKind).
	Plumb(ctx context.Context, req PlumbRequest) (Plumbed, error)
	// Unplumb removes what Plumb made for the endpoint (a VF goes back
	// to the host). Removing what is not there succeeds.
	Unplumb(ctx context.Context, req UnplumbRequest) error
	// Ready reports whether the last Apply attached the local endpoint
	// (bridge port, or its forwarding rules installed), and when not,
	// why. An Apply that began before the endpoint's latest Plumb does
	// not count (see PlumbGate). It does no kernel I/O.
	Ready(endpoint string) (bool, string)
	// Kinds lists the endpoint kinds Plumb offers.
	Kinds() []string
	// Counters reads the counters of p's local endpoints and networks
	// now.
	Counters(p plan.Plan) (Counters, error)
	// Writes is how many changing kernel calls the datapath made since
	// it was opened.
	Writes() int
	// Collectors are the datapath's own Prometheus metrics (none is
	// fine); the agent registers them once.
	Collectors() []prometheus.Collector
	// Close releases sockets and handles; kernel objects stay (the
	// datapath keeps forwarding while the agent is down).
	Close()
}

// Learner is a datapath that learns from traffic part of what it
// programs (offload: the remote endpoints each endpoint sends to) and
// must be asked to look regularly.
type Learner interface {
	// Learn programs what was learnt since the last call. apply: a
	// whole Apply of the current plan is needed for it. Safe to call
	// while Apply runs (one waits for the other).
	Learn() (apply bool, err error)
}

// PlumbRequest asks for a local endpoint's interface.
type PlumbRequest struct {
	// Endpoint is the endpoint as the plan holds it (name, kind, MAC,
	// addresses, PF and VF index).
	Endpoint plan.Endpoint
	// Network is the endpoint's network in the plan (MTU, subnets and
	// their gateways).
	Network plan.Network
	// NetNS is the path of the namespace the interface goes into (a
	// pod's); IfName its name there. Both are empty for a VM's port.
	NetNS  string
	IfName string
	// MTU, when positive and below the network's, is used instead.
	MTU int
}

// Plumbed describes a plumbed endpoint.
type Plumbed struct {
	// HostIf is the host-side interface (the veth's other end, the tap,
	// or the VF's representor).
	HostIf string
	MTU    int
	// Gateways are the default routes set on the interface (a pod's),
	// or the routers a VM's guest is told of.
	Gateways []netip.Addr
	// PCIAddress and VFIOGroup are a vfio port's: the VF's PCI function,
	// bound to vfio-pci, and its /dev/vfio group, for the hypervisor.
	PCIAddress string
	VFIOGroup  string
}

// IsVMPort reports whether an endpoint kind is a VM's port (tap, vfio):
// plumbed from the plan, with no namespace, for a hypervisor.
func IsVMPort(kind string) bool { return kind == plan.KindTap || kind == plan.KindVFIO }

// UnplumbRequest names what to remove. NetNS and IfName may be empty
// (the namespace is gone); the datapath then finds the interface from its
// host side.
type UnplumbRequest struct {
	Endpoint plan.Endpoint
	NetNS    string
	IfName   string
}

// Counters of a node, as the controller and metrics want them.
type Counters struct {
	Endpoints map[string]EndpointCounters // by local endpoint
	Networks  map[string]IfCounters       // by network: its tunnel device
	// Policy enforcement: per-rule counters, and what enforcement wrote
	// by kind (nftables "table"/"element", tc "filter").
	Policy       []PolicyCounter
	PolicyWrites map[string]int
}

// EndpointCounters are one endpoint's counters, from its own view (what
// it received and sent), and the forwarding rules that serve it on
// datapaths that have them.
type EndpointCounters struct {
	Traffic *IfCounters // nil when the endpoint has no host interface
	Rules   []Rule
}

// IfCounters are an interface's counters.
type IfCounters struct {
	RxPackets, RxBytes, RxDropped uint64
	TxPackets, TxBytes, TxDropped uint64
}

// PolicyCounter counts what one policy rule of an endpoint let through
// (Rule >= 0) or its default deny dropped (Rule -1).
type PolicyCounter struct {
	Endpoint  string
	Direction string // Ingress or Egress
	Rule      int
	Packets   uint64
	Bytes     uint64
}

// Policy directions.
const (
	Ingress = "ingress"
	Egress  = "egress"
)

// Rule is one installed forwarding or policy rule of an endpoint and
// where it runs.
type Rule struct {
	Device, Kind, Text string
	// State is "hardware", "software", "refused" or "" (not installed);
	// Reason says why it is not in hardware.
	State, Reason      string
	Handle             uint32
	Packets, Bytes     uint64
	HWPackets, HWBytes uint64
}

// ErrKind is returned (wrapped) by Plumb for an endpoint kind the
// datapath does not offer.
var ErrKind = errKind{}

type errKind struct{}

func (errKind) Error() string { return "endpoint kind not offered by this datapath" }
