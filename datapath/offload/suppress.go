package offload

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
)

// Neighbour suppression: the replication bridge answers, on the node and
// from the plan, the ARP requests and IPv6 neighbour solicitations its
// access ports send for an address of a remote endpoint of their
// network (the Linux bridge's neigh_suppress, as EVPN's ARP/ND
// suppression): no forwarding rule per remote endpoint and representor
// is needed for ARP, and neither kind of request is copied to every VTEP.
// For each network the bridge replicates for:
//
//   - a VLAN device on the bridge, ReplicationName.VID, left down (it
//     sends and receives nothing; the bridge looks up its neighbour
//     table), holding a permanent entry for every address of the
//     network's local and remote endpoints;
//   - a static bridge entry in the network's VLAN for every MAC: a local
//     endpoint's on its representor, the gateway's on its port, a remote
//     endpoint's on the VXLAN port, and for the latter an entry of the
//     VXLAN device's own table (source VNI the network's) sending it to
//     its VTEP.
//
// The VXLAN port has neigh_suppress on: the bridge answers a request for
// an address whose MAC sits behind it (remote endpoints) and copies no
// request to the tunnel when it knows the MAC; a request for a local
// endpoint's or the gateway's address is flooded to the network's local
// ports only, where its owner answers. One for an address the plan does
// not hold is flooded as any broadcast.
// Requests coming from the tunnel are not answered by the bridge (the
// kernel's rule for a neigh_suppress port); they reach the local ports.
// The unicast entries also forward, in the node's kernel, a frame no
// forwarding rule took to its endpoint rather than to every VTEP: all of
// a refused network's unicast, which falls back to software (refused.go).

const suppressAlias = aliasPrefix + "suppress"

// suppressName is the VLAN device of VLAN vid on the replication bridge.
func suppressName(vid uint16) string { return ReplicationName + "." + strconv.Itoa(int(vid)) }

// suppressed is a network the bridge suppresses for: its VLAN, VNI and
// VLAN device (what remote endpoint changes update).
type suppressed struct {
	vid  uint16
	vni  uint32
	link int
}

// suppression is what the neighbour suppression of a replication
// wants: its networks (their VLAN devices not yet known), each one's
// neighbours, and every entry.
type suppression struct {
	nets   map[string]suppressed
	neighs map[string]map[netip.Addr]string // network -> address -> MAC
	fdb    map[nl.FDB]bool
}

// suppressWants is the neighbour suppression of the networks in ports
// (network -> its access ports) by p; vids maps each network's VNI to
// its VLAN; byName is the namespace's links.
func suppressWants(p plan.Plan, in flower.Input, ports map[string][]string, vids map[uint32]uint16, vx nl.Link, byName map[string]nl.Link) suppression {
	w := suppression{nets: map[string]suppressed{}, neighs: map[string]map[netip.Addr]string{}, fdb: map[nl.FDB]bool{}}
	for name := range ports {
		if v, ok := vids[p.Networks[name].VNI]; ok {
			w.nets[name] = suppressed{vid: v, vni: p.Networks[name].VNI}
			w.neighs[name] = map[netip.Addr]string{}
		}
	}
	for ep, rep := range in.Reps {
		e := p.Local[ep]
		s, ok := w.nets[e.Network]
		if !ok {
			continue
		}
		for _, ip := range e.IPs {
			w.neighs[e.Network][ip.Addr()] = e.MAC
		}
		if l, ok := byName[rep]; ok {
			w.fdb[bridgeEntry(l.Index, e.MAC, s.vid)] = true
		}
	}
	for _, r := range p.Remote {
		s, ok := w.nets[r.Network]
		if !ok {
			continue
		}
		es := remoteEntries(p, r, vx.Index, s)
		if len(es) == 0 {
			continue // behind no VTEP the tunnel reaches
		}
		for _, ip := range r.IPs {
			w.neighs[r.Network][ip.Addr()] = r.MAC
		}
		for _, e := range es {
			w.fdb[e] = true
		}
	}
	for name, s := range w.nets {
		if gw, ok := in.Gateways[name]; ok {
			if l, ok := byName[gw.Port]; ok {
				w.fdb[bridgeEntry(l.Index, gw.MAC, s.vid)] = true
				// The gateway answers its own addresses; known here,
				// a request for them reaches the local ports only.
				for _, ip := range gw.IPs {
					w.neighs[name][ip] = gw.MAC
				}
			}
		}
	}
	return w
}

// suppress makes the VLAN devices and their neighbours what w wants and
// adds the entries add (staleEntries made room). byName is the
// namespace's links before the VLAN devices.
func (d *Datapath) suppress(w suppression, add []nl.FDB, br nl.Link, byName map[string]nl.Link) []error {
	var errs []error
	wantDev := map[string]uint16{}
	for _, s := range w.nets {
		wantDev[suppressName(s.vid)] = s.vid
	}
	// The VLAN devices: unwanted ones (or another VLAN's under a name)
	// go, missing ones are made.
	have := map[string]nl.Link{}
	for name, l := range byName {
		if l.Kind != "vlan" || l.Parent != br.Index || !owned(l) {
			continue
		}
		if v, ok := wantDev[name]; ok && v == l.VID {
			have[name] = l
			continue
		}
		if err := d.k.DeleteLink(l.Index); err != nil {
			errs = append(errs, fmt.Errorf("offload datapath: deleting %s: %w", name, err))
		}
	}
	nets := maps.Clone(w.nets)
	for _, name := range slices.Sorted(maps.Keys(nets)) {
		s := nets[name]
		dev := suppressName(s.vid)
		l, ok := have[dev]
		if !ok {
			if err := d.k.AddVLAN(nl.VLAN{Name: dev, Parent: br.Index, VID: s.vid, Alias: suppressAlias}); err != nil {
				errs = append(errs, fmt.Errorf("offload datapath: network %s: %w", name, err))
				delete(nets, name)
				continue
			}
			var err error
			if l, err = d.k.LinkByName(dev); err != nil {
				errs = append(errs, fmt.Errorf("offload datapath: network %s: %w", name, err))
				delete(nets, name)
				continue
			}
		}
		s.link = l.Index
		nets[name] = s
		if err := datapath.SyncPermanentNeighs(d.k, s.link, w.neighs[name]); err != nil {
			errs = append(errs, fmt.Errorf("offload datapath: network %s: %w", name, err))
		}
	}
	errs = append(errs, d.writeFDBs(nil, add)...)
	d.mu.Lock()
	d.suppressing = nets
	d.mu.Unlock()
	return errs
}

// bridgeEntry is the bridge's static entry for mac in VLAN vid on port.
func bridgeEntry(port int, mac string, vid uint16) nl.FDB {
	return nl.FDB{LinkIndex: port, MAC: strings.ToLower(mac), Master: true, Static: true, VLAN: vid}
}

// remoteEntries are remote endpoint r's entries: the bridge's, on the
// VXLAN port, and the VXLAN device's own, to its VTEP (none behind an
// IPv6 VTEP, which the tunnel does not reach).
func remoteEntries(p plan.Plan, r plan.Remote, vx int, s suppressed) []nl.FDB {
	mac := strings.ToLower(r.MAC)
	v, ok := remoteVTEP(p, r)
	if !ok || v == p.UnderlayIP {
		return nil
	}
	return []nl.FDB{bridgeEntry(vx, mac, s.vid),
		{LinkIndex: vx, MAC: mac, Dst: v, Self: true, Permanent: true, SrcVNI: s.vni, VNI: s.vni}}
}

// staleEntries deletes the static bridge entries with a VLAN on the
// bridge's ports and the VXLAN device's unicast entries with a source
// VNI that want does not hold, and returns those of want missing (one
// listing). It runs before the ports' VLANs change: the kernel deletes
// no static entry with its VLAN, and refuses to delete one whose VLAN
// the port no longer has; and deleting first keeps an entry moving to
// another VTEP from being appended to its old one.
func (d *Datapath) staleEntries(br, vx nl.Link, byName map[string]nl.Link, want map[nl.FDB]bool) ([]nl.FDB, []error) {
	all, err := d.k.FDBs()
	if err != nil {
		return nil, []error{fmt.Errorf("offload datapath: %w", err)}
	}
	ports := map[int]bool{vx.Index: true}
	for _, l := range byName {
		if l.Master == br.Index {
			ports[l.Index] = true
		}
	}
	var gone, add []nl.FDB
	seen := map[nl.FDB]bool{}
	for _, e := range all {
		var k nl.FDB
		switch {
		case e.Master && ports[e.LinkIndex] && e.VLAN != 0 && e.Static && !e.Permanent:
			k = bridgeEntry(e.LinkIndex, e.MAC, e.VLAN)
		case e.Self && e.LinkIndex == vx.Index && e.MAC != allZeros && e.SrcVNI != 0:
			k = nl.FDB{LinkIndex: vx.Index, MAC: e.MAC, Dst: e.Dst, Self: true, Permanent: true, SrcVNI: e.SrcVNI, VNI: e.VNI}
		default:
			continue
		}
		if want[k] {
			seen[k] = true
			continue
		}
		gone = append(gone, e)
	}
	for e := range want {
		if !seen[e] {
			add = append(add, e)
		}
	}
	slices.SortFunc(add, compareFDB)
	return add, d.writeFDBs(gone, nil)
}

// writeFDBs deletes gone, then adds add.
func (d *Datapath) writeFDBs(gone, add []nl.FDB) []error {
	var errs []error
	if len(gone) > 0 {
		if err := d.k.DeleteFDBs(gone); err != nil {
			errs = append(errs, fmt.Errorf("offload datapath: %w", err))
		}
	}
	if len(add) > 0 {
		if err := d.k.AddFDBs(add); err != nil {
			errs = append(errs, fmt.Errorf("offload datapath: %w", err))
		}
	}
	return errs
}

func compareFDB(a, b nl.FDB) int {
	if a.LinkIndex != b.LinkIndex {
		return a.LinkIndex - b.LinkIndex
	}
	if c := strings.Compare(a.MAC, b.MAC); c != 0 {
		return c
	}
	if a.Self != b.Self {
		if a.Master {
			return -1
		}
		return 1
	}
	return int(a.VLAN) - int(b.VLAN)
}

// suppressRemotes makes the change of the named remote endpoints between
// old and cur in the neighbour suppression: their neighbours and
// entries, nothing else read or written.
func (d *Datapath) suppressRemotes(old, cur plan.Plan, names []string) error {
	d.mu.Lock()
	nets := d.suppressing
	d.mu.Unlock()
	vx, ok := d.last.links[VXLANName]
	if len(nets) == 0 || !ok {
		return nil
	}
	var errs []error
	var gone, add []nl.FDB
	var setN, delN []nl.Neigh
	for _, n := range names {
		o, was := old.Remote[n]
		r, is := cur.Remote[n]
		if was {
			if s, ok := nets[o.Network]; ok {
				keep := map[netip.Addr]bool{}
				if is && r.Network == o.Network {
					for _, ip := range r.IPs {
						keep[ip.Addr()] = true
					}
				}
				for _, ip := range o.IPs {
					if !keep[ip.Addr()] {
						delN = append(delN, nl.Neigh{LinkIndex: s.link, IP: ip.Addr(), MAC: o.MAC})
					}
				}
				gone = append(gone, remoteEntries(old, o, vx.Index, s)...)
			}
		}
		if is {
			if s, ok := nets[r.Network]; ok && len(remoteEntries(cur, r, vx.Index, s)) > 0 {
				had := map[netip.Addr]bool{}
				if was && o.Network == r.Network && strings.EqualFold(o.MAC, r.MAC) {
					for _, ip := range o.IPs {
						had[ip.Addr()] = true
					}
				}
				for _, ip := range r.IPs {
					if !had[ip.Addr()] {
						setN = append(setN, nl.Neigh{LinkIndex: s.link, IP: ip.Addr(), MAC: r.MAC, Permanent: true})
					}
				}
				add = append(add, remoteEntries(cur, r, vx.Index, s)...)
			}
		}
	}
	// An entry both gone and added stays as it is.
	inGone, inAdd := map[nl.FDB]bool{}, map[nl.FDB]bool{}
	for _, e := range gone {
		inGone[e] = true
	}
	for _, e := range add {
		inAdd[e] = true
	}
	gone = slices.DeleteFunc(gone, func(e nl.FDB) bool { return inAdd[e] })
	add = slices.DeleteFunc(add, func(e nl.FDB) bool { return inGone[e] })
	if err := d.k.DeleteNeighs(delN); err != nil {
		errs = append(errs, fmt.Errorf("offload datapath: %w", err))
	}
	if err := d.k.SetNeighs(setN); err != nil {
		errs = append(errs, fmt.Errorf("offload datapath: %w", err))
	}
	errs = append(errs, d.writeFDBs(gone, add)...)
	return errors.Join(errs...)
}
