package nl

import (
	"context"
	"errors"
	"net"
	"net/netip"

	"github.com/skiff-sdn/skiff/internal/nl/tc"
)

// Kernel is the kernel of one network namespace, as Skiff uses it: every
// call works in the namespace the handle was opened in. Open returns the
// real one; internal/nl/nltest has a fake that keeps state. It applies
// what callers describe and holds no Skiff policy: which objects are
// Skiff's (names, aliases, protocols, table names) and what they should
// hold is decided by the datapaths.
//
// Conventions: links are named by index except where a name is the only
// handle a caller has (LinkByName); a call on a link that no longer
// exists returns an error wrapping ErrLinkGone (LinkByName and the PF of
// the SR-IOV calls: ErrNoLink), but for listings of its entries (Neighs,
// FDB), which are empty, as the kernel's;
// deleting what is not there succeeds; every call that changes the
// kernel counts in Writes. A Kernel is safe for concurrent use: each call
// is a request of its own (a caller that reads, then writes, must not
// expect the kernel unchanged in between), and the requests of one handle
// wait for each other on its sockets: work that must not wait behind
// another's (an endpoint plumbed while a reconcile runs) opens a handle
// of its own. Separate handles of one namespace are independent.
type Kernel interface {
	// Path is the path the namespace was opened by ("" for the
	// namespace the process was in at Open).
	Path() string

	// Links.

	// Links lists every link of the namespace.
	Links() ([]Link, error)
	// LinkByName returns the link of that name, or an error wrapping
	// ErrNoLink.
	LinkByName(name string) (Link, error)
	// AddBridge, AddVXLAN and AddPair create links and mark each with
	// its Alias; a link that cannot be marked is deleted again.
	AddBridge(b Bridge) error
	AddVXLAN(v VXLAN) error
	// AddVLAN creates an 802.1Q device on v.Parent, left down.
	AddVLAN(v VLAN) error
	// AddPair creates a veth pair with both ends in this namespace (the
	// aliases, when set, on each end).
	AddPair(p Pair) error
	// AddVeth creates a veth pair whose peer is made directly in the
	// namespace of peer (a pod's) under v.PeerName, with v.MTU on both
	// ends; the end here is marked with v.Alias. On error nothing is
	// left.
	AddVeth(v Veth, peer Kernel) error
	// AddTap creates a persistent single-queue tap (no packet
	// information, virtio-net headers on), marked with t.Alias. On error
	// nothing is left.
	AddTap(t Tap) error
	// DeleteLink deletes a link (a veth takes its peer with it); a link
	// that is gone is no error.
	DeleteLink(index int) error
	SetMaster(index, master int) error // master 0: no master
	SetUp(index int) error
	SetDown(index int) error
	SetMTU(index, mtu int) error
	SetAlias(index int, alias string) error // "" clears it
	SetMAC(index int, mac string) error
	// Rename renames a link, setting it down first when it is up (the
	// kernel renames only links that are down).
	Rename(index int, name string) error
	// MoveLink moves a link into the namespace of to, keeping its name;
	// the kernel sets it down and drops its addresses and routes on the
	// way. It fails (EEXIST) when to has a link of that name.
	MoveLink(index int, to Kernel) error
	// PortFlags and SetPortFlags read and set a bridge port's flags.
	PortFlags(index int) (PortFlags, error)
	SetPortFlags(index int, f PortFlags) error
	// BridgePort and SetBridgePort read and set a bridge port's
	// flooding, isolation and VLAN tunnel flags (one write per flag).
	BridgePort(index int) (BridgePort, error)
	SetBridgePort(index int, p BridgePort) error
	// BridgeVLANs lists the VLANs of every bridge port of the
	// namespace (one dump), by port index, each port's in VID order,
	// with their tunnel ids.
	BridgeVLANs() (map[int][]BridgeVLAN, error)
	// AddBridgeVLAN gives a port a VLAN (and its tunnel id: a second
	// write); adding one it has sets its flags and tunnel id.
	// DeleteBridgeVLAN removes it (and its tunnel id); one it does not
	// have is no error.
	AddBridgeVLAN(v BridgeVLAN) error
	DeleteBridgeVLAN(v BridgeVLAN) error
	// Stats returns the counters of every link, by name.
	Stats() (map[string]Counters, error)

	// Addresses.

	// Addrs lists a link's addresses, link-local ones excluded.
	Addrs(index int) ([]netip.Prefix, error)
	// AddAddr adds an address, or replaces the one that is there
	// (IPv6 without duplicate address detection).
	AddAddr(index int, a netip.Prefix) error
	DeleteAddr(index int, a netip.Prefix) error

	// Routes and policy routing rules.

	// Routes lists the routes of protocol RouteProtocol (Skiff's) in
	// every table, both families.
	Routes() ([]Route, error)
	// LinkRoutes lists the routes through a link in the main table,
	// every protocol, both families.
	LinkRoutes(index int) ([]Route, error)
	// ReplaceRoute creates the route, or replaces the one to its
	// prefix in its table. Idempotent.
	ReplaceRoute(r Route) error
	DeleteRoute(r Route) error
	// RouteTo is where the kernel sends packets for dst (ip route get).
	RouteTo(dst netip.Addr) (NextHop, error)
	// Rules lists the policy routing rules of protocol RouteProtocol
	// at a priority, both families.
	Rules(priority int) ([]Rule, error)
	// AddRule adds a rule (protocol RouteProtocol); one that is there
	// is no error.
	AddRule(r Rule) error
	DeleteRule(r Rule) error

	// Neighbours and forwarding entries.

	// Neighs lists a link's IPv4 and IPv6 neighbour entries.
	Neighs(index int) ([]Neigh, error)
	// SetNeigh creates or replaces a permanent entry.
	SetNeigh(n Neigh) error
	DeleteNeigh(n Neigh) error
	// SetNeighs and DeleteNeighs are SetNeigh and DeleteNeigh of many
	// entries, pipelined: every one is tried and the errors are joined
	// (an entry without an address or with a bad MAC fails the call
	// before anything is sent).
	SetNeighs(ns []Neigh) error
	DeleteNeighs(ns []Neigh) error
	// Resolve asks the kernel to resolve a neighbour now (an ARP or ND
	// probe now, not when the first packet needs it).
	Resolve(index int, ip netip.Addr) error
	// FDB lists a link's bridge-family forwarding entries.
	FDB(index int) ([]FDB, error)
	// FDBs lists every link's bridge-family forwarding entries (one
	// dump, where FDB filters it for one link).
	FDBs() ([]FDB, error)
	// AddFDB appends an entry (all-zero VXLAN entries may have several
	// destinations); an entry that is there is no error. SetFDB
	// creates or replaces the entry of that MAC.
	AddFDB(e FDB) error
	SetFDB(e FDB) error
	DeleteFDB(e FDB) error
	// AddFDBs and DeleteFDBs are AddFDB and DeleteFDB of many entries,
	// pipelined (a write each); the error joins each entry's.
	AddFDBs(es []FDB) error
	DeleteFDBs(es []FDB) error

	// nftables.

	// SetTable makes the table t.Name of family t.Family hold t,
	// whole, and reports what it wrote (see NftTable). Other tables
	// (another name, or the same name in another family) are never
	// read or changed. The elements of its dynamic sets are the
	// kernel's: SetTable neither writes nor deletes them (a rewrite
	// starts the sets empty), and they make no difference to what it
	// writes. Idempotent.
	SetTable(t NftTable) (NftChange, error)
	// Tables lists the names of the namespace's tables of family f,
	// Skiff's or not.
	Tables(f NftFamily) ([]string, error)
	// TableCounters reads the counters of the rules of table name of
	// family f that have one (NftRule.Counter), with their chains and
	// tags; none when the table does not exist.
	TableCounters(f NftFamily, name string) ([]NftCounter, error)
	// SetElements reads the elements a set of table holds now (of an
	// address set or a SetKeyIfNameEther set; an error for other key
	// types), with the time each has left, ordered by address, then
	// interface name and MAC. None when the table or the set does not
	// exist. Elements of a dynamic set come and go with traffic and
	// their timeouts: the answer is a snapshot.
	SetElements(f NftFamily, table, set string) ([]NftElement, error)
	// DeleteSetElements deletes the elements of es (by address, or by
	// interface name and MAC; Expires unused) that the set holds, in
	// one transaction, and returns how many it deleted: what the set
	// does not hold (expired meanwhile, or never added) is skipped, and
	// nothing is written when none is held. A rule may add an element
	// again as soon as it is deleted. Idempotent.
	DeleteSetElements(f NftFamily, table, set string, es []NftElement) (int, error)

	// sysctls and modules.

	// Sysctl reads a sysctl of this namespace by its path under
	// /proc/sys ("net/ipv4/ip_forward"); a missing one is an error
	// wrapping fs.ErrNotExist.
	Sysctl(name string) (string, error)
	SetSysctl(name, value string) error
	// LoadModule loads a kernel module unless it is loaded (modules
	// are the host's, not a namespace's).
	LoadModule(name string) error

	// tc and notifications.

	// TC opens a tc client of this namespace with the given number of
	// sockets (bulk writes are split across them; at least 1).
	TC(sockets int) (tc.Client, error)
	// WatchTC follows the tc notifications of this namespace.
	WatchTC() (tc.Watcher, error)
	// LinkChanges subscribes to the link notifications of this
	// namespace, anyone's.
	LinkChanges() (Changes, error)
	// Watch reports link, neighbour and address changes to fn until
	// ctx ends. fn runs on Watch's goroutine.
	Watch(ctx context.Context, fn func(Event)) error

	// devlink: the eswitch mode ("legacy", "switchdev") of the devlink
	// device bus/device registered in this namespace; "" when it has
	// no eswitch. A missing device is an error wrapping ENODEV or
	// ENOENT.
	EswitchMode(bus, device string) (string, error)
	SetEswitchMode(bus, device, mode string) error

	// SR-IOV: what a PF of this namespace reports of its VFs, and
	// their settings, set through the PF.
	VFs(pf string) ([]VF, error)
	SetVFMAC(pf string, vf int, mac net.HardwareAddr) error
	SetVFVlanQos(pf string, vf, vlan, qos int) error
	SetVFSpoofCheck(pf string, vf int, on bool) error
	SetVFTrust(pf string, vf int, on bool) error
	// SetVFLinkState sets a VF's administrative link state
	// (unix.IFLA_VF_LINK_STATE_*).
	SetVFLinkState(pf string, vf int, state uint32) error
	// SetVFRate sets a VF's minimum and maximum transmit rates in
	// Mbit/s (0: no limit).
	SetVFRate(pf string, vf, minRate, maxRate int) error

	// Writes returns how many changing calls were made through this
	// handle (tc clients count their own).
	Writes() int
	// Close releases the handle's sockets; kernel objects stay.
	Close() error
}

// OpenFunc opens the kernel of the network namespace at path ("" is the
// caller's): Open, or a fake's.
type OpenFunc func(path string) (Kernel, error)

// Changes is a subscription that tells whether the kernel notified
// anything since it was last asked. Not safe for concurrent use.
type Changes interface {
	// Any reports whether a notification came since the last call (or
	// since the subscription began); lost notifications count as
	// changes.
	Any() bool
	Close() error
}

// Errors the handles wrap.
var (
	// ErrNoNetNS: the namespace path does not exist (the namespace was
	// destroyed, or never was).
	ErrNoNetNS = errors.New("network namespace does not exist")
	// ErrNoLink: no link of that name in the namespace.
	ErrNoLink = errors.New("no such device")
	// ErrLinkGone: the link of an index is gone (deleted between a
	// listing and the call: by an endpoint's unplumb, or with its
	// namespace). The caller's next listing no longer holds it.
	ErrLinkGone = errors.New("the link is gone")
)

var _ Kernel = (*real)(nil)
