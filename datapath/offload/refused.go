package offload

import (
	"fmt"
	"maps"
	"slices"

	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
)

// A network the offload compile cannot express (flower.Refused) is
// refused on this node alone: Apply programs every other network, and
// the refused one gets nothing of Skiff's here (no forwarding or policy
// rules, no routes into its host port): its endpoints on this node are
// not ready, each with the reason, which Ready, Counters (the rule
// states that reach skiffctl) and the metrics give. The next whole Apply
// decides again.

// refusal is a local endpoint of a refused network.
type refusal struct {
	network, rep, reason string
}

// refuse takes the refused networks out of in (their endpoints'
// representors and stand-ins, their gateways and host ports) and
// returns what is left, with the refused local endpoints by name.
func refuse(p plan.Plan, in flower.Input, refused map[string]error) (flower.Input, map[string]refusal) {
	if len(refused) == 0 {
		return in, nil
	}
	eps := map[string]refusal{}
	out := in
	out.Reps, out.Targets = maps.Clone(in.Reps), maps.Clone(in.Targets)
	out.Gateways, out.HostPorts = maps.Clone(in.Gateways), maps.Clone(in.HostPorts)
	for name, rep := range in.Reps {
		network := p.Local[name].Network
		if err := refused[network]; err != nil {
			eps[name] = refusal{network: network, rep: rep, reason: fmt.Sprintf("network %s is not offloaded on this node: %v", network, err)}
			delete(out.Reps, name)
			delete(out.Targets, name)
		}
	}
	for network := range refused {
		delete(out.Gateways, network)
		delete(out.HostPorts, network)
	}
	return out, eps
}

// noteRefused keeps the refused networks and endpoints of this Apply,
// logging the networks whose refusal began, changed or ended.
func (d *Datapath) noteRefused(refused map[string]error, eps map[string]refusal) {
	nets := make(map[string]string, len(refused))
	for n, err := range refused {
		nets[n] = err.Error()
	}
	d.mu.Lock()
	before := d.refusedNets
	d.refusedNets, d.refusedEps = nets, eps
	d.mu.Unlock()
	for _, n := range slices.Sorted(maps.Keys(nets)) {
		if before[n] != nets[n] {
			d.log.Error("network not offloaded on this node: its endpoints here get no rules; the other networks are programmed",
				"network", n, "err", nets[n])
		}
	}
	for _, n := range slices.Sorted(maps.Keys(before)) {
		if _, ok := nets[n]; !ok {
			d.log.Info("network offloaded again", "network", n)
		}
	}
}

// RefusedNetworks is the networks the last whole Apply refused, each
// with why.
func (d *Datapath) RefusedNetworks() map[string]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.refusedNets)
}

// touchesRefused reports whether a remote endpoint of names is in a
// network refused by the last whole Apply (its change is decided by
// another whole Apply: it may end the refusal).
func (d *Datapath) touchesRefused(before, after plan.Plan, names []string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.refusedNets) == 0 {
		return false
	}
	for _, n := range names {
		for _, p := range []plan.Plan{before, after} {
			if r, ok := p.Remote[n]; ok {
				if _, refused := d.refusedNets[r.Network]; refused {
					return true
				}
			}
		}
	}
	return false
}

// RefusedKind is the kind of the rule state Counters gives each endpoint
// of a refused network: not installed (no state), with the reason.
const RefusedKind = "refused-network"
