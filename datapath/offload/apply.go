package offload

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
)

// owned reports whether a link is Skiff's.
func owned(l nl.Link) bool {
	return strings.HasPrefix(l.Name, "sk") && strings.HasPrefix(l.Alias, aliasPrefix)
}

// links lists the namespace's links by name.
func (d *Datapath) links() (map[string]nl.Link, error) {
	d.listings++
	ls, err := d.k.Links()
	if err != nil {
		return nil, fmt.Errorf("offload datapath: %w", err)
	}
	byName := make(map[string]nl.Link, len(ls))
	for _, l := range ls {
		byName[l.Name] = l
	}
	return byName, nil
}

// linksNow is the namespace's links by name: the last listing when no
// link notification was queued since it was taken (read only: the
// caller must not change it), else a new one. Callers hold d.op.
func (d *Datapath) linksNow() (map[string]nl.Link, error) {
	if !d.linkEv.Any() && d.listed != nil {
		return d.listed, nil
	}
	return d.relist()
}

// relist lists the links and keeps the listing for linksNow. The
// notifications queued so far are read first: one of a change the
// listing may have missed comes after, and makes linksNow list again.
func (d *Datapath) relist() (map[string]nl.Link, error) {
	d.listed = nil
	d.linkEv.Any()
	byName, err := d.links()
	if err != nil {
		return nil, err
	}
	d.listed = byName
	return byName, nil
}

// Apply implements the agent's datapath.Datapath.
func (d *Datapath) Apply(p plan.Plan) error {
	d.op.Lock()
	defer d.op.Unlock()
	d.clock.begin()
	start := d.gate.Begin()
	// Any link change since the last listing (a pod's stand-in veth
	// plumbed, a representor gone) makes a new one, compared below.
	byName, err := d.linksNow()
	if err != nil {
		return err
	}
	d.clock.mark("links")
	reps, targets := d.portsOf(p, byName)
	d.clock.mark("ports")
	fixes, drifted := d.forget(byName)
	d.clock.mark("watch")
	if !drifted && d.last.valid && maps.Equal(byName, d.last.links) &&
		maps.Equal(reps, d.last.reps) && maps.Equal(targets, d.last.targets) {
		// Links, ports and Skiff's filters are what the last Apply
		// left (but for the filters someone else deleted or changed,
		// put back first): the plan's difference alone, where it can
		// be made alone.
		err := d.repair(fixes)
		d.clock.mark("repair")
		c := classify(d.last.plan, p)
		d.clock.mark("classify")
		switch {
		case err != nil:
		case c.same:
			err = nil // nothing to compile, nothing to write
		case len(c.remotes) > 0 && d.touchesRefused(d.last.plan, p, c.remotes):
			err = flower.ErrNotIncremental
		case len(c.remotes) > 0 || len(c.floods) > 0:
			if err = d.applyFloods(p, c.floods); err == nil && len(c.remotes) > 0 {
				err = d.applyRemotes(p, c.remotes)
			}
		case c.group != "":
			err = d.applyGroup(p, c.group, c.joined, c.left)
		default:
			err = flower.ErrNotIncremental
		}
		if err == nil && len(c.remotes) > 0 && len(d.last.in.HostPorts) > 0 {
			// Remote endpoints are routed through the host ports (on
			// failure, the whole plan is applied below; without host
			// ports the last whole Apply left nothing to change).
			err = d.hostRouting(p, d.last.in.Gateways, d.last.in.HostPorts, d.last.links)
			d.clock.mark("hostrouting")
		}
		if err == nil {
			d.gate.Done(start)
			errs := d.sweep(p, false)
			d.clock.mark("sweep")
			return errors.Join(errs...)
		}
		if !errors.Is(err, flower.ErrNotIncremental) && !errors.Is(err, errDevices) {
			d.log.Warn("incremental change failed; applying the whole plan", "err", err)
		}
	}
	d.last.valid = false
	byName = maps.Clone(byName) // changed below as links are made
	pairs := hasPairs(byName)
	var errs []error
	gws, err := d.gateways(p, reps, byName)
	if err != nil {
		errs = append(errs, err)
	}
	hps, err := d.hostPorts(p, gws, byName)
	if err != nil {
		errs = append(errs, err)
	}
	// What reps and targets were made from: links that came after it
	// (a pod's interface plumbed while this Apply runs) are not in this
	// Apply's rules, so it must not be what the next Apply compares with.
	listed := byName
	if err := d.egress(p, gws, hps); err != nil {
		errs = append(errs, err)
	}
	if len(gws) > 0 || len(hps) > 0 || pairs {
		// New gateway and host ports must be known as devices below,
		// and those removed (each pair's port goes with it) must not
		// be: their filters are gone with them.
		if byName, err = d.links(); err != nil {
			return err
		}
	}
	in := flower.Input{Reps: reps, Targets: targets, Gateways: gws, HostPorts: hps, VXLAN: VXLANName}
	if in, err = d.learnForApply(p, in); err != nil {
		errs = append(errs, err)
	}
	d.clock.mark("pairs")
	rules, err := flower.Compile(p, in)
	refused := flower.RefusedNetworks(err)
	if err != nil && refused == nil {
		return fmt.Errorf("offload datapath: %w", err)
	}
	// A refused network is left out of everything below but the
	// software fallback (refused.go).
	in, refusedEps, soft := refuse(p, in, refused)
	if d.learn != nil {
		// A refused network's frames take the bridge, with no rule to
		// learn for.
		d.learn.indexReps(p, in.Reps)
	}
	gws, hps = in.Gateways, in.HostPorts
	d.noteRefused(refused, refusedEps)
	d.clock.mark("compile")
	// The fallback stand-ins' way into their representors: forwarding
	// rules (chain ChainForward) with no policy of their own, so the
	// policy compile gives their devices only the chain-0 filter that
	// leads to them.
	rules = append(rules, standInRules(p, soft)...)
	// A policy that does not compile leaves the installed one in place.
	polRules, polErr := flower.CompilePolicy(p, in, rules)
	if polErr != nil {
		errs = append(errs, fmt.Errorf("offload datapath: policy: %w", polErr))
	} else if polErr = d.nodePolicy(nodeEgress(p, in)); polErr != nil {
		// The egress the node's stack enforces goes before the
		// filters that let gateway traffic skip the representor's
		// rules; without it, the installed filters stay.
		errs = append(errs, polErr)
	}
	vx, hasVX := byName[VXLANName]
	if len(rules) > 0 || len(soft.Reps) > 0 {
		if vx, err = d.ensureVXLAN(vx, hasVX, mtu(p)); err != nil {
			return fmt.Errorf("offload datapath: %w", err)
		}
		byName[VXLANName], hasVX = vx, true
	}
	// Every device that may hold Skiff rules: the VXLAN device, every
	// switchdev port (a representor whose endpoint left keeps rules until
	// we remove them) and Skiff's own interfaces.
	devs := map[string]flower.Device{}
	for _, l := range byName {
		if l.SwitchID != "" || (owned(l) && l.Name != VXLANName && l.Kind != "vlan") {
			devs[l.Name] = d.device(l)
		}
	}
	for _, r := range append(slices.Collect(maps.Values(reps)), slices.Collect(maps.Values(targets))...) {
		l := byName[r]
		devs[r] = d.device(l)
		// A representor (or the host side standing in for one) carries
		// nothing while down.
		if !l.Up {
			if err := d.k.SetUp(l.Index); err != nil {
				errs = append(errs, fmt.Errorf("offload datapath: setting %s up: %w", r, err))
			}
		}
	}
	if hasVX {
		dev := flower.Device{Name: VXLANName, Index: vx.Index, Hardware: d.opts.TunnelHardware}
		if !dev.Hardware {
			dev.Reason = "no switchdev eswitch on this node: tunnel rules are not offered to hardware"
		}
		devs[VXLANName] = dev
	}
	// Devices with forwarding or policy rules (a host port may hold the
	// policy pipeline before it has a forwarding rule).
	var withRules []flower.Device
	seen := map[string]bool{}
	with := func(dev string) {
		if d, ok := devs[dev]; ok && !seen[dev] {
			seen[dev] = true
			withRules = append(withRules, d)
		}
	}
	for _, r := range rules {
		with(r.Dev)
	}
	for _, r := range polRules {
		with(r.Dev)
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
	d.clock.mark("policy")
	states, err := d.prog.Sync(devs, rules)
	if err != nil {
		errs = append(errs, err)
	}
	d.clock.mark("sync")
	if err := d.pol.Delete(stale); err != nil {
		errs = append(errs, err)
	}
	// Broadcast and multicast: the replication path (replication.go),
	// and from a stand-in's representor to the stand-in (standin.go).
	if err := d.replication(p, withSoftware(in, soft), byName); err != nil {
		errs = append(errs, err)
	}
	if err := d.standIns(withSoftware(in, soft), byName); err != nil {
		errs = append(errs, err)
	}
	if d.learn != nil {
		// The replication bridge learns what needs encap rules.
		_, bridge := byName[ReplicationName]
		if _, err := d.k.SetTable(learnTable(bridge || len(in.Reps) > 0)); err != nil {
			errs = append(errs, fmt.Errorf("offload datapath: %s: %w", LearnTable, err))
		}
	}
	d.clock.mark("replication")
	// The links as the replication path left them (its bridge, ports
	// moved into it): what the next Apply compares with.
	if relisted, err := d.links(); err == nil {
		byName = relisted
	} else {
		errs = append(errs, err)
	}
	// The node's routes into the host ports once their rules are in.
	if err := d.hostRouting(p, gws, hps, byName); err != nil {
		errs = append(errs, err)
	}
	if err := d.neighbours(p); err != nil {
		errs = append(errs, err)
	}
	d.clock.mark("neighbours")
	// Where each rule sits, and room to add, for the changes in place
	// that may follow: the first costs what later ones do.
	at := positions(rules, fwdAt)
	rules, states = roomy(rules), roomy(states)
	var pat map[polPlace]int
	if polErr == nil {
		pat = positions(polRules, polAt)
		polRules, polStates = roomy(polRules), roomy(polStates)
	}
	d.mu.Lock()
	d.states, d.devs, d.rules, d.fwdAt = states, devs, rules, at
	d.fwdDevs = flower.FirstPerDevice(rules)
	if polErr == nil {
		d.polRules, d.polStates, d.polAt = polRules, polStates, pat
	}
	d.mu.Unlock()
	d.gate.Done(start)
	clean := len(errs) == 0 && polErr == nil
	// Delete last: the VXLAN device when no rule (or fallback) needs it.
	if len(rules) == 0 && len(soft.Reps) == 0 && hasVX && owned(vx) {
		d.log.Info("removing unneeded device", "link", VXLANName)
		if err := d.k.DeleteLink(vx.Index); err != nil {
			errs = append(errs, fmt.Errorf("offload datapath: deleting %s: %w", VXLANName, err))
		}
	}
	if clean && len(errs) == 0 {
		// What an unchanged Apply compares with: links as they are now,
		// if they differ from those this Apply worked with only by what
		// it did itself (someone else's change: the next Apply looks).
		if now, err := d.relist(); err == nil && ownChanges(byName, now) && onlyGateways(listed, byName) {
			d.last = lastApply{plan: p.Clone(), links: now, in: in, reps: reps, targets: targets, valid: true}
		}
	}
	errs = append(errs, d.sweep(p, true)...)
	d.clock.mark("whole")
	return errors.Join(errs...)
}

// portsOf names, among the links byName, each local endpoint's
// representor and the stand-in its traffic goes to instead (Port.Target),
// by Options.Representor: what the rules are made for. An endpoint whose
// representor is not there (yet) has neither.
func (d *Datapath) portsOf(p plan.Plan, byName map[string]nl.Link) (reps, targets map[string]string) {
	reps, targets = map[string]string{}, map[string]string{}
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
	return reps, targets
}

// ownChanges reports whether links now differ from those an Apply used
// only by what Apply changes: the VXLAN device, links set up.
func ownChanges(used, now map[string]nl.Link) bool {
	if len(used) != len(now) && len(used)+1 != len(now) && len(used) != len(now)+1 {
		return false
	}
	for name, l := range now {
		if name == VXLANName {
			continue
		}
		u, ok := used[name]
		if !ok {
			return false
		}
		u.Up = l.Up
		if u != l {
			return false
		}
	}
	for name := range used {
		if _, ok := now[name]; !ok && name != VXLANName {
			return false
		}
	}
	return true
}

// hasPairs reports whether links hold a gateway or host port pair of
// Skiff's (which gateways and hostPorts may remove).
func hasPairs(links map[string]nl.Link) bool {
	for name, l := range links {
		if owned(l) && (strings.HasPrefix(name, "skg") || isHostPort(name)) {
			return true
		}
	}
	return false
}

// onlyGateways reports whether the links after differ from those before
// only in the networks' gateway and host port pairs, the VXLAN device and
// the replication bridge and its VLAN devices, and in links joining or
// leaving that bridge
// (Apply makes these changes between the two listings).
func onlyGateways(before, after map[string]nl.Link) bool {
	gw := func(name string) bool {
		return name == VXLANName || strings.HasPrefix(name, ReplicationName) || strings.HasPrefix(name, "skg") || strings.HasPrefix(name, "skh") || strings.HasPrefix(name, "skn")
	}
	bridges := map[int]bool{}
	for _, ls := range []map[string]nl.Link{before, after} {
		if br, ok := ls[ReplicationName]; ok {
			bridges[br.Index] = true
		}
	}
	for name, l := range after {
		b, ok := before[name]
		if ok && (bridges[b.Master] || bridges[l.Master]) {
			b.Master = l.Master
		}
		if !gw(name) && (!ok || b != l) {
			return false
		}
	}
	for name := range before {
		if _, ok := after[name]; !ok && !gw(name) {
			return false
		}
	}
	return true
}

// lastApply is what the last Apply that wrote everything it wanted left.
type lastApply struct {
	plan  plan.Plan
	links map[string]nl.Link
	// in is what the rules were compiled with (refused networks out);
	// reps and targets are the ports found (refused networks' in).
	in            flower.Input
	reps, targets map[string]string
	valid         bool
}

// sweep removes what the agent's restarts and dead namespaces left: taps
// of VM ports that left the plan (when taps: an Apply whose links and
// local endpoints are the last one's finds none), pods' VFs the kernel
// gave back.
func (d *Datapath) sweep(p plan.Plan, taps bool) []error {
	var errs []error
	// Taps of VM ports deleted while the agent was down.
	if taps {
		gone, err := datapath.DeleteStaleTaps(d.k, func(ep string) bool { _, ok := p.Local[ep]; return ok })
		if len(gone) > 0 {
			d.log.Info("removed taps of deleted VM ports", "taps", gone)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("offload datapath: %w", err))
		}
	}
	// Pods' VFs the kernel returned from destroyed namespaces. A VF
	// comes back as a link of the host namespace, which the link
	// notifications report and the next Apply lists: with no listing
	// since a sweep that left none, there is none to look for (sysfs is
	// not read). An injected mover may look in another namespace: it is
	// asked every time.
	if d.strandedByLinks && d.sweptAt == d.listings && d.listings > 0 {
		return errs
	}
	at := d.listings
	if _, err := d.returnStranded(); err != nil {
		errs = append(errs, err)
	} else {
		d.sweptAt = at
	}
	return errs
}

func (d *Datapath) device(l nl.Link) flower.Device {
	dev := flower.Device{Name: l.Name, Index: l.Index, Hardware: l.SwitchID != ""}
	if !dev.Hardware {
		dev.Reason = l.Name + " is not a switchdev port (no phys_switch_id): hardware not asked"
	}
	return dev
}
