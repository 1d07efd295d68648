package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// statusLeases are the leases of a store's agent sessions' status keys: one
// per TTL for every session of this process, granted when the first
// session needs it and kept alive until it is lost (etcd unreachable past
// its TTL) or the etcd client closes. With one lease per session, 5,000
// agents cost 5,000 grants at a start, 5,000 keepalives, and 5,000
// revocations together when a controller is restarted
// (docs/perf-log/scale.md, run D).
type statusLeases struct {
	mu sync.Mutex
	m  map[int64]*statusLease // by TTL in seconds
}

type statusLease struct {
	id   clientv3.LeaseID
	lost chan struct{} // closed when the keepalive ends
}

// lease returns the live shared lease of ttl seconds, granting one if
// there is none or the last was lost. Concurrency-safe.
func (s *Store) lease(ctx context.Context, ttl int64) (*statusLease, error) {
	s.leases.mu.Lock()
	defer s.leases.mu.Unlock()
	if l := s.leases.m[ttl]; l != nil {
		select {
		case <-l.lost:
		default:
			return l, nil
		}
	}
	g, err := s.cli.Grant(ctx, ttl)
	if err != nil {
		return nil, fmt.Errorf("store: status lease: %w", err)
	}
	// The keepalive lives as long as the client, not as the session that
	// asked first.
	ka, err := s.cli.KeepAlive(s.cli.Ctx(), g.ID)
	if err != nil {
		return nil, fmt.Errorf("store: status lease keepalive: %w", err)
	}
	l := &statusLease{id: g.ID, lost: make(chan struct{})}
	go func() {
		for range ka {
		}
		close(l.lost)
	}()
	s.leases.m[ttl] = l
	return l, nil
}

// MarkConnected records that node's agent holds a session, until ctx ends
// (or the controller dies: the record is leased with ttl, on a lease that
// every session of this process shares). It returns when ctx ends, or
// with an error when the lease was lost (etcd unreachable for ttl): the
// status is gone until the agent's next session.
func (s *Store) MarkConnected(ctx context.Context, node string, ttl time.Duration) error {
	l, err := s.lease(ctx, int64(max(ttl/time.Second, 2)))
	if err != nil {
		return fmt.Errorf("store: node %q status: %w", node, err)
	}
	put, err := s.cli.Txn(ctx).Then(clientv3.OpPut(s.statusKey(node), time.Now().UTC().Format(time.RFC3339Nano), clientv3.WithLease(l.id)),
		clientv3.OpDelete(s.awayKey(node))).Commit()
	if err != nil {
		return fmt.Errorf("store: node %q status: %w", node, err)
	}
	// The status key as this session wrote it: a newer session of the
	// node (reconnected here or through another replica) writes it again.
	mine := put.Header.Revision
	defer func() {
		// The session ends: the time it did is kept (unleased) while
		// no session of the node holds the status key, so that a
		// controller started later can say how long the agent has been
		// away. A session that ends with the controller (the lease
		// expires) leaves no such time, nor does one that a newer
		// session replaced.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_, _ = s.cli.Txn(rctx).If(modRev(s.statusKey(node), mine)).
			Then(clientv3.OpPut(s.awayKey(node), time.Now().UTC().Format(time.RFC3339Nano)), clientv3.OpDelete(s.statusKey(node))).Commit()
	}()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-l.lost:
		return fmt.Errorf("store: node %q status: its lease was lost (etcd unreachable for its TTL)", node)
	}
}
