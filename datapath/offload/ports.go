package offload

import (
	"context"
	"sync"
	"time"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/eswitch"
)

// PortOf names where a local endpoint meets the eswitch, by what node (an
// eswitch discovery) holds. A VF endpoint's port is its VF's representor,
// found by the PF (netdev name or PCI address) and VF index; when the VF
// has no netdev on this host (netdevsim), a veth standing in for it is the
// endpoint's interface and becomes the port's target. A veth endpoint's
// host side is its own port. false: the endpoint has no port (yet).
func PortOf(node *eswitch.Node, e plan.Endpoint) (Port, bool) {
	switch e.Kind {
	case plan.KindVF, plan.KindVFIO:
		if node == nil {
			return Port{}, false
		}
		for i := range node.PFs {
			pf := &node.PFs[i]
			if pf.Netdev != e.PF && !(pf.Bus == "pci" && pf.Device == e.PF) {
				continue
			}
			r, err := pf.RepresentorForVF(e.VFIndex)
			if err != nil || r.Netdev == "" {
				return Port{}, false
			}
			return Port{Rep: r.Netdev, Target: datapath.HostIfName(e.Name)}, true
		}
		return Port{}, false
	default:
		return Port{Rep: datapath.HostIfName(e.Name)}, true
	}
}

// eswitchPorts looks ports up in a cached eswitch discovery, discovering
// again when a VF is not found (at most once a second: a VF count or mode
// change makes representors come and go).
type eswitchPorts struct {
	disc *eswitch.Discoverer

	mu   sync.Mutex
	node *eswitch.Node
	last time.Time
}

func (p *eswitchPorts) lookup(e plan.Endpoint) (Port, bool) {
	var port Port
	ok := p.find(func(n *eswitch.Node) bool {
		var found bool
		port, found = PortOf(n, e)
		return found
	})
	return port, ok
}

// vf finds a VF endpoint's PF and VF (by the PF's netdev name or PCI
// address and the VF index). pf nil: no such PF; ok false: no such VF.
func (p *eswitchPorts) vf(e plan.Endpoint) (pf *eswitch.PF, v eswitch.VF, ok bool) {
	p.find(func(n *eswitch.Node) bool {
		pf, v, ok = vfOf(n, e)
		return ok
	})
	return pf, v, ok
}

// current is the cached discovery (discovering when there is none yet,
// at most once a second); nil when discovery fails.
func (p *eswitchPorts) current() *eswitch.Node {
	p.find(func(n *eswitch.Node) bool { return n != nil })
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.node
}

// find calls found with the cached discovery, and again with a new one
// when it answers false (at most once a second).
func (p *eswitchPorts) find(found func(*eswitch.Node) bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.node != nil && found(p.node) {
		return true
	}
	if time.Since(p.last) < time.Second {
		return false
	}
	p.last = time.Now()
	n, err := p.disc.Discover(context.Background())
	if err != nil {
		return false
	}
	p.node = n
	return found(n)
}

// vfOf finds a VF endpoint's PF and VF in a discovery.
func vfOf(node *eswitch.Node, e plan.Endpoint) (*eswitch.PF, eswitch.VF, bool) {
	if node == nil {
		return nil, eswitch.VF{}, false
	}
	for i := range node.PFs {
		pf := &node.PFs[i]
		if pf.Netdev != e.PF && !(pf.Bus == "pci" && pf.Device == e.PF) {
			continue
		}
		for _, v := range pf.VFs {
			if v.Index == e.VFIndex {
				return pf, v, true
			}
		}
		return pf, eswitch.VF{}, false
	}
	return nil, eswitch.VF{}, false
}
