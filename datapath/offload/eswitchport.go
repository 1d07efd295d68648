package offload

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
)

// Host ports on offload nodes: as on software nodes (datapath
// HostPortName), the node's own way into a network whose egress routes
// out, so that the node's traffic (kubelet, API server, NodePorts)
// reaches pods on every node and gets the replies while the anycast
// gateway stays the pods' first hop. A veth pair: skn<VNI> in the
// node's stack holds the node's underlay address (/32) and HostMAC;
// sknp<VNI> is its eswitch side, whose flower rules (offload/flower
// HostPort) encapsulate the node's packets to remote endpoints. Remote
// endpoints' IPv4 addresses are routed through skn<VNI> from the
// underlay address (permanent neighbours: their MACs). What the node
// routes in from the gateway skg<VNI> (a pod's reply to another node)
// looks up the network's table first (rule iif skg<VNI>), where the
// other nodes with host ports (the plan's HostPortVTEPs) are routed out
// of skg<VNI> to their host port MACs, which the gateway port's rules
// encapsulate to them. Local pods are reached through the gateway, as
// before. A network with egress none gets none (the node does not route
// into it). A node with no endpoint on a network that routes out (the
// planner makes it a host member: a node without pods must reach pods
// too) has the host port without a gateway: its routes to the remote
// endpoints, and no table, rule or peers (nothing is routed back out).
// A node's host address (datapath.HostAddrs: IPv6, the underlay being
// IPv4) goes on skn<VNI> too; remote endpoints' IPv6 addresses are
// routed from it (without one, from no address: for what the node
// forwards), and the other nodes' host addresses are routed in the
// network's table like their underlay addresses, to the same MACs, with
// an IPv6 rule iif skg<VNI>.

// hostPorts gives each network of the plan whose egress routes out a
// host port pair (on an IPv4 underlay), whether or not it has a gateway
// here, and removes the pairs of networks that need none. It returns
// the host ports by network.
func (d *Datapath) hostPorts(p plan.Plan, _ map[string]flower.Gateway, byName map[string]nl.Link) (map[string]flower.HostPort, error) {
	out := map[string]flower.HostPort{}
	want := map[string]bool{}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(p.Networks)) {
		n := p.Networks[name]
		if !datapath.RoutesOut(n) || !p.UnderlayIP.Is4() {
			continue
		}
		hp, peer := datapath.HostPortName(n.VNI), datapath.HostPeerName(n.VNI)
		mac := datapath.HostMAC(n.VNI, p.UnderlayIP)
		want[hp] = true
		addrs := []netip.Prefix{netip.PrefixFrom(p.UnderlayIP, 32)}
		if own, _ := datapath.HostAddrs(n, p.UnderlayIP); own.IsValid() {
			addrs = append(addrs, netip.PrefixFrom(own, 128))
		}
		err := d.ensurePair(vethPair{name: hp, peer: peer, mac: mac,
			alias: aliasPrefix + "host:" + n.Name, peerAlias: aliasPrefix + "host-port:" + n.Name,
			addrs: addrs}, n, byName)
		if err == nil && byName[hp].MAC != mac {
			err = d.k.SetMAC(byName[hp].Index, mac)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("offload datapath: host port of %s: %w", name, err))
			continue
		}
		peers := map[netip.Addr]string{}
		for _, v := range n.HostPortVTEPs {
			if v.Is4() && v != p.UnderlayIP {
				peers[v] = datapath.HostMAC(n.VNI, v)
			}
		}
		out[name] = flower.HostPort{Port: peer, MAC: mac, Peers: peers}
	}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		if l := byName[name]; owned(l) && isHostPort(name) && !want[name] {
			d.log.Info("removing unneeded host port", "link", name)
			if err := d.k.DeleteLink(l.Index); err != nil { // its peer goes with it
				errs = append(errs, fmt.Errorf("offload datapath: deleting %s: %w", name, err))
			}
		}
	}
	return out, errors.Join(errs...)
}

// isHostPort reports whether a link name is a host port's node end
// (skn<VNI>), not its peer (sknp<VNI>).
func isHostPort(name string) bool {
	return strings.HasPrefix(name, "skn") && !strings.HasPrefix(name, "sknp")
}

// hostRouting makes the node's routing match the host ports hps (by
// network; links byName): remote endpoints' addresses through the
// host port from the node's address of their family, with permanent
// neighbours; the other nodes' host ports (VTEPs and host addresses)
// in the network's table out of its gateway, with permanent
// neighbours; the rules (one per family) that make what comes in from
// the gateway look that table up. Skiff's other routes and rules go, and
// the permanent neighbours of gateways (gws) without a host port.
func (d *Datapath) hostRouting(p plan.Plan, gws map[string]flower.Gateway, hps map[string]flower.HostPort, byName map[string]nl.Link) error {
	st := datapath.NewHostRouting()
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(gws)) {
		// A gateway without a host port keeps no neighbours of Skiff's.
		if gw, ok := byName[GatewayName(p.Networks[name].VNI)]; ok && owned(gw) {
			if _, ok := hps[name]; !ok {
				if err := datapath.SyncPermanentNeighs(d.k, gw.Index, nil); err != nil {
					errs = append(errs, fmt.Errorf("offload datapath: neighbours of %s: %w", gw.Name, err))
				}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(hps)) {
		n, hp := p.Networks[name], hps[name]
		port, okP := byName[datapath.HostPortName(n.VNI)]
		if !okP {
			errs = append(errs, fmt.Errorf("offload datapath: host port of %s: %s is not there", name, datapath.HostPortName(n.VNI)))
			continue
		}
		_, hasGW := gws[name]
		gw, okG := byName[GatewayName(n.VNI)]
		if hasGW && !okG {
			errs = append(errs, fmt.Errorf("offload datapath: host port of %s: its gateway %s is not there", name, GatewayName(n.VNI)))
			continue
		}
		own, peerAddrs := datapath.HostAddrs(n, p.UnderlayIP)
		remote := map[netip.Addr]string{}
		for _, r := range p.Remote {
			if r.Network != name {
				continue
			}
			for _, ip := range r.IPs {
				a := ip.Addr()
				remote[a] = r.MAC
				switch {
				case a.Is4():
					st.AddRoute(netip.PrefixFrom(a, 32), port.Index, p.UnderlayIP, 0)
				case own.IsValid():
					// From the node's host address (IPv6): the
					// pod answers it through the overlay.
					st.AddRoute(netip.PrefixFrom(a, 128), port.Index, own, 0)
				default:
					// No IPv6 of the node's own to answer to: for
					// what the node forwards (a Service's DNAT
					// keeps the client's address).
					st.AddRoute(netip.PrefixFrom(a, 128), port.Index, netip.Addr{}, 0)
				}
			}
		}
		if err := datapath.SyncPermanentNeighs(d.k, port.Index, remote); err != nil {
			errs = append(errs, fmt.Errorf("offload datapath: neighbours of %s: %w", port.Name, err))
		}
		if !hasGW {
			continue // no endpoint here: nothing routed back out
		}
		// The other nodes' VTEPs and host addresses, to their host
		// port MACs (the gateway port's rules encapsulate by MAC to
		// the VTEP), and a rule for each family routed.
		peers := datapath.PeerAddrs(hp.Peers, peerAddrs)
		st.RoutePeers(gw, datapath.HostTable(n.VNI), peers, p.UnderlayIP, own)
		if err := datapath.SyncPermanentNeighs(d.k, gw.Index, peers); err != nil {
			errs = append(errs, fmt.Errorf("offload datapath: neighbours of %s: %w", gw.Name, err))
		}
	}
	if err := datapath.SyncHostRouting(d.k, st); err != nil {
		errs = append(errs, fmt.Errorf("offload datapath: host port routes: %w", err))
	}
	return errors.Join(errs...)
}
