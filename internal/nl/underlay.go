package nl

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// OffloadKernel is the netlink surface of the offload datapath: Kernel,
// plus veth pairs inside the namespace and Skiff's routes and rules
// (HostNet: host ports), route lookups and underlay neighbour
// resolution. Not safe for concurrent use.
type OffloadKernel interface {
	Kernel
	HostNet
	// RouteTo is the kernel's route to dst (ip route get).
	RouteTo(dst netip.Addr) (Route, error)
	// ResolvedNeighs lists the IPv4 neighbours of a device whose entry
	// is usable: reachable, stale, delay, probe, permanent or noarp.
	ResolvedNeighs(index int) ([]netip.Addr, error)
	// Resolve asks the kernel to resolve ip on a device now (NTF_USE:
	// an ARP probe now, not when the first packet needs it).
	Resolve(index int, ip netip.Addr) error
	// Close releases the netlink sockets.
	Close()
}

// Pair describes a veth pair inside one namespace.
type Pair struct {
	Name, Peer string
	MTU        int
	MAC        string // of Name; empty: the kernel's choice
}

// Route is where the kernel sends packets for an address.
type Route struct {
	LinkIndex int
	Gateway   netip.Addr // invalid when the address is on link
	Local     bool       // the address is this host's own (RTN_LOCAL)
}

// OpenOffload returns the real kernel of a namespace for the offload
// datapath.
func OpenOffload(o Options) (OffloadKernel, error) {
	k, err := Open(o)
	if err != nil {
		return nil, err
	}
	return k.(*real), nil
}

func (k *real) Close() { k.h.Close() }

func (k *real) AddPair(p Pair) error {
	k.w()
	la := netlink.NewLinkAttrs()
	la.Name, la.MTU = p.Name, p.MTU
	if p.MAC != "" {
		mac, err := net.ParseMAC(p.MAC)
		if err != nil {
			return fmt.Errorf("nl: veth %s mac %q: %w", p.Name, p.MAC, err)
		}
		la.HardwareAddr = mac
	}
	if err := k.h.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: p.Peer}); err != nil {
		return fmt.Errorf("nl: add veth %s/%s: %w", p.Name, p.Peer, err)
	}
	return nil
}

func (k *real) RouteTo(dst netip.Addr) (Route, error) {
	rs, err := k.h.RouteGet(dst.AsSlice())
	if err != nil {
		return Route{}, fmt.Errorf("nl: route to %s: %w", dst, err)
	}
	if len(rs) == 0 {
		return Route{}, fmt.Errorf("nl: route to %s: none", dst)
	}
	r := Route{LinkIndex: rs[0].LinkIndex, Local: rs[0].Type == unix.RTN_LOCAL}
	if gw, ok := netip.AddrFromSlice(rs[0].Gw); ok {
		r.Gateway = gw.Unmap()
	}
	return r, nil
}

func (k *real) ResolvedNeighs(index int) ([]netip.Addr, error) {
	ns, err := dump(func() ([]netlink.Neigh, error) { return k.h.NeighList(index, unix.AF_INET) })
	if err != nil {
		return nil, fmt.Errorf("nl: neighbours of %d: %w", index, err)
	}
	var out []netip.Addr
	for _, n := range ns {
		ip, ok := netip.AddrFromSlice(n.IP)
		if ok && n.State&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_DELAY|netlink.NUD_PROBE|netlink.NUD_PERMANENT|netlink.NUD_NOARP) != 0 {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

func (k *real) Resolve(index int, ip netip.Addr) error {
	err := k.h.NeighSet(&netlink.Neigh{LinkIndex: index, Family: unix.AF_INET, IP: ip.AsSlice(), Flags: netlink.NTF_USE})
	if err != nil {
		return fmt.Errorf("nl: resolving %s on %d: %w", ip, index, err)
	}
	return nil
}
