// Package nl is the one place in Skiff that speaks netlink. It offers the
// few kernel operations the datapaths need, in plain types, behind the
// Kernel interface so that everything above it can be tested against a
// fake; the real implementation works in one network namespace.
//
//	k, err := nl.Open(nl.Options{})         // the current namespace
//	links, err := k.Links()
//	err = k.AddBridge(nl.Bridge{Name: "skb100", MTU: 1450, Alias: "skiff:net=blue"})
//
// Writes are counted (Writes), so tests can prove that a reconcile of a
// kernel that already matches changes nothing.
package nl

import (
	"net/netip"
)

// Link is a network interface.
type Link struct {
	Index  int
	Name   string
	Kind   string // bridge, vxlan, veth, device, ...
	Alias  string
	MTU    int
	Up     bool
	Master int // index of the bridge it is a port of, or 0
	MAC    string
	// SwitchID is the phys_switch_id of a switchdev port (hex), empty
	// for other links.
	SwitchID string
	// VXLAN only; External is collect-metadata mode (no VNI of its own).
	VNI      uint32
	Local    netip.Addr
	Port     int
	Learning bool
	External bool
}

// PortFlags are bridge-port settings.
type PortFlags struct {
	Learning      bool
	NeighSuppress bool
	// Hairpin sends a frame back out of the port it came in on, which
	// a pod reaching itself through a Service needs when the bridge's
	// traffic passes netfilter (br_netfilter DNAT bridges it back).
	Hairpin bool
}

// FDB is a forwarding entry on a device: with Self (the device's own table,
// such as a VXLAN device's remote VTEP for a MAC) or with Master (the
// bridge's table, pointing at this port).
type FDB struct {
	LinkIndex int
	MAC       string
	Dst       netip.Addr // VXLAN remote; invalid for bridge entries
	Self      bool
	// Master entries are the bridge's (in dumps: every entry without Self).
	Master bool
	// Static (NUD_NOARP) entries never age; Permanent (NUD_PERMANENT)
	// entries on a bridge port are local addresses of the bridge, on a
	// VXLAN device's own table they are ordinary static entries.
	Static    bool
	Permanent bool
}

// Neigh is an IP neighbour entry (ARP/ND) on a device.
type Neigh struct {
	LinkIndex int
	IP        netip.Addr
	MAC       string
	Permanent bool
}

// Bridge describes a bridge to create.
type Bridge struct {
	Name  string
	MTU   int
	Alias string
}

// VXLAN describes a VXLAN device to create. An External one
// (collect-metadata) carries every VNI; VNI and Local are not used.
type VXLAN struct {
	Name     string
	VNI      uint32
	Local    netip.Addr
	Port     int
	MTU      int
	Alias    string
	External bool
}

// Kernel is the netlink surface of the datapaths. Implementations are not
// required to be safe for concurrent use.
type Kernel interface {
	Links() ([]Link, error)
	AddBridge(b Bridge) error
	AddVXLAN(v VXLAN) error
	DeleteLink(index int) error
	SetMaster(index, master int) error
	SetUp(index int) error
	SetMTU(index, mtu int) error
	SetAlias(index int, alias string) error
	PortFlags(index int) (PortFlags, error)
	SetPortFlags(index int, f PortFlags) error
	// FDB lists the bridge-family forwarding entries of a device.
	FDB(index int) ([]FDB, error)
	// AddFDB appends an entry (all-zero VXLAN entries may have several
	// destinations); SetFDB creates or replaces the entry of that MAC.
	AddFDB(e FDB) error
	SetFDB(e FDB) error
	DeleteFDB(e FDB) error
	// Neighs lists the IPv4 and IPv6 neighbour entries of a device.
	Neighs(index int) ([]Neigh, error)
	SetNeigh(n Neigh) error
	DeleteNeigh(n Neigh) error
	// Addrs lists the addresses of a device (link-local ones excluded).
	Addrs(index int) ([]netip.Prefix, error)
	AddAddr(index int, a netip.Prefix) error
	DeleteAddr(index int, a netip.Prefix) error
	SetMAC(index int, mac string) error
	// Writes returns how many changing calls were made.
	Writes() int
}
