package software

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
)

// Host ports: the node's own way into a network whose egress is not
// none, so that the node's traffic (kubelet, API server, kube-proxy's
// NodePorts, anything with hostNetwork) reaches pods on every node and
// gets the replies, while the anycast gateway stays the pods' first hop.
//
// Every node holds the gateway address, so the node is known on a network
// by its underlay address and a MAC made from it (HostMAC), carried by
// the host end of a veth pair (skn<VNI>) whose peer (sknp<VNI>) is a port
// of the network's bridge. On each node:
//   - remote endpoints' addresses are routed through the host port with
//     the underlay address as source (proto 83), so the node's packets
//     reach them with an address that is its own;
//   - packets routed in from the bridge (the pods' replies to a node, or
//     a pod calling another node's address) look up the network's table
//     first (rule iif skb<VNI>), where every other node of the network is
//     routed into the overlay, to that node's host port MAC (static FDB
//     and neighbour entries, as for remote endpoints);
//   - local pods are reached, as before, straight from the bridge.
//
// A network with egress none gets no host port: the node cannot route
// into it, and nftables (firewall.Isolation) counts the host port as its
// network's own, so that no routed path between networks opens.

// HostPortName, HostPeerName, HostTable and HostMAC are the names,
// table and MAC of host ports (datapath: the offload datapath's
// host ports are the same).
var (
	HostPortName = datapath.HostPortName
	HostPeerName = datapath.HostPeerName
	HostTable    = datapath.HostTable
	HostMAC      = datapath.HostMAC
)

// hostPorts reports whether a network gets host ports on a node. The
// node is known on the network by its underlay address, so the node's
// own traffic reaches pods over the underlay's family (IPv4 or IPv6).
func hostPorts(p plan.Plan, n plan.Network) bool {
	return (n.Egress == plan.EgressSNAT || n.Egress == plan.EgressRouted) && p.UnderlayIP.IsValid()
}

// hostRemote returns the other nodes of a network that have its host
// ports, and their MACs: the network's HostPortVTEPs of the node's
// underlay family (the controller leaves out offload nodes and EVPN
// peers, which have none: their addresses are reached as before,
// through egress).
func hostRemote(p plan.Plan, n plan.Network) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	if !hostPorts(p, n) {
		return out
	}
	for _, v := range n.HostPortVTEPs {
		if v.Is4() == p.UnderlayIP.Is4() {
			out[v] = HostMAC(n.VNI, v)
		}
	}
	return out
}

// hostRemoteAddrs returns the addresses the node routes into a network
// to other nodes' host ports, and the MACs of those ports: each node's
// VTEP (hostRemote) and its host address of the other family, if it
// registered one (datapath.HostAddrs).
func hostRemoteAddrs(p plan.Plan, n plan.Network) map[netip.Addr]string {
	_, hostAddrs := datapath.HostAddrs(n, p.UnderlayIP)
	return datapath.PeerAddrs(hostRemote(p, n), hostAddrs)
}

// hostPort makes a network's host port match the plan: the pair, its
// MAC, address, bridge port settings and static entries, and the routes
// and rule it wants (added to st).
func (d *Datapath) hostPort(p plan.Plan, n plan.Network, br nl.Link, byName map[string]nl.Link, mtu int, st *datapath.HostRouting) error {
	name, peer, mac := HostPortName(n.VNI), HostPeerName(n.VNI), HostMAC(n.VNI, p.UnderlayIP)
	alias := aliasPrefix + "host:" + n.Name
	hp, err := d.ensureLink(byName, name, func(l nl.Link) bool { return l.Kind == "veth" }, func() error {
		return d.k.AddPair(nl.Pair{Name: name, Peer: peer, MTU: mtu, MAC: mac, Alias: alias, PeerAlias: alias})
	})
	if err != nil {
		return err
	}
	pp, ok := byName[peer]
	if !ok || !Owned(pp) {
		return fmt.Errorf("%s has no peer %s of Skiff's", name, peer)
	}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	if hp.MAC != mac {
		add(d.k.SetMAC(hp.Index, mac))
	}
	for _, l := range []nl.Link{hp, pp} {
		if l.MTU != mtu {
			add(d.k.SetMTU(l.Index, mtu))
		}
	}
	if pp.Master != br.Index {
		add(d.k.SetMaster(pp.Index, br.Index))
	}
	add(d.portFlags(pp.Index, nl.PortFlags{Learning: false, NeighSuppress: true}))
	for _, l := range []nl.Link{hp, pp} {
		if !l.Up {
			add(d.k.SetUp(l.Index))
		}
	}
	// The node's underlay address on its host port: what masquerade
	// picks for traffic routed out of it (a NodePort's remote backend);
	// and its host address of the other family, if it has one.
	own, _ := datapath.HostAddrs(n, p.UnderlayIP)
	src := func(a netip.Addr) netip.Addr {
		if a.Is4() == p.UnderlayIP.Is4() {
			return p.UnderlayIP
		}
		return own // zero without one: that family is not routed here
	}
	wantAddrs := map[netip.Prefix]bool{netip.PrefixFrom(p.UnderlayIP, p.UnderlayIP.BitLen()): true}
	if own.IsValid() {
		wantAddrs[netip.PrefixFrom(own, own.BitLen())] = true
	}
	addrs, err := d.k.Addrs(hp.Index)
	add(err)
	for _, a := range addrs {
		if wantAddrs[a] {
			delete(wantAddrs, a)
		} else {
			add(d.k.DeleteAddr(hp.Index, a))
		}
	}
	for a := range wantAddrs {
		add(d.k.AddAddr(hp.Index, a))
	}
	// The bridge sends frames for the host port's MAC to its port
	// (learning is off on it).
	fdb, err := d.k.FDB(pp.Index)
	add(err)
	if !containsFDB(fdb, mac) {
		add(d.k.SetFDB(nl.FDB{LinkIndex: pp.Index, MAC: mac, Master: true, Static: true}))
	}
	// Remote endpoints' addresses through the host port, from the
	// node's address of their family (those of a family it has none of
	// are not), with static neighbours (no ARP or ND).
	want := map[netip.Addr]string{}
	for _, r := range p.Remote {
		if r.Network != n.Name {
			continue
		}
		for _, ip := range r.IPs {
			if a := ip.Addr(); src(a).IsValid() {
				want[a] = r.MAC
				st.AddRoute(netip.PrefixFrom(a, a.BitLen()), hp.Index, src(a), 0)
			}
		}
	}
	add(datapath.SyncPermanentNeighs(d.k, hp.Index, want))
	// Other nodes (their VTEPs and host addresses), for what is routed
	// in from the bridge: a rule per family routed.
	st.RoutePeers(br, HostTable(n.VNI), hostRemoteAddrs(p, n), p.UnderlayIP, own)
	return errors.Join(errs...)
}

func containsFDB(es []nl.FDB, mac string) bool {
	for _, e := range es {
		if e.MAC == mac && e.Master && e.Static {
			return true
		}
	}
	return false
}
