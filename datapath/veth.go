package datapath

import (
	"net/netip"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
)

// PlumbVeth makes the veth pair of a local endpoint for the kernel
// datapaths: its host side named HostIfName and marked with HostIfAlias in
// the namespace at ns ("" for the caller's), its peer in req.NetNS as
// req.IfName with the endpoint's MAC, MTU, addresses and default routes.
// Idempotent; on error nothing it made stays.
func PlumbVeth(ns string, req PlumbRequest) (Plumbed, error) {
	e := req.Endpoint
	out := Plumbed{HostIf: HostIfName(e.Name), MTU: EndpointMTU(req.Network, req.MTU), Gateways: Gateways(e, req.Network)}
	k, err := nl.Open(nl.Options{NetNS: ns})
	if err != nil {
		return Plumbed{}, err
	}
	defer nl.Close(k)
	err = nl.PlumbVeth(k, nl.Veth{Name: out.HostIf, Alias: HostIfAlias(e.Name), MTU: out.MTU, PeerName: req.IfName, PeerNS: req.NetNS},
		nl.Iface{MAC: e.MAC, MTU: out.MTU, Addrs: e.IPs, Gateway: out.Gateways})
	if err != nil {
		return Plumbed{}, err
	}
	return out, nil
}

// UnplumbVeth deletes an endpoint's veth pair by its host side, in the
// namespace at ns ("" for the caller's). A pair that is not there is not
// an error.
func UnplumbVeth(ns, endpoint string) error {
	k, err := nl.Open(nl.Options{NetNS: ns})
	if err != nil {
		return err
	}
	defer nl.Close(k)
	return nl.DeleteByName(k, HostIfName(endpoint))
}

// EndpointMTU is the MTU of an endpoint's interface: the network's, or
// the one asked for when positive and lower.
func EndpointMTU(n plan.Network, asked int) int {
	mtu := int(n.MTU)
	if mtu == 0 {
		mtu = plan.DefaultMTU
	}
	if asked > 0 && asked < mtu {
		mtu = asked
	}
	return mtu
}

// Gateways are the default routes of an endpoint: the gateway of each
// subnet that holds one of its addresses.
func Gateways(e plan.Endpoint, n plan.Network) []netip.Addr {
	var out []netip.Addr
	for _, ip := range e.IPs {
		for _, s := range n.Subnets {
			if s.CIDR.Contains(ip.Addr()) && s.Gateway.IsValid() {
				out = append(out, s.Gateway)
			}
		}
	}
	return out
}
