// Package software is the datapath of nodes without a SmartNIC: per network
// a Linux bridge and a VXLAN device (learning off, the network's VNI, the
// node's underlay address as local VTEP), static FDB entries for every
// remote endpoint MAC pointing at its VTEP, one all-zero FDB entry per remote
// VTEP for flooding (head-end replication), and static neighbour entries
// with ARP/ND suppression so that the bridge answers for known endpoints.
//
// Every link it creates is named with the "sk" prefix and carries an alias
// starting with "skiff:"; links without both are never touched.
//
//	k, _ := nl.Open("")                     // the node's namespace
//	dp := software.New(software.Options{Kernel: k, Logger: log})
//	err := dp.Apply(p)                      // idempotent: nothing written when the kernel matches
package software

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/datapath/firewall"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
)

// VXLANPort is the UDP port of Skiff's VXLAN devices (IANA).
const VXLANPort = 4789

const (
	aliasPrefix = datapath.AliasPrefix
	zeroMAC     = "00:00:00:00:00:00"
)

// BridgeName and VXLANName name a network's devices after its VNI.
func BridgeName(vni uint32) string { return fmt.Sprintf("skb%d", vni) }

// VXLANName names a network's VXLAN device.
func VXLANName(vni uint32) string { return fmt.Sprintf("skv%d", vni) }

// Owned reports whether a link is Skiff's.
func Owned(l nl.Link) bool {
	return strings.HasPrefix(l.Name, "sk") && strings.HasPrefix(l.Alias, aliasPrefix)
}

// Options configure a Datapath.
type Options struct {
	// Kernel is the node's namespace (required); the datapath closes
	// it with Close.
	Kernel nl.Kernel
	// Open opens pods' namespaces (Plumb); nl.Open when nil.
	Open   nl.OpenFunc
	Logger *slog.Logger
}

// Datapath is the software datapath.
type Datapath struct {
	k    nl.Kernel
	open nl.OpenFunc
	log  *slog.Logger

	gate     datapath.PlumbGate
	mu       sync.Mutex
	attached map[string]string // local endpoint -> "" when attached, else why not
	mtuTold  map[string]int    // network -> the MTU mtuAdvice was logged for
	policy   map[string]int    // policy table writes by kind ("table", "element")
}

// New returns a software datapath on o.Kernel.
func New(o Options) *Datapath {
	if o.Open == nil {
		o.Open = nl.Open
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Datapath{k: o.Kernel, open: o.Open, log: o.Logger, attached: map[string]string{}, mtuTold: map[string]int{}, policy: map[string]int{"table": 0, "element": 0}}
}

// Apply implements datapath.Datapath.
func (d *Datapath) Apply(p plan.Plan) error {
	start := d.gate.Begin()
	att := map[string]string{}
	for name := range p.Local {
		att[name] = "its interface is not plumbed"
	}
	defer func() {
		d.mu.Lock()
		d.attached = att
		d.mu.Unlock()
		d.gate.Done(start)
	}()
	links, err := d.k.Links()
	if err != nil {
		for name := range att {
			att[name] = "links could not be listed: " + err.Error()
		}
		return err
	}
	byName := map[string]nl.Link{}
	for _, l := range links {
		byName[l.Name] = l
	}
	var errs []error
	want := map[string]bool{}
	var bridges []firewall.Device
	st := datapath.NewHostRouting()
	for _, n := range p.Networks {
		br, vx := BridgeName(n.VNI), VXLANName(n.VNI)
		want[br], want[vx] = true, true
		b := firewall.Device{Name: br, Egress: n.Egress}
		if hostPorts(p, n) {
			b.HostPort, b.HostMAC = HostPortName(n.VNI), HostMAC(n.VNI, p.UnderlayIP)
			want[b.HostPort], want[HostPeerName(n.VNI)] = true, true
		}
		bridges = append(bridges, b)
		if err := d.network(p, n, byName, att, &st); err != nil {
			errs = append(errs, fmt.Errorf("network %s (vni %d): %w", n.Name, n.VNI, err))
		}
	}
	if err := datapath.SyncHostRouting(d.k, st); err != nil {
		errs = append(errs, err)
	}
	if _, err := d.k.SetTable(firewall.Isolation(bridges)); err != nil {
		errs = append(errs, err)
	}
	if slices.ContainsFunc(slices.Collect(maps.Values(p.Networks)), datapath.RoutesOut) {
		// Traffic leaving the overlay is routed by the node.
		errs = append(errs, firewall.EnableForwarding(d.k, d.log, slices.ContainsFunc(slices.Collect(maps.Values(p.Networks)), datapath.RoutesIPv6)))
		// Services: kube-proxy's DNAT of a pod's packet to a pod of
		// the same network is answered over the bridge, where only
		// br_netfilter's conntrack undoes it.
		errs = append(errs, firewall.EnableBridgeNetfilter(d.k))
	}
	if err := d.enforce(p); err != nil {
		errs = append(errs, err)
	}
	// Delete last: taps of VM ports no plan holds (deleted while the
	// agent was down), then Skiff's bridges and VXLAN devices no plan
	// holds.
	for _, l := range datapath.StaleTaps(links, func(ep string) bool { _, ok := p.Local[ep]; return ok }) {
		d.log.Info("removing the tap of a port that is gone", "link", l.Name, "alias", l.Alias)
		if err := d.k.DeleteLink(l.Index); err != nil {
			errs = append(errs, err)
		}
	}
	for _, l := range links {
		if !Owned(l) || want[l.Name] || !(strings.HasPrefix(l.Name, "skb") || strings.HasPrefix(l.Name, "skv") || strings.HasPrefix(l.Name, "skn")) {
			continue
		}
		d.log.Info("removing unplanned device", "link", l.Name)
		if err := d.k.DeleteLink(l.Index); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// mtuAdvice says why a network's MTU does not fit a 1500-byte underlay
// of the node's family when the underlay is IPv6 ("" when it fits, and
// for IPv4, whose 50 bytes the default 1450 already leaves): VXLAN over
// IPv6 adds 70 bytes (outer IPv6 40, UDP 8, VXLAN 8, inner Ethernet 14).
// The underlay may well be larger (jumbo frames), so it is advice.
func mtuAdvice(underlay netip.Addr, mtu int) string {
	if !underlay.Is6() || mtu <= 1500-70 {
		return ""
	}
	return fmt.Sprintf("VXLAN over IPv6 adds 70 bytes: a %d-byte packet needs an underlay MTU of %d; on a 1500-byte underlay set the network's MTU to 1430 or less (skiffctl network create --mtu 1430)", mtu, mtu+70)
}

// ensureLink returns the link name, creating it with add when missing. A
// link of that name that is not Skiff's is an error: it is never touched.
func (d *Datapath) ensureLink(byName map[string]nl.Link, name string, ok func(nl.Link) bool, add func() error) (nl.Link, error) {
	l, exists := byName[name]
	if exists && !Owned(l) {
		return nl.Link{}, fmt.Errorf("%s exists and is not Skiff's; leaving it alone", name)
	}
	if exists && !ok(l) {
		d.log.Info("recreating device whose settings cannot change in place", "link", name)
		if err := d.k.DeleteLink(l.Index); err != nil {
			return nl.Link{}, err
		}
		exists = false
	}
	if !exists {
		if err := add(); err != nil {
			return nl.Link{}, err
		}
		links, err := d.k.Links()
		if err != nil {
			return nl.Link{}, err
		}
		for _, x := range links {
			byName[x.Name] = x
		}
		if l, exists = byName[name]; !exists {
			return nl.Link{}, fmt.Errorf("%s was created but is not listed", name)
		}
	}
	return l, nil
}

func (d *Datapath) network(p plan.Plan, n plan.Network, byName map[string]nl.Link, att map[string]string, st *datapath.HostRouting) error {
	for name, e := range p.Local {
		if e.Network == n.Name {
			if _, ok := byName[datapath.HostIfName(name)]; ok {
				att[name] = "its network's devices are not ready"
			}
		}
	}
	mtu := int(n.MTU)
	if mtu == 0 {
		mtu = plan.DefaultMTU
	}
	if !p.UnderlayIP.IsValid() {
		return fmt.Errorf("the node has no underlay address")
	}
	if why := mtuAdvice(p.UnderlayIP, mtu); why != "" {
		d.mu.Lock()
		told := d.mtuTold[n.Name] == mtu
		d.mtuTold[n.Name] = mtu
		d.mu.Unlock()
		if !told {
			d.log.Warn("network MTU too large for a 1500-byte IPv6 underlay", "network", n.Name, "mtu", mtu, "why", why)
		}
	}
	brName, vxName := BridgeName(n.VNI), VXLANName(n.VNI)
	br, err := d.ensureLink(byName, brName, func(l nl.Link) bool { return l.Kind == "bridge" }, func() error {
		return d.k.AddBridge(nl.Bridge{Name: brName, MTU: mtu, Alias: aliasPrefix + "bridge:" + n.Name})
	})
	if err != nil {
		return err
	}
	vx, err := d.ensureLink(byName, vxName, func(l nl.Link) bool {
		return l.Kind == "vxlan" && l.VNI == n.VNI && l.Local == p.UnderlayIP && l.Port == VXLANPort && !l.Learning
	}, func() error {
		return d.k.AddVXLAN(nl.VXLAN{Name: vxName, VNI: n.VNI, Local: p.UnderlayIP, Port: VXLANPort, MTU: mtu, Alias: aliasPrefix + "vxlan:" + n.Name})
	})
	if err != nil {
		return err
	}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	for _, l := range []nl.Link{br, vx} {
		if l.MTU != mtu {
			add(d.k.SetMTU(l.Index, mtu))
		}
	}
	if gw := datapath.GatewayMAC(n.VNI); br.MAC != gw {
		add(d.k.SetMAC(br.Index, gw))
	}
	add(d.gateways(n, br))
	if vx.Master != br.Index {
		add(d.k.SetMaster(vx.Index, br.Index))
	}
	add(d.portFlags(vx.Index, nl.PortFlags{Learning: false, NeighSuppress: true}))
	for _, l := range []nl.Link{vx, br} {
		if !l.Up {
			add(d.k.SetUp(l.Index))
		}
	}
	// Local endpoints' host interfaces join the bridge.
	for _, e := range p.Local {
		if e.Network != n.Name {
			continue
		}
		hl, ok := byName[datapath.HostIfName(e.Name)]
		if !ok || !Owned(hl) {
			continue // not plumbed yet: Plumb creates it
		}
		var eerrs []error
		if hl.Master != br.Index {
			eerrs = append(eerrs, d.k.SetMaster(hl.Index, br.Index))
		}
		// Hairpin: a pod reaching itself through a Service.
		eerrs = append(eerrs, d.portFlags(hl.Index, nl.PortFlags{Learning: true, NeighSuppress: true, Hairpin: n.Egress == plan.EgressSNAT || n.Egress == plan.EgressRouted}))
		if !hl.Up {
			eerrs = append(eerrs, d.k.SetUp(hl.Index))
		}
		if err := errors.Join(eerrs...); errors.Is(err, nl.ErrLinkGone) {
			// Unplumbed, or gone with its namespace, since the listing:
			// not plumbed, and no failure (the deletion's netlink event
			// brings the next reconcile).
			att[e.Name] = "its interface is not plumbed"
		} else if err != nil {
			att[e.Name] = "attaching " + hl.Name + " to " + br.Name + ": " + err.Error()
			add(err)
		} else {
			att[e.Name] = ""
		}
	}
	if hostPorts(p, n) {
		add(d.hostPort(p, n, br, byName, mtu, st))
	}
	add(d.fdb(p, n, vx))
	add(d.neighs(p, n, br))
	return errors.Join(errs...)
}

// gateways puts every subnet's gateway address on the network's bridge, so
// the gateway answers on every node, and removes addresses no subnet has.
func (d *Datapath) gateways(n plan.Network, br nl.Link) error {
	want := map[netip.Prefix]bool{}
	for _, s := range n.Subnets {
		if s.Gateway.IsValid() {
			want[netip.PrefixFrom(s.Gateway, s.CIDR.Bits())] = true
		}
	}
	have, err := d.k.Addrs(br.Index)
	if err != nil {
		return err
	}
	var errs []error
	haveSet := map[netip.Prefix]bool{}
	for _, a := range have {
		haveSet[a] = true
	}
	for a := range want {
		if !haveSet[a] {
			errs = append(errs, d.k.AddAddr(br.Index, a))
		}
	}
	for a := range haveSet {
		if !want[a] {
			errs = append(errs, d.k.DeleteAddr(br.Index, a))
		}
	}
	return errors.Join(errs...)
}

func (d *Datapath) portFlags(index int, want nl.PortFlags) error {
	have, err := d.k.PortFlags(index)
	if err != nil {
		return err
	}
	if have == want {
		return nil
	}
	return d.k.SetPortFlags(index, want)
}

// fdb reconciles the VXLAN device's forwarding entries: for each remote
// endpoint, a VXLAN entry (self, to its VTEP) and a bridge entry (master,
// static, to the VXLAN port); one all-zero VXLAN entry per flood VTEP.
// Only entries of those shapes are Skiff's; the kernel's own entries
// (the port's address, multicast) are left alone.
func (d *Datapath) fdb(p plan.Plan, n plan.Network, vx nl.Link) error {
	wantDst := map[string]netip.Addr{} // unicast MAC -> VTEP
	wantFlood := map[netip.Addr]bool{}
	for _, r := range p.Remote {
		if r.Network == n.Name {
			wantDst[r.MAC] = r.VTEP
		}
	}
	for _, v := range n.FloodVTEPs {
		wantFlood[v] = true
	}
	for v, mac := range hostRemote(p, n) {
		wantDst[mac] = v
	}
	have, err := d.k.FDB(vx.Index)
	if err != nil {
		return err
	}
	haveDst := map[string]nl.FDB{}
	haveFlood := map[netip.Addr]nl.FDB{}
	haveBridge := map[string]nl.FDB{}
	for _, e := range have {
		switch {
		case e.Self && e.Dst.IsValid() && e.MAC == zeroMAC:
			haveFlood[e.Dst] = e
		case e.Self && e.Dst.IsValid():
			haveDst[e.MAC] = e
		case e.Master && e.Static && !e.Permanent:
			haveBridge[e.MAC] = e
		}
	}
	var errs []error
	for mac, vtep := range wantDst {
		if h, ok := haveDst[mac]; !ok || h.Dst != vtep {
			errs = append(errs, d.k.SetFDB(nl.FDB{LinkIndex: vx.Index, MAC: mac, Dst: vtep, Self: true, Permanent: true}))
		}
		if _, ok := haveBridge[mac]; !ok {
			errs = append(errs, d.k.SetFDB(nl.FDB{LinkIndex: vx.Index, MAC: mac, Master: true, Static: true}))
		}
	}
	for v := range wantFlood {
		if _, ok := haveFlood[v]; !ok {
			errs = append(errs, d.k.AddFDB(nl.FDB{LinkIndex: vx.Index, MAC: zeroMAC, Dst: v, Self: true, Permanent: true}))
		}
	}
	for mac, e := range haveDst {
		if _, ok := wantDst[mac]; !ok {
			errs = append(errs, d.k.DeleteFDB(e))
		}
	}
	for mac, e := range haveBridge {
		if _, ok := wantDst[mac]; !ok {
			errs = append(errs, d.k.DeleteFDB(e))
		}
	}
	for v, e := range haveFlood {
		if !wantFlood[v] {
			errs = append(errs, d.k.DeleteFDB(e))
		}
	}
	return errors.Join(errs...)
}

// neighs reconciles the bridge's static neighbour entries, which the
// bridge uses to answer ARP and ND for known endpoints (suppression). The
// kernel's dynamic entries are left alone.
func (d *Datapath) neighs(p plan.Plan, n plan.Network, br nl.Link) error {
	want := map[netip.Addr]string{}
	for _, e := range p.Local {
		if e.Network == n.Name {
			for _, ip := range e.IPs {
				want[ip.Addr()] = e.MAC
			}
		}
	}
	for _, r := range p.Remote {
		if r.Network == n.Name {
			for _, ip := range r.IPs {
				want[ip.Addr()] = r.MAC
			}
		}
	}
	for a, mac := range hostRemoteAddrs(p, n) {
		want[a] = mac
	}
	return datapath.SyncPermanentNeighs(d.k, br.Index, want)
}

// enforce enforces the plan's compiled policies in nftables: local
// endpoints are known by their network's bridge and their addresses.
func (d *Datapath) enforce(p plan.Plan) error {
	pol := firewall.Policy{Groups: map[string][]netip.Addr{}}
	for name, g := range p.Groups {
		pol.Groups[name] = g.Members
	}
	for _, name := range slices.Sorted(maps.Keys(p.Policies)) {
		ep := p.Policies[name]
		e, ok := p.Local[name]
		if !ok {
			continue
		}
		n, ok := p.Networks[e.Network]
		if !ok {
			continue
		}
		x := firewall.Endpoint{Name: name, Device: BridgeName(n.VNI), IngressIsolated: ep.IngressIsolated, EgressIsolated: ep.EgressIsolated,
			Ingress: firewall.Rules(ep.Ingress), Egress: firewall.Rules(ep.Egress)}
		for _, ip := range e.IPs {
			x.IPs = append(x.IPs, ip.Addr())
		}
		pol.Endpoints = append(pol.Endpoints, x)
	}
	if len(pol.Endpoints) > 0 {
		if err := firewall.EnableBridgeNetfilter(d.k); err != nil {
			return err
		}
	}
	change, err := d.k.SetTable(pol.Table())
	d.mu.Lock()
	firewall.CountWrites(d.policy, change)
	d.mu.Unlock()
	return err
}
