package datapath

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
)

// PlumbVeth makes the veth pair of a local endpoint for the kernel
// datapaths: its host side in the namespace at hostNS, named HostIfName
// and marked with HostIfAlias, its peer in req.NetNS as req.IfName with
// the endpoint's MAC, MTU, addresses and default routes, each namespace
// opened with open for the call: a datapath plumbs while its Apply runs,
// and the requests of one handle wait for each other on its sockets. It
// is idempotent: a pair that is already there keeps its interfaces and
// only has its configuration made to match. A link of that name without
// the endpoint's alias is someone else's and is refused. On error nothing
// it made stays.
func PlumbVeth(open nl.OpenFunc, hostNS string, req PlumbRequest) (Plumbed, error) {
	host, err := open(hostNS)
	if err != nil {
		return Plumbed{}, err
	}
	defer host.Close()
	e := req.Endpoint
	out := Plumbed{HostIf: HostIfName(e.Name), MTU: EndpointMTU(req.Network, req.MTU), Gateways: Gateways(e, req.Network)}
	alias := HostIfAlias(e.Name)
	pod, err := open(req.NetNS)
	if err != nil {
		return Plumbed{}, err
	}
	defer pod.Close()
	var routes []nl.LinkRoute
	for _, gw := range out.Gateways {
		routes = append(routes, nl.LinkRoute{Gw: gw})
	}
	cfg := nl.LinkConfig{MAC: e.MAC, MTU: out.MTU, Addrs: e.IPs, Routes: routes}
	l, err := host.LinkByName(out.HostIf)
	switch {
	case errors.Is(err, nl.ErrNoLink):
	case err != nil:
		return Plumbed{}, err
	case l.Alias != alias:
		return Plumbed{}, fmt.Errorf("%s exists and is not this endpoint's (alias %q); leaving it alone", out.HostIf, l.Alias)
	default:
		_, err := pod.LinkByName(req.IfName)
		if err == nil {
			return out, nl.Configure(pod, req.IfName, cfg)
		}
		if !errors.Is(err, nl.ErrNoLink) {
			return Plumbed{}, err
		}
		// Half a pair (its peer's namespace is gone): start again.
		if err := host.DeleteLink(l.Index); err != nil {
			return Plumbed{}, fmt.Errorf("delete stale %s: %w", out.HostIf, err)
		}
	}
	if err := host.AddVeth(nl.Veth{Name: out.HostIf, Alias: alias, MTU: out.MTU, PeerName: req.IfName}, pod); err != nil {
		return Plumbed{}, err
	}
	if err := nl.Configure(pod, req.IfName, cfg); err != nil {
		return Plumbed{}, errors.Join(err, nl.DeleteByName(host, out.HostIf))
	}
	return out, nil
}

// UnplumbVeth deletes an endpoint's veth pair by its host side in the
// namespace at hostNS (the peer goes with it, wherever it is), on a handle
// opened with open for the call. A pair that is not there is not an
// error.
func UnplumbVeth(open nl.OpenFunc, hostNS, endpoint string) error {
	host, err := open(hostNS)
	if err != nil {
		return err
	}
	defer host.Close()
	return nl.DeleteByName(host, HostIfName(endpoint))
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
