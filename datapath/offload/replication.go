package offload

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
)

// The replication path: what the forwarding rules leave to the node's
// kernel, broadcast and multicast (ARP for addresses the plan does not
// know, IPv6 neighbour discovery, DHCP, multicast), is flooded by one
// VLAN-aware bridge, ReplicationName, with the external VXLAN device as
// its tunnel port. Each network of the node is a VLAN of it, mapped to
// the network's VNI on the VXLAN port (vlan_tunnel); its endpoints'
// representors and its gateway's port are its access ports; the VXLAN
// device's table holds, for the network's VNI, one all-zero entry per
// VTEP of its flood list. A frame no rule took on a representor enters
// the bridge and is copied to the network's other ports and, through
// the VXLAN device, to each VTEP once; a decapsulated frame no rule
// took enters it from the VXLAN port and is copied to the network's
// ports. The cost of a broadcast grows with the VTEPs, for that frame
// only; no rule holds a copy per VTEP or per endpoint.
//
// Learning and unknown-unicast flooding are off on every port (unicast
// is the rules'); the VXLAN port and the gateways' ports are isolated
// from each other (a node's gateway and the tunnel exchange nothing, as
// each node has its own gateway of every network).
//
// A representor with a stand-in (Port.Target: a veth standing in for
// the VF on a NIC without VF netdevs) gets one filter on its egress that
// sends what the bridge sends it to the stand-in, as the VF would
// receive it (standin.go).

// ReplicationName is the replication bridge.
const ReplicationName = "skrb"

const replicationAlias = aliasPrefix + "replication"

// maxVID is the last VLAN id: a node replicates for at most 4,094
// networks.
const maxVID = 4094

const allZeros = "00:00:00:00:00:00"

// replication makes the replication path match p for the networks of
// in's representors. byName is the namespace's links (the VXLAN device
// among them when a network needs one); it is not changed.
func (d *Datapath) replication(p plan.Plan, in flower.Input, byName map[string]nl.Link) error {
	d.flooding = nil
	// The networks to replicate for, and their ports.
	ports := map[string][]string{} // network -> ports
	for ep, rep := range in.Reps {
		n := p.Local[ep].Network
		ports[n] = append(ports[n], rep)
	}
	vx, hasVX := byName[VXLANName]
	br, hasBR := byName[ReplicationName]
	if hasBR && !owned(br) {
		return fmt.Errorf("offload datapath: %s exists and is not Skiff's; broadcast is not replicated", ReplicationName)
	}
	if len(ports) == 0 || !hasVX {
		return d.noReplication(vx, hasVX, br, hasBR)
	}
	var errs []error
	if !hasBR {
		if err := d.k.AddBridge(nl.Bridge{Name: ReplicationName, Alias: replicationAlias, VLANFiltering: true}); err != nil {
			return fmt.Errorf("offload datapath: %w", err)
		}
		l, err := d.k.LinkByName(ReplicationName)
		if err != nil {
			return fmt.Errorf("offload datapath: %w", err)
		}
		br = l
	}
	if !br.Up {
		if err := d.k.SetUp(br.Index); err != nil {
			errs = append(errs, fmt.Errorf("offload datapath: setting %s up: %w", ReplicationName, err))
		}
	}
	vlans, err := d.k.BridgeVLANs()
	if err != nil {
		return fmt.Errorf("offload datapath: %w", err)
	}
	// Each network keeps the VLAN its VNI has on the VXLAN port; a new
	// one takes the lowest free.
	vid := map[uint32]uint16{}
	if vx.Master == br.Index {
		for _, v := range vlans[vx.Index] {
			if v.TunnelID != 0 {
				vid[v.TunnelID] = v.VID
			}
		}
	}
	want := map[uint32]uint16{}
	for _, name := range slices.Sorted(maps.Keys(ports)) {
		if v, ok := vid[p.Networks[name].VNI]; ok {
			want[p.Networks[name].VNI] = v
		}
	}
	used := map[uint16]bool{}
	for _, v := range want {
		used[v] = true
	}
	next := uint16(1)
	for _, name := range slices.Sorted(maps.Keys(ports)) {
		vni := p.Networks[name].VNI
		if _, ok := want[vni]; ok {
			continue
		}
		for next <= maxVID && used[next] {
			next++
		}
		if next > maxVID {
			errs = append(errs, fmt.Errorf("offload datapath: network %s: no VLAN left on %s (%d networks replicated)", name, ReplicationName, maxVID))
			delete(ports, name)
			continue
		}
		want[vni], used[next] = next, true
	}
	// The neighbour suppression wanted; its entries no longer wanted go
	// before any VLAN does (suppress.go).
	sup := suppressWants(p, in, ports, want, vx, byName)
	add, serrs := d.staleEntries(br, vx, byName, sup.fdb)
	errs = append(errs, serrs...)
	// The VXLAN port: its flags, then each network's VLAN and VNI.
	if err := d.bridgePort(vx, br, nl.BridgePort{Isolated: true, VLANTunnel: true}, true); err != nil {
		return err
	}
	wantVX := map[uint16]nl.BridgeVLAN{}
	for vni, v := range want {
		wantVX[v] = nl.BridgeVLAN{LinkIndex: vx.Index, VID: v, TunnelID: vni}
	}
	errs = append(errs, d.portVLANs(vx.Index, vlans[vx.Index], wantVX)...)
	// The access ports: representors and gateways' ports.
	isPort := map[int]bool{}
	for name, reps := range ports {
		v := want[p.Networks[name].VNI]
		access := map[uint16]nl.BridgeVLAN{}
		set := func(dev string, isolated bool) {
			l, ok := byName[dev]
			if !ok {
				return
			}
			isPort[l.Index] = true
			if err := d.bridgePort(l, br, nl.BridgePort{Isolated: isolated}, false); err != nil {
				errs = append(errs, err)
				return
			}
			access[v] = nl.BridgeVLAN{LinkIndex: l.Index, VID: v, Access: true}
			errs = append(errs, d.portVLANs(l.Index, vlans[l.Index], access)...)
		}
		for _, rep := range reps {
			set(rep, false)
		}
		if gw, ok := in.Gateways[name]; ok {
			set(gw.Port, true)
		}
	}
	// Ports no network wants any more leave the bridge.
	for _, l := range byName {
		if l.Master == br.Index && l.Index != vx.Index && !isPort[l.Index] {
			if err := d.k.SetMaster(l.Index, 0); err != nil {
				errs = append(errs, fmt.Errorf("offload datapath: %s out of %s: %w", l.Name, ReplicationName, err))
			}
		}
	}
	// The flood lists.
	flood := map[nl.FDB]bool{}
	d.flooding = map[string]bool{}
	for name := range ports {
		d.flooding[name] = true
		n := p.Networks[name]
		for _, v := range n.FloodVTEPs {
			if v.Is4() && v != p.UnderlayIP {
				flood[floodEntry(vx.Index, n.VNI, v)] = true
			}
		}
	}
	errs = append(errs, d.floodLists(vx.Index, flood)...)
	errs = append(errs, d.suppress(sup, add, br, byName)...)
	return errors.Join(errs...)
}

// floodEntry is the VXLAN device's entry copying what VNI floods to
// VTEP v.
func floodEntry(vx int, vni uint32, v netip.Addr) nl.FDB {
	return nl.FDB{LinkIndex: vx, MAC: allZeros, Dst: v, Self: true, Permanent: true, SrcVNI: vni, VNI: vni}
}

// floodLists makes the VXLAN device's flood entries (all-zero MAC, a
// source VNI) exactly want; entries without a source VNI are not the
// replication path's and stay.
func (d *Datapath) floodLists(vx int, want map[nl.FDB]bool) []error {
	have, err := d.k.FDB(vx)
	if err != nil {
		return []error{fmt.Errorf("offload datapath: %w", err)}
	}
	var errs []error
	seen := map[nl.FDB]bool{}
	var gone, add []nl.FDB
	for _, e := range have {
		if !e.Self || e.MAC != allZeros || e.SrcVNI == 0 {
			continue
		}
		k := floodEntry(vx, e.SrcVNI, e.Dst)
		if want[k] && e.VNI == e.SrcVNI {
			seen[k] = true
			continue
		}
		gone = append(gone, e)
	}
	for _, e := range slices.SortedFunc(maps.Keys(want), func(a, b nl.FDB) int {
		if a.SrcVNI != b.SrcVNI {
			return int(a.SrcVNI) - int(b.SrcVNI)
		}
		return a.Dst.Compare(b.Dst)
	}) {
		if !seen[e] {
			add = append(add, e)
		}
	}
	return append(errs, d.writeFDBs(gone, add)...)
}

// bridgePort makes l a port of br with learning and unknown-unicast
// flooding off, neigh_suppress as suppress, and flags f (Flood is taken
// as off).
func (d *Datapath) bridgePort(l, br nl.Link, f nl.BridgePort, suppress bool) error {
	if l.Master != br.Index {
		if err := d.k.SetMaster(l.Index, br.Index); err != nil {
			return fmt.Errorf("offload datapath: %s into %s: %w", l.Name, ReplicationName, err)
		}
	}
	pf, err := d.k.PortFlags(l.Index)
	if err != nil {
		return fmt.Errorf("offload datapath: %w", err)
	}
	if pf.Learning || pf.NeighSuppress != suppress {
		pf.Learning, pf.NeighSuppress = false, suppress
		if err := d.k.SetPortFlags(l.Index, pf); err != nil {
			return fmt.Errorf("offload datapath: %w", err)
		}
	}
	f.Flood = false
	have, err := d.k.BridgePort(l.Index)
	if err != nil {
		return fmt.Errorf("offload datapath: %w", err)
	}
	if have != f {
		if err := d.k.SetBridgePort(l.Index, f); err != nil {
			return fmt.Errorf("offload datapath: %w", err)
		}
	}
	return nil
}

// portVLANs makes a port's VLANs exactly want (by VID).
func (d *Datapath) portVLANs(index int, have []nl.BridgeVLAN, want map[uint16]nl.BridgeVLAN) []error {
	var errs []error
	for _, v := range have {
		w, ok := want[v.VID]
		if ok && w == v {
			delete(want, v.VID)
			continue
		}
		if !ok {
			if err := d.k.DeleteBridgeVLAN(v); err != nil {
				errs = append(errs, fmt.Errorf("offload datapath: %w", err))
			}
		}
	}
	for _, vid := range slices.Sorted(maps.Keys(want)) {
		if err := d.k.AddBridgeVLAN(want[vid]); err != nil {
			errs = append(errs, fmt.Errorf("offload datapath: %w", err))
		}
	}
	return errs
}

// noReplication removes the replication path: the bridge (its ports
// leave it) and the VXLAN device's flood entries.
func (d *Datapath) noReplication(vx nl.Link, hasVX bool, br nl.Link, hasBR bool) error {
	d.mu.Lock()
	d.suppressing = nil
	d.mu.Unlock()
	var errs []error
	if hasVX {
		errs = append(errs, d.floodLists(vx.Index, nil)...)
	}
	if hasBR {
		d.log.Info("removing unneeded device", "link", ReplicationName)
		if err := d.k.DeleteLink(br.Index); err != nil {
			errs = append(errs, fmt.Errorf("offload datapath: deleting %s: %w", ReplicationName, err))
		}
	}
	return errors.Join(errs...)
}
