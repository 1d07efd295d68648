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
// the refused one gets no forwarding or policy rules here, nor routes
// into its host port. Its endpoints on this node fall back to software:
// the replication bridge, which holds a static entry for each of the
// network's MACs (suppress.go), forwards their unicast among them, to
// the gateway's port and through the VXLAN device to the remote
// endpoints, and the tunnel's frames of the network to them (a stand-in
// gets its one rule into the representor). Unless a NetworkPolicy
// isolates one of them here: the bridge enforces no policy, so the
// network's endpoints here are cut off instead (fail closed). Either way
// the reason is what Ready (cut off: not ready), Counters (the rule
// states that reach skiffctl: state "software" for the fallback) and the
// metrics give. The next whole Apply decides again.

// refusal is a local endpoint of a refused network; software: forwarded
// by the node's bridge (else cut off).
type refusal struct {
	network, rep, reason string
	software             bool
}

// refuse takes the refused networks out of in (their endpoints'
// representors and stand-ins, their gateways and host ports) and
// returns what is left, the refused local endpoints by name, and the
// software fallback's part: the representors, stand-ins and gateways of
// the refused networks that fall back (no endpoint of theirs here
// isolated by a NetworkPolicy).
func refuse(p plan.Plan, in flower.Input, refused map[string]error) (rest flower.Input, eps map[string]refusal, soft flower.Input) {
	if len(refused) == 0 {
		return in, nil, flower.Input{}
	}
	isolated := map[string]string{} // network -> an endpoint a policy isolates here
	for name := range in.Reps {
		e := p.Local[name]
		if pol, ok := p.Policies[name]; ok && (pol.IngressIsolated || pol.EgressIsolated) && refused[e.Network] != nil {
			isolated[e.Network] = name
		}
	}
	eps = map[string]refusal{}
	rest = in
	rest.Reps, rest.Targets = maps.Clone(in.Reps), maps.Clone(in.Targets)
	rest.Gateways, rest.HostPorts = maps.Clone(in.Gateways), maps.Clone(in.HostPorts)
	soft = flower.Input{VXLAN: in.VXLAN, Reps: map[string]string{}, Targets: map[string]string{}, Gateways: map[string]flower.Gateway{}}
	for name, rep := range in.Reps {
		network := p.Local[name].Network
		err := refused[network]
		if err == nil {
			continue
		}
		r := refusal{network: network, rep: rep, reason: fmt.Sprintf("network %s is not offloaded on this node: %v", network, err)}
		if ep, ok := isolated[network]; ok {
			r.reason += fmt.Sprintf("; not forwarded in software either: a NetworkPolicy isolates endpoint %s, which the node's bridge cannot enforce", ep)
		} else {
			r.software = true
			r.reason += "; forwarded in software by the node's bridge"
			soft.Reps[name] = rep
			if t, ok := in.Targets[name]; ok {
				soft.Targets[name] = t
			}
		}
		eps[name] = r
		delete(rest.Reps, name)
		delete(rest.Targets, name)
	}
	for network := range refused {
		if gw, ok := in.Gateways[network]; ok && isolated[network] == "" {
			soft.Gateways[network] = gw
		}
		delete(rest.Gateways, network)
		delete(rest.HostPorts, network)
	}
	return rest, eps, soft
}

// withSoftware is in with the software fallback's representors,
// stand-ins and gateways: what the replication bridge serves.
func withSoftware(in, soft flower.Input) flower.Input {
	if len(soft.Reps) == 0 {
		return in
	}
	out := in
	out.Reps, out.Targets, out.Gateways = maps.Clone(in.Reps), maps.Clone(in.Targets), maps.Clone(in.Gateways)
	if out.Targets == nil {
		out.Targets = map[string]string{}
	}
	if out.Gateways == nil {
		out.Gateways = map[string]flower.Gateway{}
	}
	maps.Copy(out.Reps, soft.Reps)
	maps.Copy(out.Targets, soft.Targets)
	maps.Copy(out.Gateways, soft.Gateways)
	return out
}

// standInRules are the rules sending each fallback stand-in's traffic
// into its representor (and so to the bridge).
func standInRules(p plan.Plan, soft flower.Input) []flower.Rule {
	var out []flower.Rule
	for _, name := range slices.Sorted(maps.Keys(soft.Targets)) {
		t, rep := soft.Targets[name], soft.Reps[name]
		if t == "" || t == rep {
			continue
		}
		out = append(out, flower.Rule{Dev: t, Network: p.Local[name].Network, Endpoint: name, EthType: flower.EthAll,
			Prio: flower.PrioUnicast, Kind: flower.KindStandIn, Actions: []flower.Action{{Kind: flower.IngressRedirect, Dev: rep}}})
	}
	return out
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
			d.log.Error("network not offloaded on this node: its endpoints here get no rules (forwarded in software unless a NetworkPolicy isolates one); the other networks are programmed",
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
