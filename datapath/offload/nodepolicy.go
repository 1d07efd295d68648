package offload

// NetworkPolicy egress in the node's stack: what an egress-isolated
// endpoint sends to its gateway's MAC on a network that routes out skips
// its egress rules on its representor (flower.PrioGateway) and is
// checked here instead, in the forward hook of the policy table (inet
// skiff-policy, datapath/firewall), after kube-proxy's DNAT (nat prerouting):
// the destination is the Service's backend, as Kubernetes specifies and
// as on software nodes. The table is the software datapath's, each
// endpoint named by its network's gateway skg<VNI> (where its routed
// traffic comes in) and its addresses; egress only (ingress stays in
// the flower pipeline, which sees every packet for a local endpoint).

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/datapath/firewall"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
)

// nftState is what the datapath's last write of the node's egress policy
// left: written (once written, an empty policy is written only to remove
// what is there) and whether it held an endpoint.
type nftState struct {
	written, on bool
}

// nodeEgress is the egress policy the node's stack enforces for p with
// the ports and gateways of in: each egress-isolated local endpoint with
// a representor whose network's gateway forwards (flower.NodeEgressMAC,
// the same condition as the filter that lets its gateway traffic by),
// and the address groups its rules name.
func nodeEgress(p plan.Plan, in flower.Input) firewall.Policy {
	cfg := firewall.Policy{Groups: map[string][]netip.Addr{}}
	for _, name := range slices.Sorted(maps.Keys(p.Policies)) {
		pol := p.Policies[name]
		e, ok := p.Local[name]
		if !ok || !pol.EgressIsolated || in.Reps[name] == "" {
			continue
		}
		n, ok := p.Networks[e.Network]
		if !ok || flower.NodeEgressMAC(n, in.Gateways[e.Network]) == "" {
			continue
		}
		x := firewall.Endpoint{Name: name, Device: GatewayName(n.VNI), EgressIsolated: true, Egress: firewall.Rules(pol.Egress)}
		for _, ip := range e.IPs {
			x.IPs = append(x.IPs, ip.Addr())
		}
		for _, r := range pol.Egress {
			for _, peer := range r.Peers {
				if peer.Group != "" {
					cfg.Groups[peer.Group] = p.Groups[peer.Group].Members
				}
			}
		}
		cfg.Endpoints = append(cfg.Endpoints, x)
	}
	return cfg
}

// nodePolicy writes cfg (nodeEgress) to the node's stack: nothing when it
// holds no endpoint and the last write (of this process) left none.
// Callers hold d.op.
func (d *Datapath) nodePolicy(cfg firewall.Policy) error {
	if len(cfg.Endpoints) == 0 && d.nft.written && !d.nft.on {
		return nil
	}
	change, err := d.k.SetTable(cfg.Table())
	d.mu.Lock()
	firewall.CountWrites(d.polW, change)
	d.mu.Unlock()
	if err != nil {
		return fmt.Errorf("offload datapath: egress policy in the node's stack: %w", err)
	}
	d.nft = nftState{written: true, on: len(cfg.Endpoints) > 0}
	return nil
}

// nodePolicyGroup writes a change of group's members to the node's
// stack, where an endpoint's egress there names the group. Callers hold
// d.op.
func (d *Datapath) nodePolicyGroup(p plan.Plan, in flower.Input, group string) error {
	if !d.nft.on {
		return nil
	}
	cfg := nodeEgress(p, in)
	if _, ok := cfg.Groups[group]; !ok {
		return nil
	}
	return d.nodePolicy(cfg)
}

// nodePolicyCounters reads the counters of the node's egress rules (by
// endpoint, direction and rule). Callers hold no lock.
func (d *Datapath) nodePolicyCounters() ([]datapath.PolicyCounter, error) {
	d.op.Lock()
	on := d.nft.on
	d.op.Unlock()
	if !on {
		return nil, nil
	}
	cs, err := d.k.TableCounters(nl.NftInet, firewall.PolicyTable)
	if err != nil {
		return nil, fmt.Errorf("offload datapath: egress policy counters in the node's stack: %w", err)
	}
	return firewall.PolicyCounters(cs), nil
}
