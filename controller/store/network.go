package store

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/skiff-sdn/skiff/controller/ipam"
	"github.com/skiff-sdn/skiff/internal/plan"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// ---- networks ----

// CreateNetwork stores a new network. The name and the VNI must be unused.
func (s *Store) CreateNetwork(ctx context.Context, in *skiffv1.Network) (*skiffv1.Network, error) {
	n := proto.Clone(in).(*skiffv1.Network)
	n.Revision = 0
	if err := validateNetwork(n); err != nil {
		return nil, err
	}
	if n.Egress == "" {
		n.Egress = plan.EgressNone
	}
	nk, vk := s.netKey(n.Name), s.vniKey(n.Vni)
	resp, err := s.cli.Txn(ctx).
		If(notExist(nk), notExist(vk)).
		Then(clientv3.OpPut(nk, marshal(n)), clientv3.OpPut(vk, n.Name)).
		Else(clientv3.OpGet(nk), clientv3.OpGet(vk)).Commit()
	if err != nil {
		return nil, fmt.Errorf("store: create network %q: %w", n.Name, err)
	}
	if !resp.Succeeded {
		if len(resp.Responses[0].GetResponseRange().Kvs) > 0 {
			return nil, errorf(AlreadyExists, "name", "network %q already exists", n.Name)
		}
		owner := ""
		if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
			owner = string(kvs[0].Value)
		}
		return nil, errorf(AlreadyExists, "vni", "%d is already used by network %q", n.Vni, owner)
	}
	n.Revision = resp.Header.Revision
	return n, nil
}

// GetNetwork returns the named network.
func (s *Store) GetNetwork(ctx context.Context, name string) (*skiffv1.Network, error) {
	n, _, err := s.getNetwork(ctx, name)
	return n, err
}

func (s *Store) getNetwork(ctx context.Context, name string) (*skiffv1.Network, int64, error) {
	resp, err := s.cli.Get(ctx, s.netKey(name))
	if err != nil {
		return nil, 0, fmt.Errorf("store: get network %q: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, errorf(NotFound, "", "network %q does not exist", name)
	}
	n, err := unmarshal[skiffv1.Network](resp.Kvs[0].Value)
	if err != nil {
		return nil, 0, err
	}
	n.Revision = resp.Kvs[0].ModRevision
	return n, resp.Kvs[0].ModRevision, nil
}

// ListNetworks returns all networks sorted by name.
func (s *Store) ListNetworks(ctx context.Context) ([]*skiffv1.Network, error) {
	return list[skiffv1.Network](ctx, s, s.k("networks")+"/", 0, func(n *skiffv1.Network, r int64) { n.Revision = r })
}

// DeleteNetwork deletes a network and its subnets. A network that still has
// endpoints is refused. While it checks, the network is locked so that no
// endpoint or subnet can be added.
func (s *Store) DeleteNetwork(ctx context.Context, name string) error {
	n, rev, err := s.getNetwork(ctx, name)
	if err != nil {
		return err
	}
	lock := s.netLock(name)
	resp, err := s.cli.Txn(ctx).If(modRev(s.netKey(name), rev)).Then(clientv3.OpPut(lock, "")).Commit()
	if err != nil {
		return fmt.Errorf("store: delete network %q: lock: %w", name, err)
	}
	if !resp.Succeeded {
		return errorf(Aborted, "", "network %q changed during delete; retry", name)
	}
	unlock := func() {
		if _, err := s.cli.Delete(context.WithoutCancel(ctx), lock); err != nil {
			s.log.Error("unlock network", "network", name, "err", err)
		}
	}
	eps, err := s.cli.Get(ctx, s.k("epnet", name)+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(5))
	if err != nil {
		unlock()
		return fmt.Errorf("store: delete network %q: count endpoints: %w", name, err)
	}
	if eps.Count > 0 {
		unlock()
		var names []string
		for _, kv := range eps.Kvs {
			names = append(names, lastSeg(kv.Key))
		}
		return errorf(FailedPrecondition, "", "network %q still has %d endpoint(s) (%s); delete them first", name, eps.Count, strings.Join(names, ", "))
	}
	subs, err := s.cli.Get(ctx, s.k("snet", name)+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		unlock()
		return fmt.Errorf("store: delete network %q: list subnets: %w", name, err)
	}
	ops := []clientv3.Op{
		clientv3.OpDelete(s.netKey(name)), clientv3.OpDelete(s.vniKey(n.Vni)), clientv3.OpDelete(lock),
		clientv3.OpDelete(s.subnetGuard(name)),
		clientv3.OpDelete(s.k("snet", name)+"/", clientv3.WithPrefix()),
		clientv3.OpDelete(s.k("sublock", name)+"/", clientv3.WithPrefix()),
	}
	for _, kv := range subs.Kvs {
		sub := lastSeg(kv.Key)
		ops = append(ops, clientv3.OpDelete(s.subnetName(sub)))
	}
	resp, err = s.cli.Txn(ctx).If(modRev(s.netKey(name), rev)).Then(ops...).Commit()
	if err != nil {
		unlock()
		return fmt.Errorf("store: delete network %q: %w", name, err)
	}
	if !resp.Succeeded {
		unlock()
		return errorf(Aborted, "", "network %q changed during delete; retry", name)
	}
	return nil
}

// ---- subnets ----

// CreateSubnet stores a new subnet on an existing network. Its CIDR must not
// overlap another subnet of the same network, nor one of another network
// unless both networks' egress is none: a network whose egress is not
// none is routed by the nodes' own stack (host ports, gateways), where
// one address must mean one endpoint; isolated tenant networks may reuse
// addresses.
func (s *Store) CreateSubnet(ctx context.Context, in *skiffv1.Subnet) (*skiffv1.Subnet, error) {
	sub := proto.Clone(in).(*skiffv1.Subnet)
	sub.Revision = 0
	pool, err := validateSubnet(sub)
	if err != nil {
		return nil, err
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		n, nrev, err := s.getNetwork(ctx, sub.Network)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				return nil, errorf(NotFound, "network", "network %q does not exist", sub.Network)
			}
			return nil, err
		}
		snap, err := s.readNetworkState(ctx, sub.Network, false)
		if err != nil {
			return nil, err
		}
		if snap.locked {
			return nil, errorf(FailedPrecondition, "network", "network %q is being deleted", sub.Network)
		}
		for _, o := range snap.subnets {
			if o.pool.Prefix.Overlaps(pool.Prefix) {
				return nil, errorf(Invalid, "cidr", "%s overlaps %s of subnet %q on network %q", pool.Prefix, o.pool.Prefix, o.sub.Name, sub.Network)
			}
		}
		srev, err := s.checkOtherNetworks(ctx, n, pool.Prefix)
		if err != nil {
			return nil, err
		}
		nameKey := s.subnetName(sub.Name)
		cmps := []clientv3.Cmp{modRev(s.netKey(sub.Network), nrev), notExist(s.netLock(sub.Network)),
			modRev(s.subnetGuard(sub.Network), snap.guardRev), notExist(nameKey)}
		puts := []clientv3.Op{clientv3.OpPut(s.subnetKey(sub.Network, sub.Name), marshal(sub)),
			clientv3.OpPut(nameKey, sub.Network), clientv3.OpPut(s.subnetGuard(sub.Network), "")}
		// What another network's subnet created meanwhile could make
		// wrong: on a routed network, any overlap (every subnet is
		// compared); on an isolated one, only an overlap with a routed
		// network's subnet, whose creation bumps the routed guard. Two
		// isolated networks' creations do not conflict (with every subnet
		// compared, 32 tenants' creations at once retried until they gave
		// up: TestIsolatedSubnetsDoNotConflict).
		if isolatedEgress(n.GetEgress()) {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.routedGuard()), "<", srev+1))
		} else {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.k("snet")+"/"), "<", srev+1).WithPrefix())
			puts = append(puts, clientv3.OpPut(s.routedGuard(), ""))
		}
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(puts...).Else(clientv3.OpGet(nameKey)).Commit()
		if err != nil {
			return nil, fmt.Errorf("store: create subnet %q: %w", sub.Name, err)
		}
		if resp.Succeeded {
			sub.Revision = resp.Header.Revision
			return sub, nil
		}
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			return nil, errorf(AlreadyExists, "name", "subnet %q already exists (on network %q)", sub.Name, kvs[0].Value)
		}
	}
	return nil, errorf(Aborted, "", "subnet %q: too many concurrent changes to network %q; retry", sub.Name, sub.Network)
}

// checkOtherNetworks refuses a prefix of network n overlapping a subnet
// of another network, unless both networks' egress is none. It returns
// the revision it read at: the creation commits only if no subnet was
// written since.
func (s *Store) checkOtherNetworks(ctx context.Context, n *skiffv1.Network, p netip.Prefix) (int64, error) {
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.k("snet")+"/", clientv3.WithPrefix()),
		clientv3.OpGet(s.k("networks")+"/", clientv3.WithPrefix())).Commit()
	if err != nil {
		return 0, fmt.Errorf("store: read subnets: %w", err)
	}
	egress := map[string]string{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		o, err := unmarshal[skiffv1.Network](kv.Value)
		if err != nil {
			return 0, err
		}
		egress[o.GetName()] = o.GetEgress()
	}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		o, err := unmarshal[skiffv1.Subnet](kv.Value)
		if err != nil {
			return 0, err
		}
		if o.GetNetwork() == n.GetName() {
			continue // checked with the network's own state
		}
		op, err := netip.ParsePrefix(o.GetCidr())
		if err != nil {
			return 0, fmt.Errorf("store: stored subnet %q has CIDR %q: %w", o.GetName(), o.GetCidr(), err)
		}
		if op.Overlaps(p) && !(isolatedEgress(n.GetEgress()) && isolatedEgress(egress[o.GetNetwork()])) {
			return 0, errorf(Invalid, "cidr", "%s overlaps %s of subnet %q on network %q: only two networks whose egress is none may share addresses (%q is %s, %q is %s)",
				p, op.Masked(), o.GetName(), o.GetNetwork(), n.GetName(), n.GetEgress(), o.GetNetwork(), egress[o.GetNetwork()])
		}
	}
	return resp.Header.Revision, nil
}

// isolatedEgress says whether a network with this egress is an isolated
// tenant's, whose addresses other isolated networks may reuse.
func isolatedEgress(e string) bool { return e == "" || e == plan.EgressNone }

// GetSubnet returns the named subnet.
func (s *Store) GetSubnet(ctx context.Context, name string) (*skiffv1.Subnet, error) {
	resp, err := s.cli.Get(ctx, s.subnetName(name))
	if err != nil {
		return nil, fmt.Errorf("store: get subnet %q: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, errorf(NotFound, "", "subnet %q does not exist", name)
	}
	net := string(resp.Kvs[0].Value)
	body, err := s.cli.Get(ctx, s.subnetKey(net, name))
	if err != nil {
		return nil, fmt.Errorf("store: get subnet %q: %w", name, err)
	}
	if len(body.Kvs) == 0 {
		return nil, errorf(NotFound, "", "subnet %q does not exist", name)
	}
	sub, err := unmarshal[skiffv1.Subnet](body.Kvs[0].Value)
	if err != nil {
		return nil, err
	}
	sub.Revision = body.Kvs[0].ModRevision
	return sub, nil
}

// ListSubnets returns the subnets of network, or all when network is empty,
// sorted by network and name.
func (s *Store) ListSubnets(ctx context.Context, network string) ([]*skiffv1.Subnet, error) {
	prefix := s.k("snet") + "/"
	if network != "" {
		prefix = s.k("snet", network) + "/"
	}
	return list[skiffv1.Subnet](ctx, s, prefix, 0, func(x *skiffv1.Subnet, r int64) { x.Revision = r })
}

// DeleteSubnet deletes a subnet that has no allocated address.
func (s *Store) DeleteSubnet(ctx context.Context, name string) error {
	sub, err := s.GetSubnet(ctx, name)
	if err != nil {
		return err
	}
	pool, err := ipam.NewPool(subnetSpec(sub))
	if err != nil {
		return fmt.Errorf("store: stored subnet %q is invalid: %w", name, err)
	}
	bodyKey, lock, guard := s.subnetKey(sub.Network, name), s.subLock(sub.Network, name), s.subnetGuard(sub.Network)
	resp, err := s.cli.Txn(ctx).If(modRev(bodyKey, sub.Revision)).
		Then(clientv3.OpPut(lock, ""), clientv3.OpPut(guard, "")).Commit()
	if err != nil {
		return fmt.Errorf("store: delete subnet %q: lock: %w", name, err)
	}
	if !resp.Succeeded {
		return errorf(Aborted, "", "subnet %q changed during delete; retry", name)
	}
	unlock := func() {
		_, err := s.cli.Txn(context.WithoutCancel(ctx)).Then(clientv3.OpDelete(lock), clientv3.OpPut(guard, "")).Commit()
		if err != nil {
			s.log.Error("unlock subnet", "subnet", name, "err", err)
		}
	}
	allocs, err := s.cli.Get(ctx, s.k("ipalloc", sub.Network)+"/", clientv3.WithPrefix())
	if err != nil {
		unlock()
		return fmt.Errorf("store: delete subnet %q: list allocations: %w", name, err)
	}
	var users []string
	for _, kv := range allocs.Kvs {
		a, err := netip.ParseAddr(lastSeg(kv.Key))
		if err == nil && pool.Prefix.Contains(a) {
			users = append(users, string(kv.Value))
		}
	}
	if len(users) > 0 {
		unlock()
		return errorf(FailedPrecondition, "", "subnet %q still has %d allocated address(es), used by endpoint(s) %s; delete them first",
			name, len(users), strings.Join(firstN(users, 5), ", "))
	}
	_, err = s.cli.Txn(ctx).Then(clientv3.OpDelete(bodyKey), clientv3.OpDelete(s.subnetName(name)),
		clientv3.OpDelete(lock), clientv3.OpPut(guard, "")).Commit()
	if err != nil {
		unlock()
		return fmt.Errorf("store: delete subnet %q: %w", name, err)
	}
	return nil
}
