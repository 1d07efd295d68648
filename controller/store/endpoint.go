package store

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/skiff-sdn/skiff/controller/ipam"
	"github.com/skiff-sdn/skiff/internal/plan"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// ---- endpoints ----

// CreateEndpoint stores a new endpoint, allocating its addresses and MAC in
// the same transaction. Requested addresses (ips) must be free and
// allocatable; otherwise one address per IP family present on the network
// is allocated from the first subnet of that family with room. The node
// need not be registered, except for a VM port (kind tap or vfio). A VF
// (kind vf or vfio with PF and index) is reserved for the endpoint; a
// vfio port without a PF gets a free VF of its node.
func (s *Store) CreateEndpoint(ctx context.Context, in *skiffv1.Endpoint) (*skiffv1.Endpoint, error) {
	e := proto.Clone(in).(*skiffv1.Endpoint)
	if err := validateEndpoint(e); err != nil {
		return nil, err
	}
	var node *skiffv1.Node
	if IsPort(e.Kind) {
		n, err := s.portNode(ctx, e)
		if err != nil {
			return nil, err
		}
		node = n
	} else if e.Kind == plan.KindVF {
		// A VF's PF may be named by PCI address or netdev; the node's
		// capabilities, when registered, make both one reservation.
		if n, err := s.GetNode(ctx, e.Node); err == nil {
			node = n
		}
	}
	requested := slices.Clone(e.Ips)
	seed := fnv.New64a()
	seed.Write([]byte(e.Name))
	misses := 0 // probes that found every candidate taken
	for attempt := 0; attempt < maxAttempts; attempt++ {
		// An attempt probes a few candidate addresses, reading only their
		// keys (its cost does not grow with the network). Only once
		// probeRounds probes found every candidate taken (a nearly full
		// subnet) do attempts scan every allocation of the network. A lost
		// race (the transaction's compares) probes again with new
		// candidates; the compares, not the probe, keep addresses unique.
		// Everything else an attempt needs is one linearizable read: each
		// waits for every write etcd knows of to be applied, so a
		// creation among many waited once per read (TestCreateRoundTrips).
		scan := misses >= probeRounds
		cs, err := s.readCreateState(ctx, e, scan)
		if err != nil {
			return nil, err
		}
		st, nrev := cs.net, cs.nrev
		if st.locked {
			return nil, errorf(FailedPrecondition, "network", "network %q is being deleted", e.Network)
		}
		// An owner record gives the endpoint its labels and namespace; a
		// record changed meanwhile makes the transaction fail and retry.
		var ownerRev int64
		if e.Owner != "" {
			e.Labels, e.Namespace = in.GetLabels(), in.GetNamespace()
			if cs.owner != nil {
				ownedLabels(e, cs.owner)
			}
			ownerRev = cs.ownerRev
		}
		sd := seed.Sum64() + uint64(attempt)*7919
		if !scan {
			if err := s.probe(ctx, st, e.Network, requested, sd); err != nil {
				return nil, err
			}
		}
		ips, err := allocate(st, e.Network, requested, sd, !scan)
		if err != nil {
			if errors.Is(err, errProbesTaken) {
				misses++
				continue
			}
			return nil, err
		}
		vf, holdsVF, err := s.chooseVF(ctx, e, node)
		if err != nil {
			return nil, err
		}
		mac := e.Mac
		if len(in.GetMac()) == 0 {
			mac = ipam.MAC(e.Network, e.Name, attempt)
		}
		out := proto.Clone(e).(*skiffv1.Endpoint)
		out.Mac = mac
		out.Ips = nil
		if holdsVF {
			out.Pf, out.VfIndex = vf.pf, &vf.index
		}
		cmps := []clientv3.Cmp{
			modRev(s.netKey(e.Network), nrev), notExist(s.netLock(e.Network)),
			modRev(s.subnetGuard(e.Network), st.guardRev), notExist(s.epKey(e.Name)),
			notExist(s.macKey(e.Network, mac)),
		}
		els := []clientv3.Op{clientv3.OpGet(s.epKey(e.Name)), clientv3.OpGet(s.macKey(e.Network, mac))}
		var puts []clientv3.Op
		for _, p := range ips {
			out.Ips = append(out.Ips, p.String())
			k := s.ipKey(e.Network, p.Addr())
			cmps = append(cmps, notExist(k))
			puts = append(puts, clientv3.OpPut(k, e.Name))
			els = append(els, clientv3.OpGet(k))
		}
		if holdsVF {
			cmps = append(cmps, notExist(vf.key))
			puts = append(puts, clientv3.OpPut(vf.key, e.Name))
		}
		puts = append(puts, clientv3.OpPut(s.epKey(e.Name), marshal(out)),
			clientv3.OpPut(s.epNetKey(e.Network, e.Name), ""), clientv3.OpPut(s.macKey(e.Network, mac), e.Name))
		if e.Owner != "" {
			cmps = append(cmps, modRev(s.ownerKey(e.Owner), ownerRev))
			puts = append(puts, clientv3.OpPut(s.epOwnerKey(e.Owner, e.Name), ""))
		}
		// The VF's reservation is read last, after the addresses.
		if holdsVF {
			els = append(els, clientv3.OpGet(vf.key))
		}
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(puts...).Else(els...).Commit()
		if err != nil {
			return nil, fmt.Errorf("store: create endpoint %q: %w", e.Name, err)
		}
		if resp.Succeeded {
			out.Revision = resp.Header.Revision
			return out, nil
		}
		rr := func(i int) []byte {
			if kvs := resp.Responses[i].GetResponseRange().Kvs; len(kvs) > 0 {
				return kvs[0].Value
			}
			return nil
		}
		if rr(0) != nil {
			return nil, errorf(AlreadyExists, "name", "endpoint %q already exists", e.Name)
		}
		if owner := rr(1); owner != nil && in.GetMac() != "" {
			return nil, errorf(AlreadyExists, "mac", "%s is already used by endpoint %q on network %q", mac, owner, e.Network)
		}
		if len(requested) > 0 {
			for i := range ips {
				if owner := rr(2 + i); owner != nil {
					return nil, errorf(AlreadyExists, fmt.Sprintf("ips[%d]", i), "%s is already used by endpoint %q", ips[i].Addr(), owner)
				}
			}
		}
		if holdsVF && !vf.picked {
			if owner := rr(2 + len(ips)); owner != nil {
				return nil, errorf(AlreadyExists, "vfIndex", "VF %d of PF %s on node %q is already used by endpoint %q", vf.index, vf.pf, e.Node, owner)
			}
		}
		s.log.Debug("endpoint allocation raced, retrying", "endpoint", e.Name, "attempt", attempt)
	}
	return nil, errorf(Aborted, "", "endpoint %q: too many concurrent allocations on network %q; retry", e.Name, e.Network)
}

// createState is what one attempt of an endpoint creation reads.
type createState struct {
	net      *networkState
	nrev     int64 // the network's revision
	owner    *skiffv1.Owner
	ownerRev int64
}

// readCreateState reads, in one transaction, whether the endpoint's name
// is free, its network and the network's state (with every allocation if
// scan: see readNetworkState), and its owner record. An attempt probes
// its candidate addresses with no more than this.
func (s *Store) readCreateState(ctx context.Context, e *skiffv1.Endpoint, scan bool) (*createState, error) {
	ops := []clientv3.Op{clientv3.OpGet(s.epKey(e.Name), clientv3.WithCountOnly()), clientv3.OpGet(s.netKey(e.Network))}
	if e.Owner != "" {
		ops = append(ops, clientv3.OpGet(s.ownerKey(e.Owner)))
	}
	base := len(ops)
	resp, err := s.cli.Txn(ctx).Then(append(ops, s.networkStateOps(e.Network, scan)...)...).Commit()
	if err != nil {
		return nil, fmt.Errorf("store: create endpoint %q: %w", e.Name, err)
	}
	r := func(i int) *pb.RangeResponse { return resp.Responses[i].GetResponseRange() }
	if r(0).Count > 0 {
		return nil, errorf(AlreadyExists, "name", "endpoint %q already exists", e.Name)
	}
	if len(r(1).Kvs) == 0 {
		return nil, errorf(NotFound, "network", "network %q does not exist", e.Network)
	}
	cs := &createState{nrev: r(1).Kvs[0].ModRevision}
	if e.Owner != "" {
		if cs.owner, cs.ownerRev, err = ownerFrom(r(2).Kvs); err != nil {
			return nil, err
		}
	}
	if cs.net, err = parseNetworkState(resp.Responses[base:], scan); err != nil {
		return nil, err
	}
	return cs, nil
}

// GetEndpoint returns the named endpoint.
func (s *Store) GetEndpoint(ctx context.Context, name string) (*skiffv1.Endpoint, error) {
	resp, err := s.cli.Get(ctx, s.epKey(name))
	if err != nil {
		return nil, fmt.Errorf("store: get endpoint %q: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, errorf(NotFound, "", "endpoint %q does not exist", name)
	}
	e, err := unmarshal[skiffv1.Endpoint](resp.Kvs[0].Value)
	if err != nil {
		return nil, err
	}
	e.Revision = resp.Kvs[0].ModRevision
	return e, nil
}

// ListEndpoints returns endpoints sorted by name, filtered by network and
// node when they are not empty.
func (s *Store) ListEndpoints(ctx context.Context, network, node string) ([]*skiffv1.Endpoint, error) {
	all, err := list[skiffv1.Endpoint](ctx, s, s.k("endpoints")+"/", 0, func(x *skiffv1.Endpoint, r int64) { x.Revision = r })
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(e *skiffv1.Endpoint) bool {
		return (network != "" && e.Network != network) || (node != "" && e.Node != node)
	}), nil
}

// DeleteEndpoint deletes an endpoint and frees its addresses and MAC.
func (s *Store) DeleteEndpoint(ctx context.Context, name string) error {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		e, err := s.GetEndpoint(ctx, name)
		if err != nil {
			return err
		}
		resp, err := s.cli.Txn(ctx).If(modRev(s.epKey(name), e.Revision)).Then(s.endpointDeleteOps(ctx, e)...).Commit()
		if err != nil {
			return fmt.Errorf("store: delete endpoint %q: %w", name, err)
		}
		if resp.Succeeded {
			return nil
		}
	}
	return errorf(Aborted, "", "endpoint %q kept changing during delete; retry", name)
}

// endpointDeleteOps deletes a stored endpoint e and frees what it holds
// (addresses, MAC, VF, port status, owner index). The caller compares e's
// revision.
func (s *Store) endpointDeleteOps(ctx context.Context, e *skiffv1.Endpoint) []clientv3.Op {
	name := e.Name
	ops := []clientv3.Op{
		clientv3.OpDelete(s.epKey(name)), clientv3.OpDelete(s.epNetKey(e.Network, name)),
		clientv3.OpDelete(s.macKey(e.Network, e.Mac)), clientv3.OpDelete(s.portStatusKey(name)),
		clientv3.OpDelete(s.dpuReadyKey(name)),
	}
	if e.Owner != "" {
		ops = append(ops, clientv3.OpDelete(s.epOwnerKey(e.Owner, name)))
	}
	if e.GetPf() != "" && e.VfIndex != nil {
		// Only the reservation this endpoint holds (either spelling
		// of its PF).
		for _, pf := range slices.Compact([]string{e.GetPf(), s.registeredPF(ctx, e)}) {
			k := s.vfKey(e.Node, pf, e.GetVfIndex())
			ops = append(ops, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(k), "=", name)}, []clientv3.Op{clientv3.OpDelete(k)}, nil))
		}
	}
	for _, ip := range e.Ips {
		if a, err := parseEndpointIP(ip); err == nil {
			ops = append(ops, clientv3.OpDelete(s.ipKey(e.Network, a)))
		}
	}
	return ops
}
