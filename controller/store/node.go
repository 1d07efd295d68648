package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// ---- nodes ----

// RegisterNode creates or updates a node. It writes nothing when the stored
// node already says the same (so agent restarts cause no churn). The
// underlay and host addresses must not be another node's.
func (s *Store) RegisterNode(ctx context.Context, in *skiffv1.Node) (*skiffv1.Node, error) {
	n := proto.Clone(in).(*skiffv1.Node)
	n.Revision, n.Connected, n.LastSeen = 0, false, nil
	if err := validateNode(n); err != nil {
		return nil, err
	}
	addrs := nodeAddrs(n)
	for attempt := 0; attempt < maxAttempts; attempt++ {
		gets := []clientv3.Op{clientv3.OpGet(s.nodeKey(n.Name))}
		for _, a := range addrs {
			gets = append(gets, clientv3.OpGet(s.vtepKey(a)))
		}
		resp, err := s.cli.Txn(ctx).Then(gets...).Commit()
		if err != nil {
			return nil, fmt.Errorf("store: register node %q: %w", n.Name, err)
		}
		cur := resp.Responses[0].GetResponseRange().Kvs
		var curRev int64
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
		// Each address the node claims (its VTEP, its host address) is
		// no other node's.
		cmps := []clientv3.Cmp{modRev(s.nodeKey(n.Name), curRev)}
		ops := []clientv3.Op{clientv3.OpPut(s.nodeKey(n.Name), marshal(n))}
		for i, a := range addrs {
			var rev int64
			if kvs := resp.Responses[i+1].GetResponseRange().Kvs; len(kvs) > 0 {
				rev = kvs[0].ModRevision
				if owner := string(kvs[0].Value); owner != n.Name {
					field := "underlayIp"
					if i > 0 {
						field = "hostIp"
					}
					return nil, errorf(AlreadyExists, field, "%s is already an address of node %q", a, owner)
				}
			}
			cmps = append(cmps, modRev(s.vtepKey(a), rev))
			ops = append(ops, clientv3.OpPut(s.vtepKey(a), n.Name))
		}
		if old != nil {
			for _, a := range nodeAddrs(old) {
				if !slices.Contains(addrs, a) {
					ops = append(ops, clientv3.OpDelete(s.vtepKey(a)))
				}
			}
		}
		pair, err := s.checkPairing(ctx, n, old)
		if err != nil {
			return nil, err
		}
		ops = append(ops, pair.ops...)
		cmps = append(cmps, pair.cmps...)
		put, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
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

// nodeAddrs are the addresses a node claims: its underlay address, then
// its host address if it has one.
func nodeAddrs(n *skiffv1.Node) []string {
	if n.GetHostIp() == "" {
		return []string{n.GetUnderlayIp()}
	}
	return []string{n.GetUnderlayIp(), n.GetHostIp()}
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

// ConnectedAt returns the nodes whose agent held a session at store
// revision rev.
func (s *Store) ConnectedAt(ctx context.Context, rev int64) (map[string]bool, error) {
	resp, err := s.cli.Get(ctx, s.k("status")+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithRev(rev))
	if err != nil {
		return nil, fmt.Errorf("store: node status at %d: %w", rev, err)
	}
	out := map[string]bool{}
	for _, kv := range resp.Kvs {
		out[lastSeg(kv.Key)] = true
	}
	return out, nil
}

// DeleteNode removes a node's registration. Its endpoints stay and return
// to plans when the node registers again.
func (s *Store) DeleteNode(ctx context.Context, name string) error {
	n, err := s.GetNode(ctx, name)
	if err != nil {
		return err
	}
	ops := []clientv3.Op{clientv3.OpDelete(s.nodeKey(name)), clientv3.OpDelete(s.statusKey(name)), clientv3.OpDelete(s.awayKey(name))}
	for _, a := range nodeAddrs(n) {
		ops = append(ops, clientv3.OpDelete(s.vtepKey(a)))
	}
	resp, err := s.cli.Txn(ctx).If(modRev(s.nodeKey(name), n.Revision)).Then(append(ops, s.unpairOps(n)...)...).Commit()
	if err != nil {
		return fmt.Errorf("store: delete node %q: %w", name, err)
	}
	if !resp.Succeeded {
		return errorf(Aborted, "", "node %q changed during delete; retry", name)
	}
	return nil
}
