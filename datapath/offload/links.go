package offload

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
)

func mtu(p plan.Plan) int {
	m := 0
	for _, n := range p.Networks {
		m = max(m, int(n.MTU))
	}
	if m == 0 {
		m = plan.DefaultMTU
	}
	return m
}

// ensureVXLAN makes the external-mode VXLAN device exist, up, with the
// plan's largest MTU. A device of that name that is not Skiff's is an
// error; a Skiff one with settings that cannot change in place is
// recreated.
func (d *Datapath) ensureVXLAN(cur nl.Link, exists bool, mtu int) (nl.Link, error) {
	if exists {
		if !owned(cur) {
			return nl.Link{}, fmt.Errorf("%s exists and is not Skiff's; leaving it alone", VXLANName)
		}
		if cur.Kind != "vxlan" || !cur.External || cur.Learning || cur.Port != flower.VXLANPort {
			d.log.Info("recreating device whose settings cannot change in place", "link", VXLANName)
			if err := d.k.DeleteLink(cur.Index); err != nil {
				return nl.Link{}, fmt.Errorf("deleting %s: %w", VXLANName, err)
			}
			exists = false
		}
	}
	if !exists {
		if err := d.k.AddVXLAN(nl.VXLAN{Name: VXLANName, MTU: mtu, Port: flower.VXLANPort, Alias: vxlanAlias, External: true}); err != nil {
			return nl.Link{}, fmt.Errorf("creating %s (external, port %d): %w", VXLANName, flower.VXLANPort, err)
		}
		byName, err := d.links()
		if err != nil {
			return nl.Link{}, err
		}
		if cur, exists = byName[VXLANName]; !exists {
			return nl.Link{}, fmt.Errorf("%s was created but is not listed", VXLANName)
		}
	}
	if cur.MTU != mtu {
		if err := d.k.SetMTU(cur.Index, mtu); err != nil {
			return nl.Link{}, fmt.Errorf("mtu of %s: %w", VXLANName, err)
		}
	}
	if !cur.Up {
		if err := d.k.SetUp(cur.Index); err != nil {
			return nl.Link{}, fmt.Errorf("setting %s up: %w", VXLANName, err)
		}
	}
	return cur, nil
}

// neighbours asks the kernel to resolve the underlay next hop of every
// remote VTEP that has no valid neighbour entry (NTF_USE: an ARP probe
// now, not when the first tunnelled packet needs it), so that encap rules
// are not held in the slow path by an unresolved neighbour.
// It keeps how many users each VTEP has (vtepUse), so that a remote
// endpoint change resolves only VTEPs new to the node. A VTEP whose next
// hop was found usable is not looked up again while it stays in the
// plan (a whole Apply of a network of 5,000 VTEPs would otherwise make
// 5,000 route lookups); one still unresolved is asked for again.
func (d *Datapath) neighbours(p plan.Plan) error {
	d.vteps = vtepUse(p)
	want := make(map[netip.Addr]bool, len(d.vteps))
	for v := range d.vteps {
		if !d.usable[v] {
			want[v] = true
		}
	}
	for v := range d.usable {
		if _, ok := d.vteps[v]; !ok {
			delete(d.usable, v)
		}
	}
	return d.resolve(want)
}

// vtepUse counts the users of each VTEP of p: networks flooding to it
// and remote endpoints (of a network of p) behind it. The tunnel is
// IPv4: an IPv6 VTEP is not one of its (the compile refuses a network
// with a remote endpoint behind one).
func vtepUse(p plan.Plan) map[netip.Addr]int {
	use := map[netip.Addr]int{}
	for _, n := range p.Networks {
		for _, v := range n.FloodVTEPs {
			if v.Is4() {
				use[v]++
			}
		}
	}
	for _, r := range p.Remote {
		if v, ok := remoteVTEP(p, r); ok {
			use[v]++
		}
	}
	return use
}

// remoteVTEP is the VTEP of r that vtepUse counts.
func remoteVTEP(p plan.Plan, r plan.Remote) (netip.Addr, bool) {
	_, ok := p.Networks[r.Network]
	return r.VTEP, ok && r.VTEP.Is4()
}

// resolve asks the kernel to resolve the underlay next hops of the VTEPs
// in want that have no valid neighbour entry.
func (d *Datapath) resolve(want map[netip.Addr]bool) error {
	var errs []error
	cache := map[int][]netip.Addr{}
	for _, v := range slices.SortedFunc(maps.Keys(want), netip.Addr.Compare) {
		d.mu.Lock()
		d.lookups++
		d.mu.Unlock()
		route, err := d.k.RouteTo(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("offload datapath: no underlay route to VTEP %s: %w", v, err))
			continue
		}
		hop, link := v, route.LinkIndex
		if route.Gateway.IsValid() {
			hop = route.Gateway
		}
		if route.Local {
			d.found(v)
			continue
		}
		valid, ok := cache[link]
		if !ok {
			if valid, err = d.usableNeighs(link); err != nil {
				errs = append(errs, fmt.Errorf("offload datapath: neighbours of link %d: %w", link, err))
				continue
			}
			cache[link] = valid
		}
		if slices.Contains(valid, hop) {
			d.found(v)
			continue
		}
		d.mu.Lock()
		d.probes++
		d.mu.Unlock()
		if err := d.k.Resolve(link, hop); err != nil {
			errs = append(errs, fmt.Errorf("offload datapath: resolving underlay next hop %s of VTEP %s: %w", hop, v, err))
		}
	}
	return errors.Join(errs...)
}

// found records that VTEP v's next hop is usable.
func (d *Datapath) found(v netip.Addr) {
	if d.usable == nil {
		d.usable = map[netip.Addr]bool{}
	}
	d.usable[v] = true
}

// usableNeighs lists the IPv4 neighbours of a link that packets can use
// now.
func (d *Datapath) usableNeighs(link int) ([]netip.Addr, error) {
	ns, err := d.k.Neighs(link)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, n := range ns {
		if n.Usable && n.IP.Is4() {
			out = append(out, n.IP)
		}
	}
	return out, nil
}

// GatewayName and GatewayPortName name the veth pair of a network's
// gateway: GatewayName holds the gateway addresses in the node's stack,
// GatewayPortName is where the rules send traffic for it.
func GatewayName(vni uint32) string { return fmt.Sprintf("skg%d", vni) }

// GatewayPortName names the eswitch side of a network's gateway.
func GatewayPortName(vni uint32) string { return fmt.Sprintf("skh%d", vni) }

// gateways gives every network with a plumbed local endpoint and a subnet
// gateway a veth pair holding the gateway addresses (and the network's
// gateway MAC) in the node's stack, made with forwarding off (egress
// turns it on for networks that route out), and removes the pairs of
// networks that need none.
func (d *Datapath) gateways(p plan.Plan, reps map[string]string, byName map[string]nl.Link) (map[string]flower.Gateway, error) {
	out := map[string]flower.Gateway{}
	want := map[string]bool{}
	tried := map[string]bool{}
	var errs []error
	for name := range reps {
		n, ok := p.Networks[p.Local[name].Network]
		if !ok || tried[n.Name] {
			continue
		}
		tried[n.Name] = true
		var addrs []netip.Prefix
		var ips []netip.Addr
		for _, sn := range n.Subnets {
			if sn.Gateway.IsValid() { // IPv4 and IPv6 (added without DAD)
				addrs = append(addrs, netip.PrefixFrom(sn.Gateway, sn.CIDR.Bits()))
				ips = append(ips, sn.Gateway)
			}
		}
		if len(addrs) == 0 {
			continue
		}
		gw, port := GatewayName(n.VNI), GatewayPortName(n.VNI)
		want[gw], want[port] = true, true
		if err := d.gatewayPair(gw, port, n, addrs, byName); err != nil {
			errs = append(errs, fmt.Errorf("offload datapath: gateway of %s: %w", n.Name, err))
			continue
		}
		out[n.Name] = flower.Gateway{Port: port, MAC: datapath.GatewayMAC(n.VNI), IPs: ips}
	}
	for name, l := range byName {
		if owned(l) && strings.HasPrefix(name, "skg") && !want[name] {
			d.log.Info("removing unneeded gateway", "link", name)
			if err := d.k.DeleteLink(l.Index); err != nil { // its peer goes with it
				errs = append(errs, fmt.Errorf("offload datapath: deleting %s: %w", name, err))
			}
		}
	}
	return out, errors.Join(errs...)
}

func (d *Datapath) gatewayPair(gw, port string, n plan.Network, addrs []netip.Prefix, byName map[string]nl.Link) error {
	return d.ensurePair(vethPair{name: gw, peer: port, mac: datapath.GatewayMAC(n.VNI),
		alias: aliasPrefix + "gateway:" + n.Name, peerAlias: aliasPrefix + "gateway-port:" + n.Name, addrs: addrs,
		// Off until egress says otherwise (a new device takes the
		// node's default, on when the node forwards).
		created: func() error {
			if err := d.gatewayForwarding(gw, false); err != nil {
				return fmt.Errorf("forwarding off on %s: %w", gw, err)
			}
			return nil
		}}, n, byName)
}

// vethPair is a veth pair of Skiff's with both ends in the node's
// stack: name, with its MAC (at creation) and exactly addrs, and peer,
// the end the flower rules use as a port; each marked with its alias;
// created, when set, runs once both are made.
type vethPair struct {
	name, peer, mac  string
	alias, peerAlias string
	addrs            []netip.Prefix
	created          func() error
}

// ensurePair makes a vethPair exist, up, with its network's MTU at
// creation and its addresses, recreating it when one end is missing.
func (d *Datapath) ensurePair(x vethPair, n plan.Network, byName map[string]nl.Link) error {
	gw, port := x.name, x.peer
	mtu := int(n.MTU)
	if mtu == 0 {
		mtu = plan.DefaultMTU
	}
	l, ok := byName[gw]
	if ok && !owned(l) {
		return fmt.Errorf("%s exists and is not Skiff's; leaving it alone", gw)
	}
	if pl, pok := byName[port]; !ok || !pok {
		// One end alone (the other deleted by hand): it goes, with
		// its peer if it has one, and the pair is made again.
		for _, x := range []struct {
			l      nl.Link
			exists bool
		}{{l, ok}, {pl, pok && !ok}} {
			if !x.exists {
				continue
			}
			if !owned(x.l) {
				return fmt.Errorf("%s exists and is not Skiff's; leaving it alone", x.l.Name)
			}
			if err := d.k.DeleteLink(x.l.Index); err != nil {
				return err
			}
		}
		if err := d.k.AddPair(nl.Pair{Name: gw, Peer: port, MTU: mtu, MAC: x.mac, Alias: x.alias, PeerAlias: x.peerAlias}); err != nil {
			return fmt.Errorf("creating %s/%s: %w", gw, port, err)
		}
		now, err := d.links()
		if err != nil {
			return err
		}
		for _, name := range []string{gw, port} {
			made, ok := now[name]
			if !ok {
				return fmt.Errorf("%s was created but is not listed", name)
			}
			byName[name] = made
		}
		if x.created != nil {
			if err := x.created(); err != nil {
				return err
			}
		}
	}
	for _, name := range []string{gw, port} {
		if lk := byName[name]; !lk.Up {
			if err := d.k.SetUp(lk.Index); err != nil {
				return err
			}
		}
	}
	have, err := d.k.Addrs(byName[gw].Index)
	if err != nil {
		return err
	}
	seen := map[netip.Prefix]bool{}
	for _, a := range have { // link-local addresses are not listed
		seen[a] = true
		if !slices.Contains(x.addrs, a) {
			if err := d.k.DeleteAddr(byName[gw].Index, a); err != nil {
				return err
			}
		}
	}
	for _, a := range x.addrs {
		if !seen[a] {
			if err := d.k.AddAddr(byName[gw].Index, a); err != nil {
				return fmt.Errorf("address %s on %s: %w", a, gw, err)
			}
		}
	}
	return nil
}
