package nltest

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/tc"
)

// NS is one network namespace of a World: its links and what hangs off
// them, routes and rules, nftables tables, sysctls, devlink devices and
// subscriptions. Tests stage what the datapaths find through its
// methods (setup.go) and read it back with State.
type NS struct {
	w    *World
	path string
	ord  int  // the namespace's ordinal in its world (MACs)
	dead bool // deleted: handles on it fail

	next  int // the last ifindex given: the kernel's are cyclic
	seq   int // links placed so far: the namespace's device list order
	links map[int]*link

	routes map[routeKey]nl.Route // made through the handles (connected ones are derived)
	rules  []nl.Rule
	tables []*table
	sys    sysctls
	extra  map[string]string // sysctls a test defined (DefineSysctl)
	bridge map[string]string // bridge-nf-call-* once br_netfilter is loaded

	devlink  map[string]string // "bus/device" -> eswitch mode ("" none)
	tunnelHW bool              // VXLAN devices take tc filters in hardware (OffloadTunnels)
	probes   map[probeKey]int  // Resolve's ARP probes

	subs     []*sub // Watch
	changes  []*changes
	watchers []*tcWatcher
}

// link is a network interface and what the kernel keeps of it.
type link struct {
	nl.Link
	seq    int   // place in the namespace's device list
	peer   *link // the other end of a veth
	ns     *NS
	loop   bool // lo
	macSet bool // the MAC was given (printed by State; a bridge keeps it)
	mtuSet bool // a bridge's MTU was set after creation (no auto adjust)

	flags   nl.PortFlags // a bridge port's
	bport   nl.BridgePort
	vlans   []nl.BridgeVLAN // a bridge port's, by VID
	vlanOn  bool            // a bridge's VLAN filtering
	addrs   []netip.Prefix
	neighs  map[netip.Addr]*neigh
	self    []selfFDB         // a VXLAN device's own entries, in order
	fdb     map[fdbKey]*brFDB // a bridge's entries, by MAC and VLAN
	fwd     [2]string         // IPv4 and IPv6 forwarding sysctls
	stats   nl.Counters
	vfs     []nl.VF
	hw      bool        // tc filters may be offloaded
	refusal *tc.Error   // the driver's refusal of skip_sw filters
	qdisc   string      // "clsact", "ingress" or ""
	blocks  [2]*tcBlock // ingress and egress filters
	owner   [2]uint32   // a tap's owner and group
}

// neigh is an IP neighbour entry.
type neigh struct {
	mac   string
	state int // nudPermanent, nudReachable or nudIncomplete
}

const (
	nudIncomplete = iota
	nudReachable
	nudPermanent
)

// selfFDB is an entry of a VXLAN device's own table: a MAC and its
// destinations (several only for the all-zero and multicast MACs).
type selfFDB struct {
	mac    string
	srcVNI uint32 // an external device's table the entry is in
	dsts   []netip.Addr
	vnis   []uint32 // each destination's VNI (0: the device's)
	static bool     // NUD_NOARP given as well
}

// fdbKey is where a bridge entry is: its MAC and VLAN (0: none).
type fdbKey struct {
	mac  string
	vlan uint16
}

// brFDB is an entry of a bridge's table (one per MAC): the port it
// points at.
type brFDB struct {
	port      *link
	permanent bool // local: the kernel's for a port's own MAC, or given
	static    bool
	kernel    bool // made by the kernel (a port's own MAC): State leaves it out
}

type probeKey struct {
	link int
	ip   netip.Addr
}

// newLink is a link of kind name with the next index of n and a MAC
// derived from both (fe:00:00:<namespace>:<index>: above every MAC a
// test or datapath is likely to give, as the kernel's random ones
// almost always are, so a bridge takes the given ones); not yet placed.
func (n *NS) newLink(name, kind string) *link {
	idx := n.alloc()
	l := &link{Link: nl.Link{Index: idx, Name: name, Kind: kind, MTU: 1500,
		MAC: fmt.Sprintf("fe:00:00:%02x:%02x:%02x", n.ord&0xff, idx>>8&0xff, idx&0xff)},
		neighs: map[netip.Addr]*neigh{}}
	return l
}

// alloc is the next free ifindex: the kernel's counter goes on past
// deleted links.
func (n *NS) alloc() int {
	for {
		n.next++
		if n.next >= 1<<31-1 {
			n.next = 1
		}
		if n.links[n.next] == nil {
			return n.next
		}
	}
}

// place puts l into n (new, or moved in), with the namespace's default
// forwarding and a link event.
func (n *NS) place(l *link) {
	if n.links[l.Index] != nil {
		l.Index = n.alloc()
	}
	n.seq++
	l.seq, l.ns = n.seq, n
	l.fwd = [2]string{n.sys.get(sysV4Default), n.sys.get(sysV6Default)}
	n.links[l.Index] = l
	n.event(nl.Event{Kind: "link", Index: l.Index, Name: l.Name})
}

// remove takes l out of n's links (with an event); what hangs off it
// was detached before.
func (n *NS) remove(l *link) {
	delete(n.links, l.Index)
	// The mirred actions that sent packets to it send them nowhere
	// (they dump ifindex 0).
	for _, o := range n.links {
		for _, b := range o.blocks {
			if b == nil {
				continue
			}
			fs, _ := b.dump(0, true)
			for _, x := range fs {
				for i, a := range x.f.Actions {
					if a.Kind == tc.KindMirred && a.Ifindex == l.Index {
						x.f.Actions[i].Ifindex = 0
					}
				}
			}
		}
	}
	n.event(nl.Event{Kind: "link", Index: l.Index, Name: l.Name, Deleted: true})
}

func (n *NS) byName(name string) *link {
	for _, l := range n.links {
		if l.Name == name {
			return l
		}
	}
	return nil
}

// sorted is n's links by index.
func (n *NS) sorted() []*link {
	out := make([]*link, 0, len(n.links))
	for _, l := range n.links {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b *link) int { return a.Index - b.Index })
	return out
}

// freeName is the first of pattern (with %d) not taken in n.
func (n *NS) freeName(pattern string) string {
	for i := 0; ; i++ {
		if name := fmt.Sprintf(pattern, i); n.byName(name) == nil {
			return name
		}
	}
}

// validName says whether the kernel takes name for a link.
func validName(name string) bool {
	if name == "" || len(name) > 15 || name == "." || name == ".." {
		return false
	}
	for _, c := range name {
		if c == '/' || c == ':' || c <= ' ' {
			return false
		}
	}
	return true
}

// deleteLink deletes l, a veth with its peer, with everything hanging
// off them.
func (n *NS) deleteLink(l *link) {
	if l.peer != nil {
		p := l.peer
		l.peer, p.peer = nil, nil
		if p.ns.links[p.Index] == p {
			p.ns.detach(p)
			p.ns.remove(p)
		}
	}
	n.detach(l)
	n.remove(l)
	// The kernel unregisters a link's VLAN devices with it.
	for _, v := range n.sorted() {
		if v.Kind == "vlan" && v.Parent == l.Index {
			n.deleteLink(v)
		}
	}
}

// detach drops what the kernel drops of a link that leaves n (deleted or
// moved): its bridge ports (for a bridge) and its own place as a port,
// addresses, routes through it, neighbours, qdiscs and filters; it is
// left down.
func (n *NS) detach(l *link) {
	n.down(l)
	if l.Kind == "bridge" {
		for _, p := range n.links {
			if p.Master == l.Index {
				p.Master, p.flags, p.bport, p.vlans = 0, nl.PortFlags{}, nl.BridgePort{}, nil
				n.event(nl.Event{Kind: "link", Index: p.Index, Name: p.Name})
			}
		}
		l.fdb = nil
	}
	if l.Master != 0 {
		n.unport(l)
	}
	for len(l.addrs) > 0 {
		n.dropAddr(l, l.addrs[0])
	}
	for k, r := range n.routes {
		if r.LinkIndex == l.Index {
			delete(n.routes, k)
		}
	}
	l.qdisc, l.blocks = "", [2]*tcBlock{}
}

// down sets l down as the kernel does: its IPv6 addresses, routes
// through it and neighbours go; a bridge's dynamic entries for it too.
func (n *NS) down(l *link) {
	if !l.Up {
		return
	}
	l.Up = false
	for _, a := range slices.Clone(l.addrs) {
		if a.Addr().Is6() {
			n.dropAddr(l, a)
		}
	}
	for k, r := range n.routes {
		if r.LinkIndex == l.Index {
			delete(n.routes, k)
		}
	}
	for ip, e := range l.neighs {
		delete(l.neighs, ip)
		n.event(nl.Event{Kind: "neigh", Index: l.Index, Deleted: true, Static: e.state == nudPermanent})
	}
	if br := n.links[l.Master]; br != nil {
		for mac, e := range br.fdb {
			if e.port == l && !e.permanent && !e.static {
				delete(br.fdb, mac)
			}
		}
	}
	n.event(nl.Event{Kind: "link", Index: l.Index, Name: l.Name})
}

// port makes l a port of bridge br: the kernel's defaults for its flags,
// a permanent entry for its own MAC, the bridge's MAC and MTU adjusted.
func (n *NS) port(l, br *link) {
	l.Master, l.flags, l.bport, l.vlans = br.Index, nl.PortFlags{Learning: true}, nl.BridgePort{Flood: true}, nil
	if br.fdb == nil {
		br.fdb = map[fdbKey]*brFDB{}
	}
	if _, ok := br.fdb[fdbKey{mac: l.MAC}]; !ok {
		br.fdb[fdbKey{mac: l.MAC}] = &brFDB{port: l, permanent: true, kernel: true}
	}
	n.adjustBridge(br)
	n.event(nl.Event{Kind: "link", Index: l.Index, Name: l.Name})
	n.event(nl.Event{Kind: "neigh", Index: l.Index, Static: true})
}

// unport takes l out of its bridge: every entry of the bridge for it
// goes.
func (n *NS) unport(l *link) {
	br := n.links[l.Master]
	l.Master, l.flags, l.bport, l.vlans = 0, nl.PortFlags{}, nl.BridgePort{}, nil
	if br == nil {
		return
	}
	for mac, e := range br.fdb {
		if e.port == l {
			delete(br.fdb, mac)
		}
	}
	n.adjustBridge(br)
	n.event(nl.Event{Kind: "link", Index: l.Index, Name: l.Name})
}

// adjustBridge gives a bridge the lowest MAC of its ports (all zeros
// without ports) unless its MAC was set, and the lowest MTU of its ports
// unless its MTU was set after creation, as the kernel does.
func (n *NS) adjustBridge(br *link) {
	var mac net.HardwareAddr
	mtu := 0
	for _, p := range n.links {
		if p.Master != br.Index {
			continue
		}
		hw, _ := net.ParseMAC(p.MAC)
		if mac == nil || bytes.Compare(hw, mac) < 0 {
			mac = hw
		}
		if mtu == 0 || p.MTU < mtu {
			mtu = p.MTU
		}
	}
	changed := false
	if !br.macSet {
		s := zeroMAC
		if mac != nil {
			s = mac.String()
		}
		if s != br.MAC {
			n.bridgeMAC(br, s)
			changed = true
		}
	}
	if !br.mtuSet && mtu != 0 && mtu != br.MTU {
		br.MTU, changed = mtu, true
		n.lowerVLANs(br)
	}
	if changed {
		n.event(nl.Event{Kind: "link", Index: br.Index, Name: br.Name})
	}
}

// lowerVLANs gives l's VLAN devices l's MTU where theirs is larger, as
// the kernel does when a link's MTU changes.
func (n *NS) lowerVLANs(l *link) {
	for _, v := range n.links {
		if v.Kind == "vlan" && v.Parent == l.Index && v.MTU > l.MTU {
			v.MTU = l.MTU
			n.event(nl.Event{Kind: "link", Index: v.Index, Name: v.Name})
		}
	}
}

// link returns the link of index or an error wrapping nl.ErrLinkGone,
// as the real handle's lookups do.
func (n *NS) link(index int) (*link, error) {
	if l := n.links[index]; l != nil {
		return l, nil
	}
	return nil, fmt.Errorf("nl: link %d: %w: no such device", index, nl.ErrLinkGone)
}

// up sets l up; lo gets its loopback addresses.
func (n *NS) up(l *link) {
	if l.Up {
		return
	}
	l.Up = true
	n.event(nl.Event{Kind: "link", Index: l.Index, Name: l.Name})
	if l.loop {
		n.addAddr(l, netip.MustParsePrefix("127.0.0.1/8"))
		n.addAddr(l, netip.MustParsePrefix("::1/128"))
	}
}

const zeroMAC = "00:00:00:00:00:00"

// view is l as Links lists it: an all-zero MAC is none.
func (l *link) view() nl.Link {
	x := l.Link
	if x.MAC == zeroMAC {
		x.MAC = ""
	}
	return x
}

// bridgeMAC gives bridge br the MAC mac, and moves the bridge's own
// entry (the kernel's, for its MAC) with it: none for all zeros, nor
// when a port's entry holds the MAC.
func (n *NS) bridgeMAC(br *link, mac string) {
	if e := br.fdb[fdbKey{mac: br.MAC}]; e != nil && e.port == br && e.kernel {
		delete(br.fdb, fdbKey{mac: br.MAC})
	}
	br.MAC = mac
	if br.fdb == nil {
		br.fdb = map[fdbKey]*brFDB{}
	}
	if _, ok := br.fdb[fdbKey{mac: mac}]; !ok && mac != zeroMAC {
		br.fdb[fdbKey{mac: mac}] = &brFDB{port: br, permanent: true, kernel: true}
	}
}
