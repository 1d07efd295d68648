package planner

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// External is an endpoint or VTEP outside Skiff, learned over BGP EVPN:
// with a MAC, a remote endpoint (type-2 route); without one, a flood
// VTEP of the VNI (type-3 route). An external VTEP is treated like a
// remote node: it reaches the plans of the nodes that have a local
// endpoint on the network with that VNI.
type External struct {
	VNI  uint32
	VTEP netip.Addr
	MAC  string
	IPs  []netip.Prefix
}

// externalPrefix starts the names of external remote endpoints in plans
// (remote names never collide with endpoint names, which cannot hold ':').
const externalPrefix = "bgp:"

type externals struct {
	remotes map[string]plan.Remote         // name -> remote (Network holds the VNI until resolved)
	vnis    map[string]uint32              // name -> VNI
	flood   map[uint32]map[netip.Addr]bool // VNI -> VTEPs
}

// SetExternal replaces the whole set of external routes at once and
// returns one delta per node whose plan changed. The deltas keep the plan
// revision (From == Revision), so a consumer that reconnects holding that
// revision would not be told; prefer StageExternal. An unchanged set
// changes nothing.
func (p *Planner) SetExternal(routes []External) []plan.Delta {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := touchSet{}
	p.putExternal(routes, t)
	if len(t) == 0 {
		return nil
	}
	p.forget()
	p.touchExternal(t)
	var out []plan.Delta
	for _, node := range slices.Sorted(maps.Keys(t)) {
		if d, ok := p.reconcile(node, t[node], p.rev); ok {
			out = append(out, d)
		}
	}
	return out
}

// StageExternal replaces the whole set of external routes with effect at
// the next Update: the plan changes then carry a new store revision like
// any other change (the caller makes the store advance, for instance by
// writing a key the planner does not read).
func (p *Planner) StageExternal(routes []External) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.extStaged = &routes
}

// applyExternal applies a staged external set, then adds the external
// keys of every touched network. Caller holds mu.
func (p *Planner) applyExternal(t touchSet) {
	if p.extStaged != nil {
		p.putExternal(*p.extStaged, t)
		p.extStaged = nil
	}
	p.touchExternal(t)
}

// putExternal replaces the external set and marks the networks whose
// external state changed in t. Caller holds mu.
func (p *Planner) putExternal(routes []External, t touchSet) {
	next := externals{remotes: map[string]plan.Remote{}, vnis: map[string]uint32{}, flood: map[uint32]map[netip.Addr]bool{}}
	for _, r := range routes {
		if r.VNI == 0 || !r.VTEP.IsValid() {
			continue
		}
		if r.MAC == "" {
			if next.flood[r.VNI] == nil {
				next.flood[r.VNI] = map[netip.Addr]bool{}
			}
			next.flood[r.VNI][r.VTEP] = true
			continue
		}
		name := fmt.Sprintf("%s%d:%s", externalPrefix, r.VNI, strings.ToLower(r.MAC))
		old, ok := next.remotes[name]
		if ok && old.VTEP.Less(r.VTEP) {
			continue // the same MAC behind two VTEPs: the lowest wins
		}
		rem := plan.Remote{Name: name, Node: externalPrefix + r.VTEP.String(), VTEP: r.VTEP, MAC: strings.ToLower(r.MAC)}
		if ok && old.VTEP == r.VTEP {
			rem.IPs = old.IPs
		}
		for _, ip := range r.IPs {
			if !slices.Contains(rem.IPs, ip) {
				rem.IPs = append(rem.IPs, ip)
			}
		}
		slices.SortFunc(rem.IPs, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
		next.remotes[name] = rem
		next.vnis[name] = r.VNI
	}
	prev := p.ext
	p.ext = next
	// VNIs whose external state changed.
	changed := map[uint32]bool{}
	for name, r := range next.remotes {
		if o, ok := prev.remotes[name]; !ok || !o.Equal(r) {
			changed[next.vnis[name]] = true
		}
	}
	for name := range prev.remotes {
		if _, ok := next.remotes[name]; !ok {
			changed[prev.vnis[name]] = true
		}
	}
	for vni := range union32(prev.flood, next.flood) {
		if !maps.Equal(prev.flood[vni], next.flood[vni]) {
			changed[vni] = true
		}
	}
	for w, n := range p.networks {
		if !changed[n.VNI] {
			continue
		}
		for node := range p.members[w] {
			t.node(node).networks.add(w)
		}
	}
}

func union32(a, b map[uint32]map[netip.Addr]bool) map[uint32]bool {
	out := map[uint32]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// touchExternal adds, for every touched network of a touched node, the
// external remote endpoints it should or does hold. Caller holds mu.
func (p *Planner) touchExternal(t touchSet) {
	for node, x := range t {
		for _, w := range x.networks.sorted() {
			vni := p.networks[w].VNI
			for name, v := range p.ext.vnis {
				if v == vni {
					x.eps.add(name)
				}
			}
			for name, r := range p.planOf(node).Remote {
				if r.Network == w && strings.HasPrefix(name, externalPrefix) {
					x.eps.add(name)
				}
			}
		}
	}
}

// externalRemote is the external remote endpoint name as node should
// have it. Caller holds mu.
func (p *Planner) externalRemote(node, name string) (plan.Remote, bool) {
	r, ok := p.ext.remotes[name]
	if !ok {
		return plan.Remote{}, false
	}
	vni := p.ext.vnis[name]
	for w, n := range p.networks {
		if n.VNI != vni || !p.member(node, w) {
			continue
		}
		if own, _ := p.registered(node); own == r.VTEP {
			return plan.Remote{}, false
		}
		r.Network = w
		return r, true
	}
	return plan.Remote{}, false
}

// externalFlood adds the external VTEPs of n's VNI to its flood list
// (without node's own VTEP or duplicates). Caller holds mu.
func (p *Planner) externalFlood(node string, n *plan.Network) {
	own, _ := p.registered(node)
	for vtep := range p.ext.flood[n.VNI] {
		if vtep != own && !slices.Contains(n.FloodVTEPs, vtep) {
			n.FloodVTEPs = append(n.FloodVTEPs, vtep)
		}
	}
}

// fillExternal puts the external remote endpoints of network w into pl.
// Caller holds mu.
func (p *Planner) fillExternal(node, w string, pl *plan.Plan) {
	vni := p.networks[w].VNI
	for name, v := range p.ext.vnis {
		if v != vni {
			continue
		}
		if r, ok := p.externalRemote(node, name); ok {
			pl.Remote[name] = r
		}
	}
}
