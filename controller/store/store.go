// Package store keeps Skiff's objects in etcd: networks, subnets, endpoints
// and nodes, with their uniqueness indexes and address allocations. Every
// change is one etcd transaction guarded by compares, so several controller
// replicas may share one etcd cluster: a VNI, a name, an IP on a network or a
// MAC on a network belongs to at most one object whatever the concurrency.
//
//	st := store.New(etcdClient, logger)
//	net, err := st.CreateNetwork(ctx, &skiffv1.Network{Name: "blue", Vni: 100})
//	ep, err := st.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "pod-a", Network: "blue", Node: "n1"})
//
// Errors are *Error values: their Kind says what went wrong (Invalid,
// NotFound, AlreadyExists, FailedPrecondition, Exhausted, Aborted) and Field
// names the field at fault.
//
// Key layout under the prefix (default /skiff/v1/):
//
//	networks/NET            Network            vni/VNI -> NET
//	snet/NET/SUB            Subnet             subnets/SUB -> NET
//	subnetguard/NET         bumped on every subnet change of NET
//	netlock/NET, sublock/NET/SUB   held while a delete checks for users
//	endpoints/EP            Endpoint           epnet/NET/EP
//	ipalloc/NET/ADDR -> EP  macalloc/NET/MAC -> EP
//	nodes/NODE              Node               vtep/ADDR -> NODE
//	status/NODE             leased: the node's agent is connected
package store

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/skiff-sdn/skiff/controller/ipam"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// DefaultPrefix is where Skiff keeps its keys in etcd.
const DefaultPrefix = "/skiff/v1/"

// Aborted means a change kept losing races with concurrent changes; the
// caller may retry.
const Aborted Kind = Exhausted + 1

const maxAttempts = 64

// Store is Skiff's etcd-backed object store. It is safe for concurrent use;
// all state lives in etcd.
type Store struct {
	cli    *clientv3.Client
	log    *slog.Logger
	prefix string
}

// New returns a store on cli under DefaultPrefix.
func New(cli *clientv3.Client, log *slog.Logger) *Store {
	return &Store{cli: cli, log: log, prefix: DefaultPrefix}
}

// WithPrefix returns a store using another key prefix (tests).
func (s *Store) WithPrefix(p string) *Store {
	c := *s
	c.prefix = p
	return &c
}

// Client returns the etcd client.
func (s *Store) Client() *clientv3.Client { return s.cli }

func (s *Store) k(parts ...string) string { return s.prefix + strings.Join(parts, "/") }

func (s *Store) netKey(n string) string           { return s.k("networks", n) }
func (s *Store) vniKey(v uint32) string           { return s.k("vni", fmt.Sprint(v)) }
func (s *Store) subnetKey(net, sub string) string { return s.k("snet", net, sub) }
func (s *Store) subnetName(sub string) string     { return s.k("subnets", sub) }
func (s *Store) subnetGuard(net string) string    { return s.k("subnetguard", net) }
func (s *Store) netLock(net string) string        { return s.k("netlock", net) }
func (s *Store) subLock(net, sub string) string   { return s.k("sublock", net, sub) }
func (s *Store) epKey(ep string) string           { return s.k("endpoints", ep) }
func (s *Store) epNetKey(net, ep string) string   { return s.k("epnet", net, ep) }
func (s *Store) ipKey(net string, a netip.Addr) string {
	return s.k("ipalloc", net, a.String())
}
func (s *Store) macKey(net, mac string) string { return s.k("macalloc", net, mac) }
func (s *Store) nodeKey(n string) string       { return s.k("nodes", n) }
func (s *Store) vtepKey(a string) string       { return s.k("vtep", a) }
func (s *Store) statusKey(n string) string     { return s.k("status", n) }

func notExist(key string) clientv3.Cmp { return clientv3.Compare(clientv3.CreateRevision(key), "=", 0) }
func modRev(key string, r int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(key), "=", r)
}

func marshal(m proto.Message) string {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("store: marshal %T: %v", m, err)) // cannot happen for valid messages
	}
	return string(b)
}

func unmarshal[T any, P interface {
	*T
	proto.Message
}](b []byte) (P, error) {
	m := P(new(T))
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("store: decode %T: %w", m, err)
	}
	return m, nil
}

// ---- networks ----

// CreateNetwork stores a new network. The name and the VNI must be unused.
func (s *Store) CreateNetwork(ctx context.Context, in *skiffv1.Network) (*skiffv1.Network, error) {
	n := proto.Clone(in).(*skiffv1.Network)
	n.Revision = 0
	if err := validateNetwork(n); err != nil {
		return nil, err
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

func list[T any, P interface {
	*T
	proto.Message
}](ctx context.Context, s *Store, prefix string, rev int64, setRev func(P, int64)) ([]P, error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := s.cli.Get(ctx, prefix, opts...)
	if err != nil {
		return nil, fmt.Errorf("store: list %s: %w", strings.TrimPrefix(prefix, s.prefix), err)
	}
	out := make([]P, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		m, err := unmarshal[T, P](kv.Value)
		if err != nil {
			return nil, fmt.Errorf("key %s: %w", kv.Key, err)
		}
		setRev(m, kv.ModRevision)
		out = append(out, m)
	}
	return out, nil
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
// overlap another subnet of the same network.
func (s *Store) CreateSubnet(ctx context.Context, in *skiffv1.Subnet) (*skiffv1.Subnet, error) {
	sub := proto.Clone(in).(*skiffv1.Subnet)
	sub.Revision = 0
	pool, err := validateSubnet(sub)
	if err != nil {
		return nil, err
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		_, nrev, err := s.getNetwork(ctx, sub.Network)
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
		nameKey := s.subnetName(sub.Name)
		resp, err := s.cli.Txn(ctx).
			If(modRev(s.netKey(sub.Network), nrev), notExist(s.netLock(sub.Network)),
				modRev(s.subnetGuard(sub.Network), snap.guardRev), notExist(nameKey)).
			Then(clientv3.OpPut(s.subnetKey(sub.Network, sub.Name), marshal(sub)),
				clientv3.OpPut(nameKey, sub.Network), clientv3.OpPut(s.subnetGuard(sub.Network), "")).
			Else(clientv3.OpGet(nameKey)).Commit()
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

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "...")
	}
	return s
}

type poolSubnet struct {
	sub  *skiffv1.Subnet
	pool ipam.Pool
}

// networkState is what allocation needs to know about one network, read at
// one revision.
type networkState struct {
	subnets  []poolSubnet // unlocked subnets, sorted by name
	guardRev int64
	locked   bool
	taken    map[netip.Addr]string // owner, where known
	macs     map[string]bool
}

// readNetworkState reads what allocation needs to know about a network at
// one revision. With allocs, it also reads every allocated address (a scan
// proportional to the network's size); without, taken is empty.
func (s *Store) readNetworkState(ctx context.Context, net string, allocs bool) (*networkState, error) {
	allocOp := clientv3.OpGet(s.k("ipalloc", net)+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if !allocs {
		allocOp = clientv3.OpGet(s.k("ipalloc", net)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	}
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(s.k("snet", net)+"/", clientv3.WithPrefix()),
		clientv3.OpGet(s.subnetGuard(net)),
		clientv3.OpGet(s.k("sublock", net)+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(s.netLock(net)),
		allocOp,
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("store: read network %q: %w", net, err)
	}
	r := func(i int) *clientv3.GetResponse {
		return (*clientv3.GetResponse)(resp.Responses[i].GetResponseRange())
	}
	st := &networkState{taken: map[netip.Addr]string{}}
	locks := map[string]bool{}
	for _, kv := range r(2).Kvs {
		locks[lastSeg(kv.Key)] = true
	}
	for _, kv := range r(0).Kvs {
		sub, err := unmarshal[skiffv1.Subnet](kv.Value)
		if err != nil {
			return nil, err
		}
		if locks[sub.Name] {
			continue
		}
		pool, err := ipam.NewPool(subnetSpec(sub))
		if err != nil {
			return nil, fmt.Errorf("store: stored subnet %q is invalid: %w", sub.Name, err)
		}
		st.subnets = append(st.subnets, poolSubnet{sub, pool})
	}
	if kvs := r(1).Kvs; len(kvs) > 0 {
		st.guardRev = kvs[0].ModRevision
	}
	st.locked = len(r(3).Kvs) > 0
	for _, kv := range r(4).Kvs {
		if a, err := netip.ParseAddr(lastSeg(kv.Key)); err == nil {
			st.taken[a] = ""
		}
	}
	return st, nil
}

// ---- endpoints ----

// CreateEndpoint stores a new endpoint, allocating its addresses and MAC in
// the same transaction. Requested addresses (ips) must be free and
// allocatable; otherwise one address per IP family present on the network
// is allocated from the first subnet of that family with room. The node
// need not be registered.
func (s *Store) CreateEndpoint(ctx context.Context, in *skiffv1.Endpoint) (*skiffv1.Endpoint, error) {
	e := proto.Clone(in).(*skiffv1.Endpoint)
	if err := validateEndpoint(e); err != nil {
		return nil, err
	}
	if cur, err := s.cli.Get(ctx, s.epKey(e.Name), clientv3.WithCountOnly()); err != nil {
		return nil, fmt.Errorf("store: create endpoint %q: %w", e.Name, err)
	} else if cur.Count > 0 {
		return nil, errorf(AlreadyExists, "name", "endpoint %q already exists", e.Name)
	}
	requested := slices.Clone(e.Ips)
	seed := fnv.New64a()
	seed.Write([]byte(e.Name))
	for attempt := 0; attempt < maxAttempts; attempt++ {
		_, nrev, err := s.getNetwork(ctx, e.Network)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				return nil, errorf(NotFound, "network", "network %q does not exist", e.Network)
			}
			return nil, err
		}
		// The first attempts probe a few candidate addresses (cheap at any
		// size); later ones scan every allocation of the network.
		scan := attempt >= 2
		st, err := s.readNetworkState(ctx, e.Network, scan)
		if err != nil {
			return nil, err
		}
		if st.locked {
			return nil, errorf(FailedPrecondition, "network", "network %q is being deleted", e.Network)
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
				continue
			}
			return nil, err
		}
		mac := e.Mac
		if len(in.GetMac()) == 0 {
			mac = ipam.MAC(e.Network, e.Name, attempt)
		}
		out := proto.Clone(e).(*skiffv1.Endpoint)
		out.Mac = mac
		out.Ips = nil
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
		puts = append(puts, clientv3.OpPut(s.epKey(e.Name), marshal(out)),
			clientv3.OpPut(s.epNetKey(e.Network, e.Name), ""), clientv3.OpPut(s.macKey(e.Network, mac), e.Name))
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
		s.log.Debug("endpoint allocation raced, retrying", "endpoint", e.Name, "attempt", attempt)
	}
	return nil, errorf(Aborted, "", "endpoint %q: too many concurrent allocations on network %q; retry", e.Name, e.Network)
}

// probes is how many candidate addresses per family one probe reads.
const probes = 8

var errProbesTaken = errors.New("store: every probed address is taken")

// probe marks in st.taken which of the requested addresses, or of the
// candidate addresses allocate will consider for seed, are allocated, with
// one etcd read.
func (s *Store) probe(ctx context.Context, st *networkState, network string, requested []string, seed uint64) error {
	var cands []netip.Addr
	if len(requested) > 0 {
		for _, r := range requested {
			if a, err := parseEndpointIP(r); err == nil {
				cands = append(cands, a)
			}
		}
	} else {
		for _, ps := range st.subnets {
			cands = append(cands, candidates(ps.pool, seed)...)
		}
	}
	var ops []clientv3.Op
	for _, a := range cands {
		ops = append(ops, clientv3.OpGet(s.ipKey(network, a)))
	}
	if len(ops) == 0 {
		return nil
	}
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("store: probe addresses of %q: %w", network, err)
	}
	for i, r := range resp.Responses {
		if kvs := r.GetResponseRange().Kvs; len(kvs) > 0 {
			st.taken[cands[i]] = string(kvs[0].Value)
		}
	}
	return nil
}

// candidates returns the addresses of pool that a probe with seed tries.
func candidates(pool ipam.Pool, seed uint64) []netip.Addr {
	var out []netip.Addr
	for k := range uint64(probes) {
		if a, ok := pool.Next(pool.Offset(seed+k*104729), func(netip.Addr) bool { return false }); ok && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// allocate picks the endpoint's addresses from st. With probed, only the
// probed candidates are considered, and errProbesTaken says they were all
// taken.
func allocate(st *networkState, network string, requested []string, seed uint64, probed bool) ([]netip.Prefix, error) {
	var out []netip.Prefix
	if len(requested) > 0 {
		for i, r := range requested {
			field := fmt.Sprintf("ips[%d]", i)
			a, err := parseEndpointIP(r)
			if err != nil {
				return nil, invalid(field, "%q is not an IP address", r)
			}
			var pool *ipam.Pool
			for j := range st.subnets {
				if st.subnets[j].pool.Prefix.Contains(a) {
					pool = &st.subnets[j].pool
				}
			}
			if pool == nil {
				return nil, invalid(field, "%s is not inside any subnet of network %q", a, network)
			}
			if ok, why := pool.Allocatable(a); !ok {
				return nil, invalid(field, "%s", why)
			}
			if owner, ok := st.taken[a]; ok {
				return nil, errorf(AlreadyExists, field, "%s is already used by endpoint %q", a, owner)
			}
			for _, p := range out {
				if p.Addr() == a {
					return nil, invalid(field, "%s is given twice", a)
				}
			}
			out = append(out, netip.PrefixFrom(a, pool.Prefix.Bits()))
		}
		return out, nil
	}
	for _, v4 := range []bool{true, false} {
		var names []string
		found := false
		for _, ps := range st.subnets {
			if ps.pool.Prefix.Addr().Is4() != v4 {
				continue
			}
			names = append(names, ps.sub.Name)
			var a netip.Addr
			ok := false
			if probed {
				for _, c := range candidates(ps.pool, seed) {
					if _, t := st.taken[c]; !t {
						a, ok = c, true
						break
					}
				}
			} else {
				a, ok = ps.pool.Next(ps.pool.Offset(seed), func(a netip.Addr) bool { _, t := st.taken[a]; return t })
			}
			if ok {
				out = append(out, netip.PrefixFrom(a, ps.pool.Prefix.Bits()))
				found = true
				break
			}
		}
		if len(names) > 0 && !found {
			if probed {
				return nil, errProbesTaken
			}
			return nil, errorf(Exhausted, "ips", "no free address left in subnet(s) %s of network %q", strings.Join(names, ", "), network)
		}
	}
	return out, nil
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
		ops := []clientv3.Op{
			clientv3.OpDelete(s.epKey(name)), clientv3.OpDelete(s.epNetKey(e.Network, name)),
			clientv3.OpDelete(s.macKey(e.Network, e.Mac)),
		}
		for _, ip := range e.Ips {
			if a, err := parseEndpointIP(ip); err == nil {
				ops = append(ops, clientv3.OpDelete(s.ipKey(e.Network, a)))
			}
		}
		resp, err := s.cli.Txn(ctx).If(modRev(s.epKey(name), e.Revision)).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("store: delete endpoint %q: %w", name, err)
		}
		if resp.Succeeded {
			return nil
		}
	}
	return errorf(Aborted, "", "endpoint %q kept changing during delete; retry", name)
}

// ---- nodes ----

// RegisterNode creates or updates a node. It writes nothing when the stored
// node already says the same (so agent restarts cause no churn). The
// underlay address must not be another node's.
func (s *Store) RegisterNode(ctx context.Context, in *skiffv1.Node) (*skiffv1.Node, error) {
	n := proto.Clone(in).(*skiffv1.Node)
	n.Revision, n.Connected, n.LastSeen = 0, false, nil
	if err := validateNode(n); err != nil {
		return nil, err
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.nodeKey(n.Name)), clientv3.OpGet(s.vtepKey(n.UnderlayIp))).Commit()
		if err != nil {
			return nil, fmt.Errorf("store: register node %q: %w", n.Name, err)
		}
		cur := resp.Responses[0].GetResponseRange().Kvs
		vt := resp.Responses[1].GetResponseRange().Kvs
		var curRev, vtRev int64
		var old *skiffv1.Node
		if len(cur) > 0 {
			curRev = cur[0].ModRevision
			if old, err = unmarshal[skiffv1.Node](cur[0].Value); err != nil {
				return nil, err
			}
			if proto.Equal(old, n) {
				n.Revision = curRev
				return n, nil
			}
		}
		if len(vt) > 0 {
			vtRev = vt[0].ModRevision
			if owner := string(vt[0].Value); owner != n.Name {
				return nil, errorf(AlreadyExists, "underlayIp", "%s is already the VTEP of node %q", n.UnderlayIp, owner)
			}
		}
		ops := []clientv3.Op{clientv3.OpPut(s.nodeKey(n.Name), marshal(n)), clientv3.OpPut(s.vtepKey(n.UnderlayIp), n.Name)}
		if old != nil && old.UnderlayIp != n.UnderlayIp {
			ops = append(ops, clientv3.OpDelete(s.vtepKey(old.UnderlayIp)))
		}
		put, err := s.cli.Txn(ctx).If(modRev(s.nodeKey(n.Name), curRev), modRev(s.vtepKey(n.UnderlayIp), vtRev)).Then(ops...).Commit()
		if err != nil {
			return nil, fmt.Errorf("store: register node %q: %w", n.Name, err)
		}
		if put.Succeeded {
			n.Revision = put.Header.Revision
			return n, nil
		}
	}
	return nil, errorf(Aborted, "", "node %q kept changing during registration; retry", n.Name)
}

// GetNode returns the named node with its connection status.
func (s *Store) GetNode(ctx context.Context, name string) (*skiffv1.Node, error) {
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.nodeKey(name)), clientv3.OpGet(s.statusKey(name))).Commit()
	if err != nil {
		return nil, fmt.Errorf("store: get node %q: %w", name, err)
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return nil, errorf(NotFound, "", "node %q does not exist", name)
	}
	n, err := unmarshal[skiffv1.Node](kvs[0].Value)
	if err != nil {
		return nil, err
	}
	n.Revision = kvs[0].ModRevision
	if st := resp.Responses[1].GetResponseRange().Kvs; len(st) > 0 {
		setStatus(n, st[0].Value)
	}
	return n, nil
}

func setStatus(n *skiffv1.Node, v []byte) {
	n.Connected = true
	if t, err := time.Parse(time.RFC3339Nano, string(v)); err == nil {
		n.LastSeen = timestamppb.New(t)
	}
}

// ListNodes returns all nodes sorted by name, with their status.
func (s *Store) ListNodes(ctx context.Context) ([]*skiffv1.Node, error) {
	nodes, err := list[skiffv1.Node](ctx, s, s.k("nodes")+"/", 0, func(x *skiffv1.Node, r int64) { x.Revision = r })
	if err != nil {
		return nil, err
	}
	st, err := s.cli.Get(ctx, s.k("status")+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("store: list node status: %w", err)
	}
	status := map[string][]byte{}
	for _, kv := range st.Kvs {
		status[lastSeg(kv.Key)] = kv.Value
	}
	for _, n := range nodes {
		if v, ok := status[n.Name]; ok {
			setStatus(n, v)
		}
	}
	return nodes, nil
}

// DeleteNode removes a node's registration. Its endpoints stay and return
// to plans when the node registers again.
func (s *Store) DeleteNode(ctx context.Context, name string) error {
	n, err := s.GetNode(ctx, name)
	if err != nil {
		return err
	}
	resp, err := s.cli.Txn(ctx).If(modRev(s.nodeKey(name), n.Revision)).
		Then(clientv3.OpDelete(s.nodeKey(name)), clientv3.OpDelete(s.vtepKey(n.UnderlayIp)), clientv3.OpDelete(s.statusKey(name))).Commit()
	if err != nil {
		return fmt.Errorf("store: delete node %q: %w", name, err)
	}
	if !resp.Succeeded {
		return errorf(Aborted, "", "node %q changed during delete; retry", name)
	}
	return nil
}

// MarkConnected records that node's agent holds a session, until ctx ends
// (or the controller dies: the record is leased with ttl). It returns when
// ctx ends.
func (s *Store) MarkConnected(ctx context.Context, node string, ttl time.Duration) error {
	lease, err := s.cli.Grant(ctx, int64(max(ttl/time.Second, 2)))
	if err != nil {
		return fmt.Errorf("store: node %q status lease: %w", node, err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_, _ = s.cli.Revoke(rctx, lease.ID)
	}()
	if _, err := s.cli.Put(ctx, s.statusKey(node), time.Now().UTC().Format(time.RFC3339Nano), clientv3.WithLease(lease.ID)); err != nil {
		return fmt.Errorf("store: node %q status: %w", node, err)
	}
	ka, err := s.cli.KeepAlive(ctx, lease.ID)
	if err != nil {
		return fmt.Errorf("store: node %q status keepalive: %w", node, err)
	}
	for range ka {
	}
	return ctx.Err()
}

// lastSeg returns the part of key after its last slash.
func lastSeg(key []byte) string {
	k := string(key)
	return k[strings.LastIndexByte(k, '/')+1:]
}
