package nltest

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/rtnl"
	"github.com/skiff-sdn/skiff/internal/nl/tc"
)

// The test-setup API: what the datapaths find rather than make, staged
// by a test, and inspection. Each method takes the world's lock; one
// given something that is not there (or a name taken) panics: the
// test's setup is wrong.

// Device is a physical netdev (kind "device") a test stages: a NIC, a
// VF, a PF, a representor.
type Device struct {
	Name string
	MAC  string // "": derived from the index
	MTU  int    // 0: 1500
	// SwitchID is the phys_switch_id (hex) of a representor or PF of a
	// switchdev eswitch; such a device accepts tc filters in hardware.
	SwitchID string
	Up       bool
	// VFs is the number of SR-IOV VFs a PF reports (VFs, SetVF*): MAC
	// all zeros, no VLAN, spoof check off, not trusted, link state
	// auto, no rate limits.
	VFs int
}

// Path is the namespace's path ("" for the host's).
func (n *NS) Path() string { return n.path }

func (n *NS) mustLink(name string) *link {
	l := n.byName(name)
	if l == nil {
		panic(fmt.Sprintf("nltest: no link %q in namespace %q", name, n.path))
	}
	return l
}

// AddDevice stages a physical device and returns it as Links lists it.
func (n *NS) AddDevice(d Device) nl.Link {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	if err := checkNew(n, d.Name, d.MTU); err != nil {
		panic(fmt.Sprintf("nltest: device %q: %v", d.Name, err))
	}
	l := n.newLink(d.Name, "device")
	if d.MAC != "" {
		hw, err := net.ParseMAC(d.MAC)
		if err != nil {
			panic(fmt.Sprintf("nltest: device %q: %v", d.Name, err))
		}
		l.MAC, l.macSet = hw.String(), true
	}
	if d.MTU > 0 {
		l.MTU = d.MTU
	}
	l.SwitchID, l.hw = d.SwitchID, d.SwitchID != ""
	for i := range d.VFs {
		l.vfs = append(l.vfs, nl.VF{ID: i, Mac: make(net.HardwareAddr, 6)})
	}
	n.place(l)
	if d.Up {
		n.up(l)
	}
	return l.view()
}

// RemoveDevice makes a physical device disappear as the kernel
// unregisters one whose driver lets it go (a VF's netdev destroyed where
// it is by a reset of its PF, a function unplugged): its addresses,
// routes, neighbours, port and filters go with it, mirred actions to it
// send nowhere, and link notifications report it deleted. Userspace
// cannot do this (DeleteLink refuses a device).
func (n *NS) RemoveDevice(name string) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	l := n.mustLink(name)
	if l.Kind != "device" || l.loop {
		panic(fmt.Sprintf("nltest: %s in namespace %q is not a physical device", name, n.path))
	}
	n.deleteLink(l)
}

// AddDevice stages a physical device in the host namespace.
func (w *World) AddDevice(d Device) nl.Link { return w.NS("").AddDevice(d) }

// SetHardware makes a link accept tc filters in hardware (or not): a
// VXLAN device on a host with a switchdev NIC is offloaded through the
// NIC's driver. A hardware-capable link gives in_hw to the filters it
// takes (unless they ask skip_hw); others refuse skip_sw (EOPNOTSUPP).
func (n *NS) SetHardware(name string, on bool) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	n.mustLink(name).hw = on
}

// OffloadTunnels makes the namespace's VXLAN devices, those there and
// those made later, accept tc filters in hardware (or not): a switchdev
// NIC's driver (mlx5) registers an indirect block callback that takes
// the filters of every tunnel device, which is how a decap rule on the
// VXLAN device of a host with such a NIC (a BlueField's Arm side) goes
// to hardware. SetHardware does it for one link that is there.
func (n *NS) OffloadTunnels(on bool) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	n.tunnelHW = on
	for _, l := range n.links {
		if l.Kind == "vxlan" {
			l.hw = on
		}
	}
}

// RefuseHardware makes a hardware-capable link's driver refuse the
// filters that ask for hardware (skip_sw) with errno and message (the
// extended acknowledgement), as a driver refuses what it cannot
// offload; the filters that do not ask run in software (not_in_hw).
// errno 0 takes them again.
func (n *NS) RefuseHardware(name string, errno unix.Errno, message string) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	l := n.mustLink(name)
	l.refusal = nil
	if errno != 0 {
		l.refusal = &rtnl.Error{Errno: errno, Message: message}
	}
}

// AddDevlink stages a devlink device bus/device with an eswitch in mode
// ("legacy" or "switchdev"; "" for a device without an eswitch).
func (n *NS) AddDevlink(bus, device, mode string) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	n.devlink[bus+"/"+device] = mode
}

// NeighReply is an ARP or ND reply of ip with mac arriving on a link:
// its neighbour entry becomes usable (reachable), made when there was
// none; a permanent entry is left alone.
func (n *NS) NeighReply(link string, ip netip.Addr, mac string) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	l := n.mustLink(link)
	hw, err := net.ParseMAC(mac)
	if err != nil {
		panic(fmt.Sprintf("nltest: neighbour reply %s: %v", ip, err))
	}
	ip = ip.Unmap()
	if h := l.neighs[ip]; h != nil && h.state == nudPermanent {
		return
	}
	l.neighs[ip] = &neigh{mac: hw.String(), state: nudReachable}
	n.event(nl.Event{Kind: "neigh", Index: l.Index})
}

// Probes is how many ARP probes Resolve sent for ip on a link (one per
// call that found no usable entry).
func (n *NS) Probes(link string, ip netip.Addr) int {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	return n.probes[probeKey{n.mustLink(link).Index, ip.Unmap()}]
}

// AddForeignTable stages someone else's table: its rules carry no
// user data of SetTable's (so SetTable of that name would rewrite it,
// and TableCounters reports none of them).
func (n *NS) AddForeignTable(t nl.NftTable) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	if h, _ := n.table(t.Family, t.Name); h != nil {
		panic(fmt.Sprintf("nltest: table %q exists", t.Name))
	}
	n.tables = append(n.tables, newTable(t, true))
}

// ForeignTable is a table of someone else's for AddForeignTable: inet
// "foreign" with an input chain that counts and accepts everything;
// ForeignTableState is how State prints it.
func ForeignTable() nl.NftTable {
	return nl.NftTable{Name: "foreign", Chains: []nl.NftChain{{Name: "input", Hook: nl.HookInput, Type: nl.ChainFilter,
		Rules: []nl.NftRule{{Tag: "theirs", Counter: true, Action: nl.Accept{}}}}}}
}

// ForeignTableState is ForeignTable as State prints it.
const ForeignTableState = `table inet foreign (foreign)
  chain input type filter hook input priority 0; policy accept;
    counter accept`

// AddForeignFilter stages someone else's filter on a link's ingress, as
// another tc client adds it (f's Ifindex is the link's; a clsact qdisc
// is made when the link has none). The kernel's refusal panics: the
// test's setup is wrong.
func (n *NS) AddForeignFilter(link string, f tc.Filter) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	l := n.mustLink(link)
	n.w.port++
	port := n.w.port
	if l.qdisc == "" {
		l.qdisc = "clsact"
		n.notify(tcNote{port: port, ifindex: l.Index, qdisc: true})
	}
	f.Ifindex = l.Index
	if err := n.write(port, tc.Op{Kind: tc.Add, Filter: &f}); err != nil {
		panic(fmt.Sprintf("nltest: someone else's filter on %s: %v", link, err))
	}
}

// SetRuleCounter sets the counters of the rules of an inet table's chain with
// that tag (as traffic would).
func (n *NS) SetRuleCounter(tableName, chain, tag string, packets, bytes uint64) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	t, _ := n.table(nl.NftInet, tableName)
	if t == nil {
		panic(fmt.Sprintf("nltest: no table %q", tableName))
	}
	found := false
	for i := range t.chains {
		for j, r := range t.chains[i].Rules {
			if t.chains[i].Name == chain && r.Tag == tag && r.Counter {
				t.counter[i][j], found = nftCount{packets, bytes}, true
			}
		}
	}
	if !found {
		panic(fmt.Sprintf("nltest: no rule with a counter tagged %q in %s %s", tag, tableName, chain))
	}
}

// SetFilterStats sets the counters of every action of the ingress
// filter of a link at chain, priority and handle (as traffic would).
func (n *NS) SetFilterStats(link string, chain uint32, prio uint16, handle uint32, s tc.Stats) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	l := n.mustLink(link)
	if b := l.blocks[0]; b != nil {
		if c := b.chain(chain); c != nil {
			if tp := c.proto(prio); tp != nil {
				if i := tp.get(handle); i >= 0 {
					for j := range tp.filters[i].f.Actions {
						tp.filters[i].f.Actions[j].Stats = s
					}
					return
				}
			}
		}
	}
	panic(fmt.Sprintf("nltest: no filter %#x at chain %d prio %d on %s", handle, chain, prio, link))
}

// SetLinkStats sets a link's counters (Stats).
func (n *NS) SetLinkStats(name string, c nl.Counters) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	n.mustLink(name).stats = c
}

// LoseTC makes every tc watcher of the namespace report lost
// notifications once.
func (n *NS) LoseTC() {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	for _, w := range n.watchers {
		w.mu.Lock()
		w.lost = true
		w.mu.Unlock()
	}
}

// DefineSysctl makes a sysctl that the fake does not model exist with a
// value (such as net/ipv4/conf/eth0/rp_filter), for Sysctl and
// SetSysctl.
func (n *NS) DefineSysctl(name, value string) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	clean, err := sysctlName(name)
	if err != nil {
		panic(err)
	}
	n.extra[clean] = value
}

// Link returns the link of that name as Links lists it.
func (n *NS) Link(name string) (nl.Link, bool) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	if l := n.byName(name); l != nil {
		return l.view(), true
	}
	return nl.Link{}, false
}

// Filters returns the tc filters of a link, ingress then egress, in the
// kernel's dump order (none when the link is not there).
func (n *NS) Filters(name string) []tc.Filter {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	var out []tc.Filter
	if l := n.byName(name); l != nil {
		for _, b := range l.blocks {
			if b == nil {
				continue
			}
			fs, _ := b.dump(0, true)
			for _, x := range fs {
				out = append(out, copyFilter(x.f))
			}
		}
	}
	return out
}

// Learn stands for a frame that entered a bridge through port ifname,
// for Ethernet destination mac, and matched a rule of table (of family
// f) whose action is LearnPair into set: the kernel adds the pair to the
// set with the set's timeout, or restarts its timeout when the set
// holds it. The test says which frames the rules would match. A table or
// set that is not there, or not a SetKeyIfNameEther set, or a bad name
// or MAC, panics: the test's setup is wrong.
func (n *NS) Learn(f nl.NftFamily, tableName, set, ifname, mac string) {
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	t, _ := n.table(f, tableName)
	if t == nil {
		panic(fmt.Sprintf("nltest: no %s table %q", f, tableName))
	}
	i := t.set(set)
	if i < 0 || t.sets[i].Key != nl.SetKeyIfNameEther {
		panic(fmt.Sprintf("nltest: no ifname . ether_addr set %q in %s %s", set, f, tableName))
	}
	p, err := pairOf(ifname, mac)
	if err != nil {
		panic(fmt.Sprintf("nltest: learn: %v", err))
	}
	now := time.Now()
	t.expire(now)
	if len(t.pairs[i]) >= int(t.sets[i].Size) && t.sets[i].Size > 0 {
		if _, held := t.pairs[i][p]; !held {
			return // full: the kernel adds nothing
		}
	}
	var until time.Time
	if t.sets[i].Timeout > 0 {
		until = now.Add(t.sets[i].Timeout.Truncate(time.Millisecond))
	}
	t.pairs[i][p] = until
}
