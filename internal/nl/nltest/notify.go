package nltest

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/tc"
)

// Notifications: Watch's events, LinkChanges and the tc watchers of a
// namespace. Events are queued under the world's lock and delivered
// without it.

// sub is a Watch's queue of events.
type sub struct {
	mu   sync.Mutex
	q    []nl.Event
	wake chan struct{}
}

func (s *sub) push(e nl.Event) {
	s.mu.Lock()
	s.q = append(s.q, e)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *sub) take() []nl.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.q
	s.q = nil
	return q
}

// event tells n's watchers of e: every Watch, and every LinkChanges for
// a link event. The world's lock is held.
func (n *NS) event(e nl.Event) {
	for _, s := range n.subs {
		s.push(e)
	}
	if e.Kind == "link" {
		for _, c := range n.changes {
			c.changed.Store(true)
		}
	}
}

// Watch calls fn with the link, neighbour (FDB entries included, as the
// kernel notifies them) and address events of the namespace, in order,
// until ctx ends, and returns ctx's error. fn runs on Watch's goroutine.
func (k *kernel) Watch(ctx context.Context, fn func(nl.Event)) error {
	s := &sub{wake: make(chan struct{}, 1)}
	if err := k.do(func(n *NS) error {
		n.subs = append(n.subs, s)
		return nil
	}); err != nil {
		return err
	}
	defer func() {
		k.w.mu.Lock()
		k.ns.subs = slices.DeleteFunc(k.ns.subs, func(x *sub) bool { return x == s })
		k.w.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.wake:
			for _, e := range s.take() {
				fn(e)
			}
		}
	}
}

// changes is a LinkChanges subscription.
type changes struct {
	ns      *NS
	changed atomic.Bool
}

func (k *kernel) LinkChanges() (nl.Changes, error) {
	c := &changes{}
	err := k.do(func(n *NS) error {
		c.ns = n
		n.changes = append(n.changes, c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Any reports whether a link of the namespace was added, changed or
// deleted since the last call (or the subscription).
func (c *changes) Any() bool { return c.changed.Swap(false) }

// Close ends the subscription.
func (c *changes) Close() error {
	c.ns.w.mu.Lock()
	defer c.ns.w.mu.Unlock()
	c.ns.changes = slices.DeleteFunc(c.ns.changes, func(x *changes) bool { return x == c })
	return nil
}

// tcNote is a tc notification: of a filter (handle 0: a whole
// priority), a qdisc, or a chain, with the port id of the socket whose
// request caused it (0: the kernel's own).
type tcNote struct {
	port    uint32
	ifindex int
	qdisc   bool
	chain   bool // counted as read, never as a change
	change  tc.FilterChange
}

// notify hands a tc notification to every watcher of n.
func (n *NS) notify(x tcNote) {
	for _, w := range n.watchers {
		w.note(x)
	}
}
