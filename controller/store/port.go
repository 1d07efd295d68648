package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/skiff-sdn/skiff/internal/plan"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// ---- VM ports ----
//
// A VM port is an endpoint of kind tap or vfio owned by "vm:ID". Its node
// must be registered (the node's agent plumbs it; for vfio the node's
// capabilities list the VFs). A VF used by an endpoint (kind vf or vfio)
// is reserved under vfalloc/NODE/PF/INDEX in the endpoint's transaction,
// so that one VF serves one endpoint whatever the concurrency. The node's
// agent reports each port's status (portstatus/EP), which is deleted with
// the endpoint.

// VMPrefix starts the owner of a VM's endpoints.
const VMPrefix = "vm:"

// IsPort reports whether an endpoint kind is a VM port's.
func IsPort(kind string) bool { return kind == plan.KindTap || kind == plan.KindVFIO }

// VMOf returns the VM of an endpoint owned by one ("" otherwise).
func VMOf(e *skiffv1.Endpoint) string {
	id, ok := strings.CutPrefix(e.GetOwner(), VMPrefix)
	if !ok {
		return ""
	}
	return id
}

func (s *Store) vfKey(node, pf string, vf int32) string {
	return s.k("vfalloc", node, pf, strconv.Itoa(int(vf)))
}
func (s *Store) portStatusKey(ep string) string { return s.k("portstatus", ep) }

// validatePort checks what only VM ports need: an owner vm:ID, and PF and
// VF index only for vfio.
func validatePort(e *skiffv1.Endpoint) error {
	if !IsPort(e.Kind) {
		return nil
	}
	id, ok := strings.CutPrefix(e.GetOwner(), VMPrefix)
	if !ok {
		return invalid("owner", "kind %s is a VM port: the owner must be vm:ID, got %q", e.Kind, e.GetOwner())
	}
	if err := ValidateName("owner", id); err != nil {
		return invalid("owner", "VM id %q: must be 1..253 characters of [a-z0-9.-], starting and ending with a letter or digit", id)
	}
	if e.Kind == plan.KindTap && e.GetPf() != "" {
		return invalid("pf", "only for kind vf or vfio, not tap")
	}
	if e.GetPf() == "" && e.VfIndex != nil {
		return invalid("vfIndex", "needs pf")
	}
	return nil
}

// vfChoice is the VF an endpoint will hold: its reservation key, and for
// a picked VF the PF and index to store.
type vfChoice struct {
	key    string
	pf     string
	index  int32
	picked bool
}

// chooseVF returns the VF an endpoint needs reserved: the one it names
// (vf, vfio), or for vfio without a PF a free VF of the node. node may be
// nil for kind vf (a node not registered yet). ok is false when the
// endpoint holds no VF.
func (s *Store) chooseVF(ctx context.Context, e *skiffv1.Endpoint, node *skiffv1.Node) (vfChoice, bool, error) {
	switch {
	case e.Kind != plan.KindVF && e.Kind != plan.KindVFIO:
		return vfChoice{}, false, nil
	case e.GetPf() != "" && e.VfIndex != nil:
		pf := canonicalPF(node, e.GetPf())
		return vfChoice{key: s.vfKey(e.Node, pf, e.GetVfIndex()), pf: e.GetPf(), index: e.GetVfIndex()}, true, nil
	case e.Kind == plan.KindVF:
		return vfChoice{}, false, nil
	case e.GetPf() != "":
		return vfChoice{}, false, invalid("vfIndex", "required with pf (or give neither: a free VF is picked)")
	}
	resp, err := s.cli.Get(ctx, s.k("vfalloc", e.Node)+"/", clientv3.WithPrefix())
	if err != nil {
		return vfChoice{}, false, fmt.Errorf("store: VFs of node %q: %w", e.Node, err)
	}
	used := map[string]string{}
	for _, kv := range resp.Kvs {
		used[string(kv.Key)] = string(kv.Value)
	}
	pf, idx, err := pickVF(node, func(pf string, vf int32) bool { _, ok := used[s.vfKey(e.Node, pf, vf)]; return ok })
	if err != nil {
		return vfChoice{}, false, err
	}
	return vfChoice{key: s.vfKey(e.Node, pf, idx), pf: pf, index: idx, picked: true}, true, nil
}

// canonicalPF names a PF by its netdev when the node's capabilities know
// it by the PCI address given, so that both spellings reserve one key.
func canonicalPF(node *skiffv1.Node, pf string) string {
	for _, p := range node.GetCapabilities().GetPfs() {
		if p.GetPciAddress() != "" && p.GetPciAddress() == pf && p.GetName() != "" {
			return p.GetName()
		}
	}
	return pf
}

// pickVF picks the first VF, by PF and index, that a vfio port can use:
// a PCI function on a PF whose eswitch is in switchdev mode (its
// representor carries the port's traffic), not bound to vfio-pci by
// someone else, and not reserved (used). The error says why none is.
func pickVF(node *skiffv1.Node, used func(pf string, vf int32) bool) (string, int32, error) {
	pfs := node.GetCapabilities().GetPfs()
	var why []string
	for _, p := range pfs {
		if p.GetEswitchMode() != "switchdev" {
			why = append(why, fmt.Sprintf("PF %s is in eswitch mode %q, not switchdev", p.GetName(), p.GetEswitchMode()))
			continue
		}
		var noPCI, taken int
		for _, v := range p.GetVfs() {
			idx := int32(v.GetIndex())
			switch {
			case v.GetPciAddress() == "":
				noPCI++
			case used(p.GetName(), idx) || v.GetDriver() == "vfio-pci":
				taken++
			default:
				return p.GetName(), idx, nil
			}
		}
		msg := fmt.Sprintf("PF %s has %d VFs", p.GetName(), len(p.GetVfs()))
		if taken > 0 {
			msg += fmt.Sprintf(", %d in use", taken)
		}
		if noPCI > 0 {
			msg += fmt.Sprintf(", %d without a PCI function (vfio-pci binds PCI functions only)", noPCI)
		}
		why = append(why, msg)
	}
	if len(pfs) == 0 {
		why = append(why, "its capabilities list no PF with VFs")
	}
	return "", 0, errorf(Exhausted, "kind", "node %q has no free VF for a vfio port: %s", node.GetName(), strings.Join(why, "; "))
}

// portNode returns the registered node a VM port goes to.
func (s *Store) portNode(ctx context.Context, e *skiffv1.Endpoint) (*skiffv1.Node, error) {
	n, err := s.GetNode(ctx, e.Node)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, errorf(NotFound, "node", "node %q does not exist (no agent has registered it)", e.Node)
		}
		return nil, err
	}
	if e.Kind == plan.KindVFIO && n.GetMode() != "offload" {
		return nil, errorf(FailedPrecondition, "kind", "vfio on node %q: the node runs mode %q; a vfio port needs an offload node (an eswitch in switchdev mode)", e.Node, n.GetMode())
	}
	return n, nil
}

// ListPorts returns the VM ports, sorted by name: of one VM when vm is
// set, of one node when node is set.
func (s *Store) ListPorts(ctx context.Context, vm, node string) ([]*skiffv1.Endpoint, error) {
	all, err := s.ListEndpoints(ctx, "", node)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(e *skiffv1.Endpoint) bool {
		return !IsPort(e.Kind) || VMOf(e) == "" || (vm != "" && VMOf(e) != vm)
	}), nil
}

// SetPortStatus records what a node reports of its VM ports: a status per
// port of the node, replaced when it changed (the report time aside);
// ports of the node the report does not list lose their status. Reports
// about endpoints of other nodes, or that no longer exist, are dropped.
func (s *Store) SetPortStatus(ctx context.Context, node string, reports []*skiffv1.PortReport) error {
	ports, err := s.ListPorts(ctx, "", node)
	if err != nil {
		return err
	}
	byName := map[string]*skiffv1.PortStatus{}
	for _, r := range reports {
		byName[r.GetEndpoint()] = r.GetStatus()
	}
	have, err := s.portStatuses(ctx)
	if err != nil {
		return err
	}
	for _, e := range ports {
		want, reported := byName[e.Name]
		cur, exists := have[e.Name]
		var op clientv3.Op
		switch {
		case reported && want != nil && exists && sameStatus(cur, want):
			continue
		case reported && want != nil:
			op = clientv3.OpPut(s.portStatusKey(e.Name), marshal(want))
		case exists:
			op = clientv3.OpDelete(s.portStatusKey(e.Name))
		default:
			continue
		}
		// Only while the endpoint is the one listed: a port deleted (and
		// perhaps created again) meanwhile gets no stale status.
		if _, err := s.cli.Txn(ctx).If(modRev(s.epKey(e.Name), e.Revision)).Then(op).Commit(); err != nil {
			return fmt.Errorf("store: status of port %q: %w", e.Name, err)
		}
	}
	return nil
}

func sameStatus(a, b *skiffv1.PortStatus) bool {
	x, y := proto.Clone(a).(*skiffv1.PortStatus), proto.Clone(b).(*skiffv1.PortStatus)
	x.Time, y.Time, x.PlanRevision, y.PlanRevision = nil, nil, 0, 0
	return proto.Equal(x, y)
}

func (s *Store) portStatuses(ctx context.Context) (map[string]*skiffv1.PortStatus, error) {
	resp, err := s.cli.Get(ctx, s.k("portstatus")+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("store: port status: %w", err)
	}
	out := map[string]*skiffv1.PortStatus{}
	for _, kv := range resp.Kvs {
		st, err := unmarshal[skiffv1.PortStatus](kv.Value)
		if err != nil {
			return nil, err
		}
		out[lastSeg(kv.Key)] = st
	}
	return out, nil
}

// FillPortStatus sets the Port field of the VM ports among es from what
// their nodes reported.
func (s *Store) FillPortStatus(ctx context.Context, es ...*skiffv1.Endpoint) error {
	any := false
	for _, e := range es {
		any = any || IsPort(e.Kind)
	}
	if !any {
		return nil
	}
	st, err := s.portStatuses(ctx)
	if err != nil {
		return err
	}
	for _, e := range es {
		if IsPort(e.Kind) {
			e.Port = st[e.Name]
		}
	}
	return nil
}

// WaitPort waits until the node of port name reports a status for which
// done returns true, and returns it. A status already stored counts. It
// fails when the endpoint is deleted meanwhile, or ctx ends.
func (s *Store) WaitPort(ctx context.Context, name string, done func(*skiffv1.PortStatus) bool) (*skiffv1.PortStatus, error) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.epKey(name)), clientv3.OpGet(s.portStatusKey(name))).Commit()
	if err != nil {
		return nil, fmt.Errorf("store: port %q: %w", name, err)
	}
	if len(resp.Responses[0].GetResponseRange().Kvs) == 0 {
		return nil, errorf(NotFound, "", "port %q does not exist", name)
	}
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		st, err := unmarshal[skiffv1.PortStatus](kvs[0].Value)
		if err != nil {
			return nil, err
		}
		if done(st) {
			return st, nil
		}
	}
	wch := s.cli.Watch(ctx, s.portStatusKey(name), clientv3.WithRev(resp.Header.Revision+1))
	ech := s.cli.Watch(ctx, s.epKey(name), clientv3.WithRev(resp.Header.Revision+1))
	for {
		select {
		case r, ok := <-wch:
			if !ok || r.Err() != nil {
				return nil, fmt.Errorf("store: watching port %q: %v (%w)", name, r.Err(), ctx.Err())
			}
			for _, ev := range r.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				st, err := unmarshal[skiffv1.PortStatus](ev.Kv.Value)
				if err != nil {
					return nil, err
				}
				if done(st) {
					return st, nil
				}
			}
		case r, ok := <-ech:
			if !ok || r.Err() != nil {
				return nil, fmt.Errorf("store: watching port %q: %v (%w)", name, r.Err(), ctx.Err())
			}
			for _, ev := range r.Events {
				if ev.Type == clientv3.EventTypeDelete {
					return nil, errorf(NotFound, "", "port %q was deleted", name)
				}
			}
		}
	}
}

// registeredPF is the PF of a VF endpoint as its reservation names it
// (canonicalPF), or its own spelling when the node is gone.
func (s *Store) registeredPF(ctx context.Context, e *skiffv1.Endpoint) string {
	n, err := s.GetNode(ctx, e.Node)
	if err != nil {
		return e.GetPf()
	}
	return canonicalPF(n, e.GetPf())
}
