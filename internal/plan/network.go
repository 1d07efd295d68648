package plan

import (
	"net/netip"
	"slices"
)

// Network is a tenant network as a node needs it.
type Network struct {
	Name    string
	VNI     uint32
	MTU     uint32
	Subnets []Subnet // sorted by name
	// FloodVTEPs are the remote VTEPs of this VNI, sorted, without the
	// node's own (see Own). Read them with Flood.
	FloodVTEPs []netip.Addr
	// HostPortVTEPs are those of FloodVTEPs whose nodes have host ports
	// on this network (Skiff nodes running the software datapath),
	// sorted: the node routes only their addresses into the overlay.
	// Read them with HostPorts.
	HostPortVTEPs []netip.Addr
	// Own, when valid, is the node's own VTEP, which FloodVTEPs and
	// HostPortVTEPs may then hold and which is none of them: the
	// controller's planner gives every node of a network the same two
	// lists, the network's members' VTEPs, instead of a copy per node
	// without its own (on a network of N nodes, N lists of N). Equal
	// compares the lists as they are meant; the protobuf conversion
	// leaves Own out of them, so that a plan decoded from the wire (an
	// agent's) never has Own.
	Own netip.Addr
	// HostAddrs are the host addresses (Node.HostIP) of the network's
	// nodes with host ports, the node's own included, sorted by VTEP:
	// a node's own traffic of the family other than the underlay's
	// reaches pods from its host address, and the node routes the
	// others' into the overlay, to their host ports.
	HostAddrs []HostAddr
	// Egress is what may leave the overlay for outside addresses:
	// EgressNone, EgressSNAT or EgressRouted.
	Egress string
}

// Flood returns the flood list: FloodVTEPs without Own. It is FloodVTEPs
// itself (read-only) unless that holds Own, and a copy then.
func (n Network) Flood() []netip.Addr { return without(n.FloodVTEPs, n.Own) }

// HostPorts returns HostPortVTEPs without Own, as Flood does.
func (n Network) HostPorts() []netip.Addr { return without(n.HostPortVTEPs, n.Own) }

// Resolved returns n with Own taken out of its lists (and cleared): the
// network as a plan decoded from the wire holds it.
func (n Network) Resolved() Network {
	n.FloodVTEPs, n.HostPortVTEPs, n.Own = n.Flood(), n.HostPorts(), netip.Addr{}
	return n
}

func without(as []netip.Addr, own netip.Addr) []netip.Addr {
	if !own.IsValid() {
		return as
	}
	i := slices.Index(as, own)
	if i < 0 {
		return as
	}
	out := make([]netip.Addr, 0, len(as)-1)
	return append(append(out, as[:i]...), as[i+1:]...)
}

// sameVTEPs reports whether the lists a (without aOwn) and b (without
// bOwn) are equal: at once when they are the same list.
func sameVTEPs(a []netip.Addr, aOwn netip.Addr, b []netip.Addr, bOwn netip.Addr) bool {
	if aOwn == bOwn && same(a, b) {
		return true
	}
	i, j := 0, 0
	for {
		if i < len(a) && aOwn.IsValid() && a[i] == aOwn {
			i++
		}
		if j < len(b) && bOwn.IsValid() && b[j] == bOwn {
			j++
		}
		if i == len(a) || j == len(b) {
			return i == len(a) && j == len(b)
		}
		if a[i] != b[j] {
			return false
		}
		i++
		j++
	}
}

// Equal reports whether two networks are the same (their lists compared
// without their Own).
func (n Network) Equal(o Network) bool {
	return n.Name == o.Name && n.VNI == o.VNI && n.MTU == o.MTU && n.Egress == o.Egress &&
		slices.EqualFunc(n.Subnets, o.Subnets, Subnet.Equal) &&
		sameVTEPs(n.FloodVTEPs, n.Own, o.FloodVTEPs, o.Own) &&
		sameVTEPs(n.HostPortVTEPs, n.Own, o.HostPortVTEPs, o.Own) &&
		(same(n.HostAddrs, o.HostAddrs) || slices.Equal(n.HostAddrs, o.HostAddrs))
}

// same reports whether a and b are the same list (not only equal ones).
func same[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// HostAddr is a node's host address (Node.HostIP) and its VTEP.
type HostAddr struct {
	VTEP, IP netip.Addr
}

// HostAddrOf returns the host address of the node whose VTEP is vtep
// in as, if it has one.
func HostAddrOf(as []HostAddr, vtep netip.Addr) (netip.Addr, bool) {
	for _, a := range as {
		if a.VTEP == vtep {
			return a.IP, true
		}
	}
	return netip.Addr{}, false
}
