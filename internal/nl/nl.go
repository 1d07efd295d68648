// Package nl is the one place in Skiff that does kernel I/O: netlink
// (links, addresses, routes, rules, neighbours, FDB, devlink, SR-IOV), tc
// (through internal/nl/tc), nftables and sysctls, behind one interface
// per network namespace (Kernel) so that everything above it can be
// tested against a fake (internal/nl/nltest). It applies and reads back
// what the datapaths describe, in plain types, and holds no Skiff policy:
// which devices, rules and tables are Skiff's, and what they hold, is
// the datapaths' to say.
//
//	k, err := nl.Open("")                       // this namespace; or "/run/netns/NAME"
//	defer k.Close()
//	links, err := k.Links()
//	err = k.AddBridge(nl.Bridge{Name: "skb100", MTU: 1450, Alias: "skiff:bridge:blue"})
//	change, err := k.SetTable(nl.NftTable{Name: "skiff", Chains: ...})
//
// Writes are counted (Writes), so tests can prove that a reconcile of a
// kernel that already matches changes nothing.
package nl

import (
	"net"
	"net/netip"
)

// Link is a network interface.
type Link struct {
	Index  int
	Name   string
	Kind   string // bridge, vxlan, veth, tuntap, device, ...
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
	// VLAN (802.1Q) only: its id and the link it is a VLAN of.
	VID    uint16
	Parent int
}

// TapKind is the Kind of tap and tun links in Links.
const TapKind = "tuntap"

// PortFlags are bridge-port settings.
type PortFlags struct {
	Learning      bool
	NeighSuppress bool
	// Hairpin sends a frame back out of the port it came in on.
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
	// On an external (collect-metadata) VXLAN device: SrcVNI is the VNI
	// whose table holds the entry (what a VLAN-aware bridge's tunnel
	// mapping looks up), VNI the one sent to Dst. Zero: none.
	SrcVNI, VNI uint32
	// VLAN is a VLAN-aware bridge's entry's VLAN (0: none).
	VLAN uint16
}

// Neigh is an IP neighbour entry (ARP/ND) on a device.
type Neigh struct {
	LinkIndex int
	IP        netip.Addr
	MAC       string
	Permanent bool
	// Usable (in listings) is an entry packets can use now: reachable,
	// stale, delay, probe, permanent or noarp.
	Usable bool
}

// Bridge describes a bridge to create.
type Bridge struct {
	Name  string
	MTU   int
	Alias string
	// VLANFiltering makes a VLAN-aware bridge whose ports carry no VLAN
	// until given one (vlan_default_pvid 0), with multicast snooping off
	// (every multicast frame floods to its VLAN's ports). Off: the
	// kernel's defaults.
	VLANFiltering bool
}

// VLAN describes an 802.1Q device to create on the link Parent.
type VLAN struct {
	Name   string
	Parent int
	VID    uint16
	Alias  string
}

// BridgePort is what a port of a VLAN-aware bridge does beyond
// PortFlags.
type BridgePort struct {
	// Flood: unknown unicast is flooded to the port (the kernel's
	// default for a new port).
	Flood bool
	// Isolated ports exchange no frames with each other.
	Isolated bool
	// VLANTunnel maps the port's VLANs to tunnel ids (BridgeVLAN.
	// TunnelID): an external VXLAN device's port.
	VLANTunnel bool
}

// BridgeVLAN is a VLAN of a port of a VLAN-aware bridge.
type BridgeVLAN struct {
	LinkIndex int
	VID       uint16
	// Access: the port's PVID, untagged on egress (the port's frames
	// enter this VLAN).
	Access bool
	// TunnelID is the tunnel id (VNI) the VLAN maps to on a port with
	// VLANTunnel; 0: none.
	TunnelID uint32
}

// VXLAN describes a VXLAN device to create, learning off. An External
// one (collect-metadata) carries every VNI; VNI and Local are not used.
type VXLAN struct {
	Name     string
	VNI      uint32
	Local    netip.Addr
	Port     int
	MTU      int
	Alias    string
	External bool
}

// Pair describes a veth pair with both ends in one namespace.
type Pair struct {
	Name, Peer string
	MTU        int
	MAC        string // of Name; empty: the kernel's choice
	// Alias and PeerAlias mark the ends ("": not marked).
	Alias, PeerAlias string
}

// Veth describes a veth pair whose peer is made in another namespace.
type Veth struct {
	Name     string // this namespace's end
	Alias    string // marks this end
	MTU      int
	PeerName string // the peer's name in its namespace
}

// Tap describes a persistent tap device a hypervisor attaches a VM to.
type Tap struct {
	Name  string
	Alias string
	MTU   int
	// Owner and Group may attach to the tap besides root (0: root only).
	Owner, Group uint32
}

// Counters are an interface's counters.
type Counters struct {
	RxPackets, RxBytes, RxDropped uint64
	TxPackets, TxBytes, TxDropped uint64
}

// RouteProtocol marks the routes and rules Skiff owns (rtm_protocol;
// "proto 83" in ip route). Routes of other protocols are never read or
// changed by Routes and Rules.
const RouteProtocol = 83

// Route is an IPv4 or IPv6 route to Dst through a link: on link (scope
// link) when Gw is not valid, via Gw otherwise.
type Route struct {
	Dst       netip.Prefix
	Gw        netip.Addr
	LinkIndex int
	Src       netip.Addr // invalid: the kernel's choice
	Table     int        // 0: main
	// Protocol is the route's rtm_protocol: RouteProtocol for Skiff's
	// own; 0 writes the kernel's default (boot).
	Protocol int
}

// Rule is a policy routing rule of protocol RouteProtocol: packets that
// came in on IIF look up Table first.
type Rule struct {
	IIF      string
	Table    int
	Priority int
	IPv6     bool // an IPv6 rule; else IPv4
}

// NextHop is where the kernel sends packets for an address.
type NextHop struct {
	LinkIndex int
	Gateway   netip.Addr // invalid when the address is on link
	Local     bool       // the address is this host's own (RTN_LOCAL)
}

// VF is what a PF reports for one of its virtual functions
// (IFLA_VF_INFO), with the kernel's names.
type VF struct {
	ID                   int
	Mac                  net.HardwareAddr
	Vlan, Qos            int
	Spoofchk             bool
	Trust                uint32 // 1: trusted
	LinkState            uint32 // unix.IFLA_VF_LINK_STATE_*
	MinTxRate, MaxTxRate uint32 // Mbit/s
}

// Event is a kernel change seen by Watch.
type Event struct {
	Kind    string // link, neigh or addr
	Index   int    // link index
	Name    string // link name, when known
	Deleted bool
	Addr    netip.Addr // addr events
	// Static is set on neigh events of static or permanent entries;
	// dynamic entries come and go by themselves.
	Static bool
}
