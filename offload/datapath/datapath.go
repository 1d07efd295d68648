// Package datapath is Skiff's offload datapath: the plan executed as
// tc-flower rules on the representors of a switchdev eswitch, which the NIC
// runs in hardware where it can.
//
// One VXLAN device in external (collect-metadata) mode, learning off, on
// port 4789 (named skvx, alias "skiff:vxlan:external") carries every VNI.
// Every representor of a local endpoint and the VXLAN device get a clsact
// qdisc and the rules that offload/flower compiles; underlay neighbours of
// remote VTEPs are resolved ahead of time, so that encap rules do not wait
// in the slow path for ARP.
//
//	dp, err := datapath.New(datapath.Options{Logger: log, Representor: reps})
//	err = dp.Apply(p)
//	states := dp.Rules() // per endpoint: in hardware, software or refused (+ reason), counters
package datapath

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	agentdp "github.com/skiff-sdn/skiff/agent/datapath"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/eswitch"
	"github.com/skiff-sdn/skiff/offload/flower"
)

// VXLANName is the name of the external-mode VXLAN device.
const VXLANName = "skvx"

const (
	aliasPrefix = agentdp.AliasPrefix
	vxlanAlias  = aliasPrefix + "vxlan:external"
)

// Options configures a Datapath.
type Options struct {
	Logger *slog.Logger
	// NetNS is the namespace to work in; zero (or closed, -1): the caller's.
	NetNS netns.NsHandle
	// Representor names the netdevs of a local endpoint on the eswitch;
	// false when it has none (yet). When nil, Eswitch discovery finds
	// them (PortOf).
	Representor func(e plan.Endpoint) (Port, bool)
	// Eswitch discovers the node's PFs and representors when
	// Representor is nil; the current namespace's sysfs when nil.
	Eswitch *eswitch.Discoverer
	// TunnelHardware asks for hardware on the VXLAN device's rules too
	// (a NIC offloads decap from tunnel devices through indirect blocks).
	TunnelHardware bool
}

// Port is where a local endpoint meets the eswitch.
type Port struct {
	// Rep is the representor: its ingress holds the endpoint's rules.
	Rep string
	// Target, when set, is a veth standing in for the VF behind Rep (a
	// test rig whose NIC has no VF netdevs): its traffic is moved into
	// Rep's ingress, and traffic for the endpoint is sent to it.
	Target string
}

// Datapath is the offload datapath.
type Datapath struct {
	opts Options
	log  *slog.Logger
	h    *netlink.Handle
	prog *flower.Programmer
	pol  *flower.PolicyProgrammer

	op sync.Mutex // one netlink conversation at a time: Apply or Rules

	mu     sync.Mutex
	states []flower.State
	devs   map[string]flower.Device
	rules  []flower.Rule
	// The policy pipeline (chains 0-2) as last installed.
	polRules  []flower.PolicyRule
	polStates []flower.PolicyState
	linkW     int // link writes
	probes    int // neighbour resolutions asked for
}

// New opens the netlink sockets of a datapath.
func New(o Options) (*Datapath, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Representor == nil {
		disc := o.Eswitch
		if disc == nil {
			disc = eswitch.New(eswitch.Options{Logger: o.Logger})
		}
		o.Representor = (&eswitchPorts{disc: disc}).lookup
	}
	var h *netlink.Handle
	var err error
	if o.NetNS > 0 {
		h, err = netlink.NewHandleAt(o.NetNS, unix.NETLINK_ROUTE)
	} else {
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	}
	if err != nil {
		return nil, fmt.Errorf("offload datapath: netlink: %w", err)
	}
	ns := 0
	if o.NetNS > 0 {
		ns = int(o.NetNS)
	}
	prog, err := flower.Open(ns, o.Logger)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("offload datapath: %w", err)
	}
	pol, err := flower.OpenPolicyProgrammer(ns, o.Logger)
	if err != nil {
		prog.Close()
		h.Close()
		return nil, fmt.Errorf("offload datapath: %w", err)
	}
	return &Datapath{opts: o, log: o.Logger, h: h, prog: prog, pol: pol}, nil
}

// Close releases the netlink sockets; kernel objects stay.
func (d *Datapath) Close() {
	d.pol.Close()
	d.prog.Close()
	d.h.Close()
}

// Writes is the number of netlink writes that changed configuration so
// far (links, qdiscs, filters).
func (d *Datapath) Writes() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.prog.Writes() + d.pol.Writes() + d.linkW
}

// PolicyWrites is the number of policy filters added, replaced or
// deleted so far.
func (d *Datapath) PolicyWrites() int { return d.pol.Writes() }

// PolicyRules returns the state of every policy filter of the last Apply,
// with counters read now (the last Apply's when the kernel cannot be read).
func (d *Datapath) PolicyRules() []flower.PolicyState {
	d.op.Lock()
	defer d.op.Unlock()
	d.mu.Lock()
	devs, rules, states := d.devs, d.polRules, d.polStates
	d.mu.Unlock()
	if len(rules) == 0 {
		return states
	}
	now, err := d.pol.Read(devs, rules)
	if err != nil {
		d.log.Warn("reading policy rules", "err", err)
		return states
	}
	return now
}

// PolicyCounters sums the counters of the policy filters per endpoint,
// direction and rule of its policy (-1: the default deny): the packets
// that opened a connection through the rule, or were dropped.
func (d *Datapath) PolicyCounters() ([]nl.PolicyCounter, error) {
	type key struct {
		ep, dir string
		rule    int
	}
	sum := map[key]*nl.PolicyCounter{}
	var keys []key
	for _, s := range d.PolicyRules() {
		r := s.Rule
		if r.Endpoint == "" || r.Direction == "" {
			continue
		}
		dir := nl.PolicyIngress
		if r.Direction == flower.Egress {
			dir = nl.PolicyEgress
		}
		k := key{r.Endpoint, dir, r.RuleIndex}
		c, ok := sum[k]
		if !ok {
			c = &nl.PolicyCounter{Endpoint: r.Endpoint, Direction: dir, Rule: r.RuleIndex}
			sum[k] = c
			keys = append(keys, k)
		}
		c.Packets += s.Packets
		c.Bytes += s.Bytes
	}
	slices.SortFunc(keys, func(a, b key) int {
		if c := strings.Compare(a.ep, b.ep); c != 0 {
			return c
		}
		if c := strings.Compare(a.dir, b.dir); c != 0 {
			return c
		}
		return a.rule - b.rule
	})
	out := make([]nl.PolicyCounter, len(keys))
	for i, k := range keys {
		out[i] = *sum[k]
	}
	return out, nil
}

// Probes is the number of underlay neighbour resolutions asked for so far
// (they change no configuration; a VTEP that does not answer is asked
// for again at every Apply).
func (d *Datapath) Probes() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.probes
}

// Rules returns the state of every rule of the last Apply, with counters
// read now, by the local endpoint it serves ("" for a network's rules).
// When the kernel cannot be read, the states of the last Apply are
// returned.
func (d *Datapath) Rules() map[string][]flower.State {
	d.op.Lock()
	d.mu.Lock()
	devs, rules, states := d.devs, d.rules, d.states
	d.mu.Unlock()
	if len(rules) > 0 {
		if now, err := d.prog.Read(devs, rules); err == nil {
			states = now
		} else {
			d.log.Warn("reading offload rules", "err", err)
		}
	}
	d.op.Unlock()
	out := map[string][]flower.State{}
	for _, s := range states {
		out[s.Rule.Endpoint] = append(out[s.Rule.Endpoint], s)
	}
	return out
}

// Owned reports whether a link is Skiff's.
func owned(a *netlink.LinkAttrs) bool {
	return strings.HasPrefix(a.Name, "sk") && strings.HasPrefix(a.Alias, aliasPrefix)
}

// Apply implements the agent's datapath.Datapath.
func (d *Datapath) Apply(p plan.Plan) error {
	d.op.Lock()
	defer d.op.Unlock()
	links, err := d.h.LinkList()
	if err != nil {
		return fmt.Errorf("offload datapath: listing links: %w", err)
	}
	byName := map[string]netlink.Link{}
	for _, l := range links {
		byName[l.Attrs().Name] = l
	}
	reps, targets := map[string]string{}, map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(p.Local)) {
		port, ok := d.opts.Representor(p.Local[name])
		if _, exists := byName[port.Rep]; !ok || !exists {
			continue
		}
		reps[name] = port.Rep
		if _, exists := byName[port.Target]; port.Target != "" && exists {
			targets[name] = port.Target
		}
	}
	var errs []error
	gws, err := d.gateways(p, reps, byName)
	if err != nil {
		errs = append(errs, err)
	}
	if len(gws) > 0 {
		// New gateway ports must be known as devices below.
		if links, err = d.h.LinkList(); err != nil {
			return fmt.Errorf("offload datapath: listing links: %w", err)
		}
		for _, l := range links {
			byName[l.Attrs().Name] = l
		}
	}
	in := flower.Input{Reps: reps, Targets: targets, Gateways: gws, VXLAN: VXLANName}
	rules, err := flower.Compile(p, in)
	if err != nil {
		return fmt.Errorf("offload datapath: %w", err)
	}
	// A policy that does not compile leaves the installed one in place.
	polRules, polErr := flower.CompilePolicy(p, in, rules)
	if polErr != nil {
		errs = append(errs, fmt.Errorf("offload datapath: policy: %w", polErr))
	}
	vx, hasVX := byName[VXLANName]
	if len(rules) > 0 {
		if vx, err = d.ensureVXLAN(vx, p, mtu(p)); err != nil {
			return fmt.Errorf("offload datapath: %w", err)
		}
		byName[VXLANName], hasVX = vx, true
	}
	// Every device that may hold Skiff rules: the VXLAN device, every
	// switchdev port (a representor whose endpoint left keeps rules until
	// we remove them) and Skiff's own interfaces.
	devs := map[string]flower.Device{}
	for _, l := range links {
		a := l.Attrs()
		if a.PhysSwitchID != 0 || (owned(a) && a.Name != VXLANName) {
			devs[a.Name] = d.device(a)
		}
	}
	for _, r := range append(slices.Collect(maps.Values(reps)), slices.Collect(maps.Values(targets))...) {
		l := byName[r]
		devs[r] = d.device(l.Attrs())
		// A representor (or the host side standing in for one) carries
		// nothing while down.
		if l.Attrs().Flags&net.FlagUp == 0 {
			d.write()
			if err := d.h.LinkSetUp(l); err != nil {
				errs = append(errs, fmt.Errorf("offload datapath: setting %s up: %w", r, err))
			}
		}
	}
	if hasVX {
		dev := flower.Device{Name: VXLANName, Index: vx.Attrs().Index, Hardware: d.opts.TunnelHardware}
		if !dev.Hardware {
			dev.Reason = "no switchdev eswitch on this node: tunnel rules are not offered to hardware"
		}
		devs[VXLANName] = dev
	}
	var withRules []flower.Device
	seen := map[string]bool{}
	for _, r := range rules {
		if !seen[r.Dev] {
			seen[r.Dev] = true
			withRules = append(withRules, devs[r.Dev])
		}
	}
	if err := d.prog.EnsureClsact(withRules); err != nil {
		errs = append(errs, err)
	}
	// The policy pipeline first (chain 0 leads to the forwarding chain),
	// then forwarding, then the policy filters nobody wants.
	var polStates []flower.PolicyState
	var stale []flower.PolicyFilter
	if polErr == nil {
		if polStates, stale, err = d.pol.Install(devs, polRules); err != nil {
			errs = append(errs, err)
		}
	}
	states, err := d.prog.Sync(devs, rules)
	if err != nil {
		errs = append(errs, err)
	}
	if err := d.pol.Delete(stale); err != nil {
		errs = append(errs, err)
	}
	if err := d.neighbours(p); err != nil {
		errs = append(errs, err)
	}
	d.mu.Lock()
	d.states, d.devs, d.rules = states, devs, rules
	if polErr == nil {
		d.polRules, d.polStates = polRules, polStates
	}
	d.mu.Unlock()
	// Delete last: the VXLAN device when no rule needs it.
	if len(rules) == 0 && hasVX && owned(vx.Attrs()) {
		d.log.Info("removing unneeded device", "link", VXLANName)
		d.write()
		if err := d.h.LinkDel(vx); err != nil {
			errs = append(errs, fmt.Errorf("offload datapath: deleting %s: %w", VXLANName, err))
		}
	}
	return errors.Join(errs...)
}

func (d *Datapath) device(a *netlink.LinkAttrs) flower.Device {
	dev := flower.Device{Name: a.Name, Index: a.Index, Hardware: a.PhysSwitchID != 0}
	if !dev.Hardware {
		dev.Reason = a.Name + " is not a switchdev port (no phys_switch_id): hardware not asked"
	}
	return dev
}

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

func (d *Datapath) write() {
	d.mu.Lock()
	d.linkW++
	d.mu.Unlock()
}

// ensureVXLAN makes the external-mode VXLAN device exist, up, with the
// plan's largest MTU. A device of that name that is not Skiff's is an
// error; a Skiff one with settings that cannot change in place is
// recreated.
func (d *Datapath) ensureVXLAN(cur netlink.Link, p plan.Plan, mtu int) (netlink.Link, error) {
	if cur != nil {
		if !owned(cur.Attrs()) {
			return nil, fmt.Errorf("%s exists and is not Skiff's; leaving it alone", VXLANName)
		}
		v, ok := cur.(*netlink.Vxlan)
		if !ok || !v.FlowBased || v.Learning || v.Port != flower.VXLANPort {
			d.log.Info("recreating device whose settings cannot change in place", "link", VXLANName)
			d.write()
			if err := d.h.LinkDel(cur); err != nil {
				return nil, fmt.Errorf("deleting %s: %w", VXLANName, err)
			}
			cur = nil
		}
	}
	if cur == nil {
		v := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: VXLANName, MTU: mtu}, FlowBased: true, Learning: false, Port: flower.VXLANPort}
		d.write()
		if err := d.h.LinkAdd(v); err != nil {
			return nil, fmt.Errorf("creating %s (external, port %d): %w", VXLANName, flower.VXLANPort, err)
		}
		d.write()
		if err := d.h.LinkSetAlias(v, vxlanAlias); err != nil {
			return nil, fmt.Errorf("alias of %s: %w", VXLANName, err)
		}
		l, err := d.h.LinkByName(VXLANName)
		if err != nil {
			return nil, fmt.Errorf("%s was created but is not listed: %w", VXLANName, err)
		}
		cur = l
	}
	if cur.Attrs().MTU != mtu {
		d.write()
		if err := d.h.LinkSetMTU(cur, mtu); err != nil {
			return nil, fmt.Errorf("mtu of %s: %w", VXLANName, err)
		}
	}
	if cur.Attrs().Flags&net.FlagUp == 0 {
		d.write()
		if err := d.h.LinkSetUp(cur); err != nil {
			return nil, fmt.Errorf("setting %s up: %w", VXLANName, err)
		}
	}
	return cur, nil
}

// neighbours asks the kernel to resolve the underlay next hop of every
// remote VTEP that has no valid neighbour entry (NTF_USE: an ARP probe
// now, not when the first tunnelled packet needs it), so that encap rules
// are not held in the slow path by an unresolved neighbour.
func (d *Datapath) neighbours(p plan.Plan) error {
	want := map[netip.Addr]bool{}
	for _, n := range p.Networks {
		for _, v := range n.FloodVTEPs {
			want[v] = true
		}
	}
	for _, r := range p.Remote {
		if _, ok := p.Networks[r.Network]; ok && r.VTEP.IsValid() {
			want[r.VTEP] = true
		}
	}
	var errs []error
	cache := map[int][]netlink.Neigh{}
	for _, v := range slices.SortedFunc(maps.Keys(want), netip.Addr.Compare) {
		routes, err := d.h.RouteGet(v.AsSlice())
		if err != nil || len(routes) == 0 {
			errs = append(errs, fmt.Errorf("offload datapath: no underlay route to VTEP %s: %w", v, err))
			continue
		}
		hop, link := v, routes[0].LinkIndex
		if gw, ok := netip.AddrFromSlice(routes[0].Gw); ok && gw.IsValid() {
			hop = gw.Unmap()
		}
		if routes[0].Type == unix.RTN_LOCAL {
			continue
		}
		ns, ok := cache[link]
		if !ok {
			if ns, err = d.h.NeighList(link, unix.AF_INET); err != nil {
				errs = append(errs, fmt.Errorf("offload datapath: neighbours of link %d: %w", link, err))
				continue
			}
			cache[link] = ns
		}
		valid := false
		for _, n := range ns {
			if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == hop &&
				n.State&(netlink.NUD_REACHABLE|netlink.NUD_STALE|netlink.NUD_DELAY|netlink.NUD_PROBE|netlink.NUD_PERMANENT|netlink.NUD_NOARP) != 0 {
				valid = true
			}
		}
		if valid {
			continue
		}
		d.mu.Lock()
		d.probes++
		d.mu.Unlock()
		err = d.h.NeighSet(&netlink.Neigh{LinkIndex: link, Family: unix.AF_INET, IP: hop.AsSlice(), Flags: netlink.NTF_USE})
		if err != nil {
			errs = append(errs, fmt.Errorf("offload datapath: resolving underlay next hop %s of VTEP %s: %w", hop, v, err))
		}
	}
	return errors.Join(errs...)
}

// GatewayName and GatewayPortName name the veth pair of a network's
// gateway: GatewayName holds the gateway addresses in the node's stack,
// GatewayPortName is where the rules send traffic for it.
func GatewayName(vni uint32) string { return fmt.Sprintf("skg%d", vni) }

// GatewayPortName names the eswitch side of a network's gateway.
func GatewayPortName(vni uint32) string { return fmt.Sprintf("skh%d", vni) }

// gateways gives every network with a plumbed local endpoint and a subnet
// gateway a veth pair holding the gateway addresses (and the network's
// gateway MAC) in the node's stack, with forwarding off on it (the gateway
// answers; it routes nothing), and removes the pairs of networks that
// need none.
func (d *Datapath) gateways(p plan.Plan, reps map[string]string, byName map[string]netlink.Link) (map[string]flower.Gateway, error) {
	out := map[string]flower.Gateway{}
	want := map[string]bool{}
	var errs []error
	for name := range reps {
		n, ok := p.Networks[p.Local[name].Network]
		if !ok {
			continue
		}
		if _, done := out[n.Name]; done {
			continue
		}
		var addrs []netip.Prefix
		var ips []netip.Addr
		for _, sn := range n.Subnets {
			if sn.Gateway.Is4() {
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
		out[n.Name] = flower.Gateway{Port: port, MAC: agentdp.GatewayMAC(n.VNI), IPs: ips}
	}
	for name, l := range byName {
		if owned(l.Attrs()) && strings.HasPrefix(name, "skg") && !want[name] {
			d.log.Info("removing unneeded gateway", "link", name)
			d.write()
			if err := d.h.LinkDel(l); err != nil { // its peer goes with it
				errs = append(errs, fmt.Errorf("offload datapath: deleting %s: %w", name, err))
			}
		}
	}
	return out, errors.Join(errs...)
}

func (d *Datapath) gatewayPair(gw, port string, n plan.Network, addrs []netip.Prefix, byName map[string]netlink.Link) error {
	mtu := int(n.MTU)
	if mtu == 0 {
		mtu = plan.DefaultMTU
	}
	l, ok := byName[gw]
	if ok && !owned(l.Attrs()) {
		return fmt.Errorf("%s exists and is not Skiff's; leaving it alone", gw)
	}
	if _, pok := byName[port]; !ok || !pok {
		if ok {
			d.write()
			if err := d.h.LinkDel(l); err != nil {
				return err
			}
		}
		mac, _ := net.ParseMAC(agentdp.GatewayMAC(n.VNI))
		d.write()
		if err := d.h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: gw, MTU: mtu, HardwareAddr: mac}, PeerName: port}); err != nil {
			return fmt.Errorf("creating %s/%s: %w", gw, port, err)
		}
		for name, alias := range map[string]string{gw: aliasPrefix + "gateway:" + n.Name, port: aliasPrefix + "gateway-port:" + n.Name} {
			x, err := d.h.LinkByName(name)
			if err != nil {
				return err
			}
			d.write()
			if err := d.h.LinkSetAlias(x, alias); err != nil {
				return err
			}
			byName[name] = x
		}
		// The gateway answers; it forwards nothing between networks.
		if err := d.sysctl("/proc/sys/net/ipv4/conf/"+gw+"/forwarding", "0"); err != nil {
			d.log.Warn("gateway forwarding stays on", "link", gw, "err", err)
		}
	}
	for _, name := range []string{gw, port} {
		x := byName[name]
		if x.Attrs().Flags&net.FlagUp == 0 {
			d.write()
			if err := d.h.LinkSetUp(x); err != nil {
				return err
			}
		}
	}
	have, err := d.h.AddrList(byName[gw], unix.AF_INET)
	if err != nil {
		return err
	}
	seen := map[netip.Prefix]bool{}
	for _, a := range have {
		ip, _ := netip.AddrFromSlice(a.IP)
		ones, _ := a.Mask.Size()
		pfx := netip.PrefixFrom(ip.Unmap(), ones)
		seen[pfx] = true
		if !slices.Contains(addrs, pfx) {
			d.write()
			if err := d.h.AddrDel(byName[gw], &a); err != nil {
				return err
			}
		}
	}
	for _, a := range addrs {
		if !seen[a] {
			d.write()
			if err := d.h.AddrAdd(byName[gw], &netlink.Addr{IPNet: &net.IPNet{IP: a.Addr().AsSlice(), Mask: net.CIDRMask(a.Bits(), 32)}}); err != nil {
				return fmt.Errorf("address %s on %s: %w", a, gw, err)
			}
		}
	}
	return nil
}

// sysctl writes a /proc/sys/net file of the datapath's namespace: with the
// calling thread in it, since /proc/sys/net is the opener's.
func (d *Datapath) sysctl(path, value string) error {
	if d.opts.NetNS <= 0 {
		return os.WriteFile(path, []byte(value), 0o644)
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("offload datapath: current namespace: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(d.opts.NetNS); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("offload datapath: entering the namespace: %w", err)
	}
	werr := os.WriteFile(path, []byte(value), 0o644)
	if err := netns.Set(orig); err != nil {
		// The thread stays locked, so it ends with this goroutine
		// instead of running others in the wrong namespace.
		return errors.Join(werr, fmt.Errorf("offload datapath: leaving the namespace: %w", err))
	}
	runtime.UnlockOSThread()
	return werr
}
