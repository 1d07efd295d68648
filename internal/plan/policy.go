package plan

import (
	"net/netip"
	"slices"
)

// PolicyPort is an allowed protocol (TCP, UDP, SCTP) and destination port
// range; Port 0 means every port.
type PolicyPort struct {
	Protocol string
	Port     uint16
	EndPort  uint16
}

// PolicyPeer is an allowed peer: an address group by name, or a CIDR with
// exceptions.
type PolicyPeer struct {
	Group  string
	CIDR   netip.Prefix
	Except []netip.Prefix
}

// PolicyRule allows any of Peers (none: every peer) on any of Ports (none:
// every port).
type PolicyRule struct {
	Peers []PolicyPeer
	Ports []PolicyPort
}

// EndpointPolicy is the compiled policy of one local endpoint, keyed by the
// endpoint's name. An endpoint without one is not isolated.
type EndpointPolicy struct {
	Endpoint        string
	IngressIsolated bool
	EgressIsolated  bool
	Ingress, Egress []PolicyRule
}

// AddressGroup is a named set of addresses that rules refer to.
type AddressGroup struct {
	Name    string
	Members []netip.Addr // sorted
}

// Equal reports whether two endpoint policies are the same.
func (e EndpointPolicy) Equal(o EndpointPolicy) bool {
	return e.Endpoint == o.Endpoint && e.IngressIsolated == o.IngressIsolated && e.EgressIsolated == o.EgressIsolated &&
		slices.EqualFunc(e.Ingress, o.Ingress, PolicyRule.Equal) && slices.EqualFunc(e.Egress, o.Egress, PolicyRule.Equal)
}

// Equal reports whether two rules are the same.
func (r PolicyRule) Equal(o PolicyRule) bool {
	return slices.Equal(r.Ports, o.Ports) && slices.EqualFunc(r.Peers, o.Peers, func(a, b PolicyPeer) bool {
		return a.Group == b.Group && a.CIDR == b.CIDR && slices.Equal(a.Except, b.Except)
	})
}

// Equal reports whether two groups are the same.
func (g AddressGroup) Equal(o AddressGroup) bool {
	return g.Name == o.Name && slices.Equal(g.Members, o.Members)
}
