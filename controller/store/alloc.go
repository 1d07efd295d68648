package store

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/skiff-sdn/skiff/controller/ipam"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

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
// proportional to the network's size: the fallback of a nearly full
// network); without, it reads no allocation at all (not even a count: etcd
// counts a prefix by walking it) and taken is empty.
func (s *Store) readNetworkState(ctx context.Context, net string, allocs bool) (*networkState, error) {
	resp, err := s.cli.Txn(ctx).Then(s.networkStateOps(net, allocs)...).Commit()
	if err != nil {
		return nil, fmt.Errorf("store: read network %q: %w", net, err)
	}
	return parseNetworkState(resp.Responses, allocs)
}

// networkStateOps are the reads of readNetworkState, for parseNetworkState;
// a caller may read them in one transaction with others.
func (s *Store) networkStateOps(net string, allocs bool) []clientv3.Op {
	ops := []clientv3.Op{
		clientv3.OpGet(s.k("snet", net)+"/", clientv3.WithPrefix()),
		clientv3.OpGet(s.subnetGuard(net)),
		clientv3.OpGet(s.k("sublock", net)+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(s.netLock(net)),
	}
	if allocs {
		ops = append(ops, clientv3.OpGet(s.k("ipalloc", net)+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly()))
	}
	return ops
}

// parseNetworkState reads the responses to networkStateOps.
func parseNetworkState(rs []*pb.ResponseOp, allocs bool) (*networkState, error) {
	r := func(i int) *clientv3.GetResponse {
		return (*clientv3.GetResponse)(rs[i].GetResponseRange())
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
	if allocs {
		for _, kv := range r(4).Kvs {
			if a, err := netip.ParseAddr(lastSeg(kv.Key)); err == nil {
				st.taken[a] = ""
			}
		}
	}
	return st, nil
}

// probes is how many candidate addresses per family one probe reads, and
// probeRounds how many probes may find them all taken before an allocation
// scans the network's allocations. With a subnet a fraction f full, a
// scan happens with probability about f^(probes x probeRounds): 0.002% at
// half full, 3% at 80% full.
const (
	probes      = 8
	probeRounds = 2
)

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
	// Serializable: the member's applied state, without waiting for the
	// writes in flight to commit. The probe only chooses candidates; the
	// creation's transaction compares them, and a stale answer costs a
	// retry, never a duplicate.
	var ops []clientv3.Op
	for _, a := range cands {
		ops = append(ops, clientv3.OpGet(s.ipKey(network, a), clientv3.WithSerializable()))
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
