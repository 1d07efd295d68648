package planner

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// Update is one message of a plan stream: exactly one field is set.
type Update struct {
	Snapshot *plan.Plan
	Delta    *plan.Delta
}

// Subscription is one node's plan stream. Changes made while the consumer
// is not reading are merged into one pending delta (folded every
// foldDeltas changes, and on Next), so a slow consumer costs memory bounded
// by its plan, never a queue. With Options.Interval, a consumer that reads
// as fast as it can (a gRPC stream's Send returns before the message is
// written) is still sent one delta per interval at most: the changes made
// meanwhile go out together. Next and Close may be called from different
// goroutines.
type Subscription struct {
	p    *Planner
	node string

	mu      sync.Mutex
	ready   bool // first is decided
	first   *Update
	pending []plan.Delta // contiguous, not yet merged
	err     error
	wake    chan struct{} // capacity 1
	closed  bool
	last    time.Time // when Next last returned an update
}

// foldDeltas bounds the unmerged deltas a subscription holds: past it they
// are merged into one, so that merging costs O(items) per fold rather than
// per change.
const foldDeltas = 32

// ErrClosed is returned by Next after Close.
var ErrClosed = errors.New("planner: subscription closed")

// Subscribe opens node's plan stream. have is the revision of the plan the
// consumer holds (0: none). The first update is:
//   - a snapshot when have is 0 or no delta from have can be computed;
//   - an empty delta have->have when have is the current plan revision;
//   - an empty delta have->current when the planner loaded after have and
//     nothing the plan depends on changed from have to the load (SetRecent)
//     nor since;
//   - otherwise one delta from have to the current plan, merged from the
//     delta log (from have, or from the load under the same condition) or
//     computed against Options.History.
//
// When have is ahead of the planner (another replica served the consumer),
// Subscribe first waits, bounded by ctx, until the planner catches up.
func (p *Planner) Subscribe(ctx context.Context, node string, have int64) (*Subscription, error) {
	for {
		p.mu.Lock()
		if have <= p.rev {
			break
		}
		wake := p.revWake
		p.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	// p.mu is held.
	s := &Subscription{p: p, node: node, wake: make(chan struct{}, 1)}
	cur := p.planOf(node)
	p.subs[node] = append(p.subs[node], s)
	base := p.view(node, cur)
	// from: have, or the load revision when the plan did not change
	// between the two (resume.go); the delta still starts at have.
	from := p.resumeFrom(node, have)
	switch {
	case have == 0:
		s.first = &Update{Snapshot: &base}
	case from == cur.Revision:
		s.first = &Update{Delta: &plan.Delta{Node: node, From: have, Revision: cur.Revision}}
	default:
		if d, ok := p.fromLog(node, from); ok {
			d.From = have
			s.first = &Update{Delta: &d}
		}
	}
	s.ready = s.first != nil
	p.mu.Unlock()
	if s.ready {
		return s, nil
	}
	first := &Update{Snapshot: &base}
	if p.opts.History != nil {
		old, err := p.opts.History(ctx, node, have)
		if err == nil {
			old.Node, old.Revision = node, have
			d := plan.Diff(old, base)
			first = &Update{Delta: &d}
		} else {
			p.log.Info("planner: resume needs a snapshot", "node", node, "have", have, "reason", err)
		}
	}
	s.mu.Lock()
	s.first, s.ready = first, true
	s.mu.Unlock()
	return s, nil
}

// push merges d into the pending delta and wakes the consumer. Caller holds
// p.mu.
func (s *Subscription) push(d plan.Delta) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.err != nil {
		return
	}
	wake := len(s.pending) == 0
	s.pending = append(s.pending, d)
	if len(s.pending) >= foldDeltas {
		s.fold()
	}
	if !wake {
		// The consumer was woken for the changes pending before and
		// takes this one with them.
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// fold merges the pending deltas into one. Caller holds s.mu.
func (s *Subscription) fold() {
	if len(s.pending) < 2 {
		return
	}
	m, err := plan.MergeAll(s.pending...)
	if err != nil {
		// Cannot happen: deltas of one node are contiguous. Make the
		// consumer reconnect rather than send a wrong plan.
		s.err = err
	}
	s.pending = append(s.pending[:0], m)
	clear(s.pending[1:cap(s.pending)]) // drop the merged deltas' items
}

// Next returns the next update, waiting for one until ctx ends. A delta
// comes no sooner than Options.Interval after the update Next returned
// before; every change made until then is in it.
func (s *Subscription) Next(ctx context.Context) (Update, error) {
	var (
		wait  <-chan time.Time // the interval's end, once pacing
		ended bool             // the interval ended
	)
	for {
		s.mu.Lock()
		switch {
		case s.closed:
			s.mu.Unlock()
			return Update{}, ErrClosed
		case !s.ready:
			// Subscribe has not returned yet; nothing to hand out.
		case s.first != nil:
			u := *s.first
			s.first = nil
			s.last = time.Now()
			s.mu.Unlock()
			return u, nil
		case s.err != nil:
			err := s.err
			s.mu.Unlock()
			return Update{}, err
		case len(s.pending) > 0:
			if wait == nil && !ended {
				if left := s.p.opts.Interval - time.Since(s.last); left > 0 {
					wait = s.p.opts.after(left)
				} else {
					ended = true
				}
			}
			if !ended {
				break // the changes until the interval's end go with these
			}
			s.fold()
			if err := s.err; err != nil {
				s.mu.Unlock()
				return Update{}, err
			}
			d := s.pending[0]
			clear(s.pending)
			s.pending = s.pending[:0] // its room serves the next changes
			s.last = time.Now()
			s.mu.Unlock()
			return Update{Delta: &d}, nil
		}
		s.mu.Unlock()
		if wait != nil {
			// Pacing: the changes until the interval's end go out
			// together, so the changes meanwhile need not wake it.
			select {
			case <-wait:
				ended = true
			case <-ctx.Done():
				return Update{}, ctx.Err()
			}
			wait = nil
			continue
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
			return Update{}, ctx.Err()
		}
	}
}

// Pending returns the number of items waiting in the subscription.
func (s *Subscription) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, d := range s.pending {
		n += d.Size()
	}
	return n
}

// Close ends the subscription. Idempotent.
func (s *Subscription) Close() {
	s.p.mu.Lock()
	if subs := slices.DeleteFunc(s.p.subs[s.node], func(x *Subscription) bool { return x == s }); len(subs) > 0 {
		s.p.subs[s.node] = subs
	} else {
		delete(s.p.subs, s.node)
	}
	s.p.mu.Unlock()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}
