// Package offload is Skiff's offload datapath: the plan executed as
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
//	dp, err := offload.New(offload.Options{Logger: log, Representor: reps})
//	err = dp.Apply(p)
//	states := dp.Rules() // per endpoint: in hardware, software or refused (+ reason), counters
package offload

import (
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/tc"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/eswitch"
	"github.com/skiff-sdn/skiff/offload/flower"
	"github.com/skiff-sdn/skiff/offload/vf"
)

// VXLANName is the name of the external-mode VXLAN device.
const VXLANName = "skvx"

const (
	aliasPrefix = datapath.AliasPrefix
	vxlanAlias  = aliasPrefix + "vxlan:external"
)

// Options configures a Datapath.
type Options struct {
	Logger *slog.Logger
	// NetNS is the path of the network namespace to work in (such as
	// /run/netns/NAME or /proc/PID/ns/net); empty: the caller's.
	NetNS string
	// Representor names the netdevs of a local endpoint on the eswitch;
	// false when it has none (yet). When nil, Eswitch discovery finds
	// them (PortOf).
	Representor func(e plan.Endpoint) (Port, bool)
	// Eswitch discovers the node's PFs and representors when
	// Representor is nil; the current namespace's sysfs when nil.
	Eswitch *eswitch.Discoverer
	// SysRoot is where sysfs is mounted ("/sys" when empty): PCI
	// functions of vfio ports are bound through it, and Eswitch, when
	// nil, discovers through it.
	SysRoot string
	// VFs sets up the VFs of vfio ports; the kernel's (offload/vf) when
	// nil.
	VFs VFHost
	// Mover moves pods' VF netdevs into their namespaces and back;
	// offload/vf's (sysfs at SysRoot, this datapath's namespace as the
	// host's) when nil.
	Mover VFMover
	// Kernel is the node's namespace; the one at NetNS (nl.Open) when
	// nil. The datapath closes it with Close.
	Kernel nl.Kernel
	// Open opens other namespaces (pods'); nl.Open when nil.
	Open nl.OpenFunc
	// TunnelHardware asks for hardware on the VXLAN device's rules too
	// (a NIC offloads decap from tunnel devices through indirect blocks).
	TunnelHardware bool
	// Learn, when set, gives each representor an encap rule only for
	// the remote endpoints its endpoint sends to, learnt by the
	// replication bridge (learn.go); call Learn regularly. When nil,
	// every representor gets one for every remote endpoint of its
	// network.
	Learn *LearnOptions
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
	// k is the node's namespace: links, routes, and in nftables the
	// isolation and egress rules of the gateways (inet skiff), as on
	// software nodes, and the egress policy the node's stack enforces
	// (inet skiff-policy, see nodepolicy.go).
	k nl.Kernel
	// plumbing is the same namespace's handle for setting and moving
	// VFs (Plumb, Unplumb).
	plumbing nl.Kernel
	// nft: what the last write of that policy left, under d.op.
	nft  nftState
	prog *flower.Programmer
	pol  *flower.PolicyProgrammer
	// tcc writes the stand-ins' egress filters; tccWrites counts them.
	tcc       tc.Client
	tccWrites atomic.Int64
	// Notifications of tc changes made by others.
	watch tc.Watcher
	// Link notifications (anyone's): none since the last listing
	// (listed, kept by Apply) and that listing is still true.
	linkEv   nl.Changes
	listed   map[string]nl.Link
	listings int // link listings made, under d.op
	// The listing after which the last sweep for stranded VFs found
	// none left (0: none did), under d.op; see sweep. strandedByLinks:
	// the mover looks in this namespace, whose link notifications
	// report a VF coming back (the default mover).
	sweptAt         int
	strandedByLinks bool
	// Users of each VTEP in the last Apply's plan (vtepUse), kept by
	// remote endpoint changes, under d.op.
	vteps map[netip.Addr]int
	// flooding are the networks with flood lists on the VXLAN device
	// (replication.go), made by the whole Apply, under d.op.
	flooding map[string]bool
	// usable are the VTEPs whose next hop a whole Apply found usable
	// (not looked up again while they stay).
	usable map[netip.Addr]bool
	// suppressing are the networks the replication bridge answers
	// neighbour requests for, by name (suppress.go), under d.mu.
	suppressing map[string]suppressed

	op     sync.Mutex // one netlink conversation at a time: Apply or Rules
	gate   datapath.PlumbGate
	ports  *eswitchPorts
	vfs    VFHost
	mover  VFMover
	podVFs podVFs

	mu     sync.Mutex
	states []flower.State
	devs   map[string]flower.Device
	rules  []flower.Rule
	// The policy pipeline (chains 0-2) as last installed.
	polRules  []flower.PolicyRule
	polStates []flower.PolicyState
	// Positions of the rules above by place, for changes in place
	// (swapRules); made by the whole Apply.
	fwdAt map[fwdPlace]int
	// The first forwarding rule of each device (what a member change's
	// policy rules depend on of them), made by the whole Apply: which
	// devices hold forwarding rules does not change in between.
	fwdDevs []flower.Rule
	polAt   map[polPlace]int
	polW    map[string]int // node policy table writes by kind
	probes  int            // neighbour resolutions asked for
	lookups int            // VTEPs whose underlay next hop was looked up
	drift   int            // devices changed by someone else, seen
	last    lastApply
	clock   phaseClock // the parts of the last Apply, under d.op
	// What the last whole Apply refused (refused.go): networks with
	// why, and their local endpoints.
	refusedNets map[string]string
	refusedEps  map[string]refusal
	// learn is the learnt pairs (Options.Learn; nil: none), under d.op.
	learn *learning
}

// New opens the netlink sockets of a datapath.
func New(o Options) (*Datapath, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	k := o.Kernel
	if k == nil {
		var err error
		if k, err = nl.Open(o.NetNS); err != nil {
			return nil, fmt.Errorf("offload datapath: %w", err)
		}
	}
	if o.Open == nil {
		o.Open = nl.Open
	}
	disc := o.Eswitch
	if disc == nil {
		disc = eswitch.New(eswitch.Options{SysRoot: o.SysRoot, Devlink: eswitch.NetlinkDevlink{Kernel: k}, Logger: o.Logger})
	}
	learn, err := newLearning(o.Learn, o.Logger)
	if err != nil {
		k.Close()
		return nil, fmt.Errorf("offload datapath: %w", err)
	}
	ports := &eswitchPorts{disc: disc}
	if o.Representor == nil {
		o.Representor = ports.lookup
	}
	closers := []func() error{k.Close}
	fail := func(err error) (*Datapath, error) {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
		return nil, fmt.Errorf("offload datapath: %w", err)
	}
	// VFs are set and moved on a handle of their own (Plumb runs while
	// Apply does, and one handle's requests wait for each other).
	plumbing, err := o.Open(k.Path())
	if err != nil {
		return fail(err)
	}
	closers = append(closers, plumbing.Close)
	vfs := o.VFs
	if vfs == nil {
		vfs = newVFHost(o, plumbing)
	}
	mover := o.Mover
	if mover == nil {
		mover = vf.NewMover(vf.MoverOptions{SysRoot: o.SysRoot, Host: plumbing, Open: o.Open, Logger: o.Logger})
	}
	prog, err := flower.Open(k, o.Logger)
	if err != nil {
		return fail(err)
	}
	closers = append(closers, prog.Close)
	pol, err := flower.OpenPolicyProgrammer(k, o.Logger)
	if err != nil {
		return fail(err)
	}
	closers = append(closers, pol.Close)
	// Someone else's changes of tc (a filter deleted or altered by hand,
	// a qdisc removed) make the programmers read those devices again.
	watch, err := k.WatchTC()
	if err != nil {
		return fail(err)
	}
	closers = append(closers, watch.Close)
	linkEv, err := k.LinkChanges()
	if err != nil {
		return fail(fmt.Errorf("link notifications: %w", err))
	}
	closers = append(closers, linkEv.Close)
	// The stand-ins' egress filters (standin.go).
	tcc, err := k.TC(1)
	if err != nil {
		return fail(err)
	}
	closers = append(closers, tcc.Close)
	if err := watch.Ignore(slices.Concat(prog.PortIDs(), pol.PortIDs(), tcc.PortIDs())...); err != nil {
		return fail(err)
	}
	return &Datapath{opts: o, log: o.Logger, k: k, learn: learn, plumbing: plumbing, prog: prog, pol: pol, tcc: tcc, watch: watch, linkEv: linkEv,
		ports: ports, vfs: vfs, mover: mover, strandedByLinks: o.Mover == nil, polW: map[string]int{"table": 0, "element": 0}}, nil
}

// forget makes the programmers forget what someone else changed since
// the last Apply (and the devices that are gone): filters of their own
// deleted or changed by hand alone, when the tc notifications name them
// (returned by device, for repair); otherwise the whole device, read
// again by the next whole Apply. whole: a device must be read again, or
// notifications were lost.
func (d *Datapath) forget(links map[string]nl.Link) (fixes map[int]forgotten, whole bool) {
	changes, lost := d.watch.Changes()
	if lost {
		d.log.Info("tc notifications lost: reading every device again")
		d.prog.InvalidateAll()
		d.pol.InvalidateAll()
	}
	for i, ch := range changes {
		var f forgotten
		okF, okP := false, false
		if !ch.Whole {
			f.fwd, okF = d.prog.Forget(i, ch.Filters)
			f.pol, okP = d.pol.Forget(i, ch.Filters)
		}
		if !okF {
			d.prog.Invalidate(i)
		}
		if !okP {
			d.pol.Invalidate(i)
		}
		if !okF || !okP {
			whole = true
		} else if len(f.fwd)+len(f.pol) > 0 {
			if fixes == nil {
				fixes = map[int]forgotten{}
			}
			fixes[i] = f
		}
	}
	d.mu.Lock()
	d.drift += len(changes)
	d.mu.Unlock()
	present := make(map[int]bool, len(links))
	for _, l := range links {
		present[l.Index] = true
	}
	d.prog.Retain(present)
	d.pol.Retain(present)
	return fixes, lost || whole
}

// Drift is the number of times a device's filters were changed by
// someone else (and read again) so far.
func (d *Datapath) Drift() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.drift
}

// Close releases the netlink sockets; kernel objects stay.
func (d *Datapath) Close() {
	d.linkEv.Close()
	d.watch.Close()
	d.pol.Close()
	d.prog.Close()
	d.tcc.Close()
	d.plumbing.Close()
	d.k.Close()
}

// Writes is the number of kernel writes that changed configuration so
// far (filters, and through the namespace's handle links, addresses,
// routes, neighbours, nftables and sysctls).
func (d *Datapath) Writes() int {
	return d.prog.Writes() + d.pol.Writes() + d.k.Writes() + int(d.tccWrites.Load())
}

// TCMessages is the number of tc netlink messages (filters and qdiscs:
// requests, answers, dump parts) sent and received so far.
func (d *Datapath) TCMessages() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.prog.Messages() + d.pol.Messages()
}

// PolicyWrites is the number of policy filters added, replaced or
// deleted so far.
func (d *Datapath) PolicyWrites() int { return d.pol.Writes() }

// PolicyRules returns the state of every policy filter of the last Apply,
// with counters read now (the last Apply's when the kernel cannot be read),
// rulesSlice devices at a time as Rules reads them.
func (d *Datapath) PolicyRules() []flower.PolicyState {
	d.op.Lock()
	d.mu.Lock()
	seen := map[string]bool{}
	for _, r := range d.polRules {
		seen[r.Dev] = true
	}
	d.mu.Unlock()
	d.op.Unlock()
	var out []flower.PolicyState
	for _, slice := range deviceSlices(seen) {
		out = append(out, d.readPolicyRules(slice)...)
	}
	return out
}

// readPolicyRules is the states of the policy rules of the devices of
// slice, with their counters read now; under d.op.
func (d *Datapath) readPolicyRules(slice map[string]bool) []flower.PolicyState {
	d.op.Lock()
	defer d.op.Unlock()
	d.mu.Lock()
	devs, rules, states := d.devs, d.polRules, d.polStates
	d.mu.Unlock()
	var part []flower.PolicyRule
	var last []flower.PolicyState
	for i, r := range rules {
		if slice[r.Dev] {
			part = append(part, r)
			if i < len(states) {
				// A copy: a group change swaps rules in d.polStates in
				// place once d.op is let go.
				last = append(last, states[i])
			}
		}
	}
	if len(part) == 0 {
		return nil
	}
	now, err := d.pol.Read(devs, part)
	if err != nil {
		d.log.Warn("reading policy rules", "err", err)
		return last
	}
	return now
}

// PolicyCounters sums the counters of the policy filters per endpoint,
// direction and rule of its policy (-1: the default deny): the packets
// that opened a connection through the rule, or were dropped; with the
// egress rules the node's stack enforces (nodepolicy.go) added to the
// same rule's.
func (d *Datapath) PolicyCounters() ([]datapath.PolicyCounter, error) {
	type key struct {
		ep, dir string
		rule    int
	}
	sum := map[key]*datapath.PolicyCounter{}
	var keys []key
	count := func(ep, dir string, rule int, packets, bytes uint64) {
		k := key{ep, dir, rule}
		c, ok := sum[k]
		if !ok {
			c = &datapath.PolicyCounter{Endpoint: ep, Direction: dir, Rule: rule}
			sum[k] = c
			keys = append(keys, k)
		}
		c.Packets += packets
		c.Bytes += bytes
	}
	for _, s := range d.PolicyRules() {
		r := s.Rule
		if r.Endpoint == "" || r.Direction == "" {
			continue
		}
		dir := datapath.Ingress
		if r.Direction == flower.Egress {
			dir = datapath.Egress
		}
		count(r.Endpoint, dir, r.RuleIndex, s.Packets, s.Bytes)
	}
	// Egress the node's stack enforces (what went through the gateway,
	// after DNAT) counts for the same rule.
	nft, err := d.nodePolicyCounters()
	for _, n := range nft {
		count(n.Endpoint, n.Direction, n.Rule, n.Packets, n.Bytes)
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
	out := make([]datapath.PolicyCounter, len(keys))
	for i, k := range keys {
		out[i] = *sum[k]
	}
	return out, err
}

// Probes is the number of underlay neighbour resolutions asked for so far
// (they change no configuration; a VTEP that does not answer is asked
// for again at every whole Apply and whenever it becomes new to the
// node).
func (d *Datapath) Probes() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.probes
}

// NextHops is the number of VTEPs whose underlay next hop was looked up
// so far (a route lookup, a neighbour listing, and a probe when it has
// no valid neighbour entry).
func (d *Datapath) NextHops() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lookups
}

// Rules returns the state of every rule of the last Apply, with counters
// read now, by the local endpoint it serves ("" for a network's rules).
// When the kernel cannot be read, the states of the last Apply are
// returned. The devices are read rulesSlice at a time, each slice under
// d.op: an Apply waits for one slice's dumps at most, never for every
// device's (a node of 250 endpoints holds 125,000 rules); each slice's
// states are those of the moment it is read.
func (d *Datapath) Rules() map[string][]flower.State {
	d.op.Lock()
	d.mu.Lock()
	seen := map[string]bool{}
	for i := range d.states {
		seen[d.states[i].Rule.Dev] = true
	}
	d.mu.Unlock()
	d.op.Unlock()
	out := map[string][]flower.State{}
	for _, slice := range deviceSlices(seen) {
		d.readRules(slice, out)
	}
	return out
}

// deviceSlices splits devs into sets of at most rulesSlice devices, in
// name order.
func deviceSlices(devs map[string]bool) []map[string]bool {
	var out []map[string]bool
	for i, name := range slices.Sorted(maps.Keys(devs)) {
		if i%rulesSlice == 0 {
			out = append(out, map[string]bool{})
		}
		out[len(out)-1][name] = true
	}
	return out
}

// rulesSlice is how many devices Rules reads under d.op at a time.
const rulesSlice = 16

// readRules adds the states of the rules of the devices of slice, with
// their counters read now, to out by endpoint; under d.op.
func (d *Datapath) readRules(slice map[string]bool, out map[string][]flower.State) {
	d.op.Lock()
	defer d.op.Unlock()
	d.mu.Lock()
	devs, states := d.devs, d.states
	d.mu.Unlock()
	var part []flower.State
	for i := range states {
		if slice[states[i].Rule.Dev] {
			part = append(part, states[i])
		}
	}
	if len(part) == 0 {
		return
	}
	// By the cookies made when they were written: nothing compiled or
	// hashed again.
	if err := d.prog.Refresh(devs, part); err != nil {
		d.log.Warn("reading offload rules", "err", err)
		part = part[:0]
		for i := range states {
			if slice[states[i].Rule.Dev] {
				part = append(part, states[i]) // the last Apply's
			}
		}
	}
	for _, s := range part {
		out[s.Rule.Endpoint] = append(out[s.Rule.Endpoint], s)
	}
}
