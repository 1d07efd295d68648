package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Changes reads the object changes that etcd's history still holds, up to
// and including revision to, and calls fn with each revision's changes,
// oldest first. A change of an existing object comes as the deletion of its
// previous version followed by the new version, so that both are seen. It
// returns the floor: every change after it was given (0: the whole history;
// otherwise the revision before the oldest that compaction kept). It is safe
// for concurrent use and changes nothing.
func (s *Store) Changes(ctx context.Context, to int64, fn func(rev int64, events []Event) error) (floor int64, err error) {
	if s.hist != nil {
		return s.changesDirect(ctx, to, fn)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := int64(1)
	for {
		floor, err = s.changesWindows(ctx, start, to, fn)
		var c compactedAt
		if !errors.As(err, &c) {
			return floor, err
		}
		if int64(c) <= start {
			return 0, fmt.Errorf("store: changes from %d: compacted at %d", start, int64(c))
		}
		start = int64(c)
	}
}

// compactedAt: the history starts at this revision.
type compactedAt int64

func (c compactedAt) Error() string { return fmt.Sprintf("compacted at %d", int64(c)) }

// historyWindow is how many revisions one watch of Changes reads. etcd
// sends a watch that starts in the past at most 1,000 revisions per sync
// round (every 100 ms), and each round reads the history from the watch's
// position to the head: one watch over H revisions takes H/1,000 rounds of
// O(H) reads (166,000 revisions: minutes). Watches over consecutive
// windows are served together in each round, so Changes opens one per
// window (at most maxHistoryWatches) and takes about window/1,000 rounds.
// A variable so that tests can make windows small.
var historyWindow int64 = 4000

const maxHistoryWatches = 256

// revChanges is one revision's changes.
type revChanges struct {
	rev    int64
	events []Event
}

// changesWindows reads start..to through one watch per window, all at
// once, then gives the changes to fn in revision order. A window that
// found its history compacted makes the whole read report the highest
// compaction revision seen.
func (s *Store) changesWindows(ctx context.Context, start, to int64, fn func(int64, []Event) error) (int64, error) {
	floor := start - 1
	if to < start {
		return floor, nil
	}
	span := to - start + 1
	w := max(historyWindow, (span+maxHistoryWatches-1)/maxHistoryWatches, 1)
	n := int((span + w - 1) / w)
	got := make([][]revChanges, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		from := start + int64(i)*w
		until := min(from+w-1, to)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.changesFrom(ctx, from, until, func(rev int64, evs []Event) error {
				got[i] = append(got[i], revChanges{rev, evs})
				return nil
			})
		}()
	}
	wg.Wait()
	var compacted compactedAt
	for _, err := range errs {
		var c compactedAt
		switch {
		case errors.As(err, &c):
			compacted = max(compacted, c)
		case err != nil:
			return floor, err
		}
	}
	if compacted != 0 {
		return floor, compacted
	}
	for _, win := range got {
		for _, c := range win {
			if err := fn(c.rev, c.events); err != nil {
				return floor, err
			}
		}
	}
	return floor, nil
}

func (s *Store) changesFrom(ctx context.Context, start, to int64, fn func(int64, []Event) error) (int64, error) {
	floor := start - 1
	if to < start {
		return floor, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := s.cli.Watch(ctx, s.prefix, clientv3.WithPrefix(), clientv3.WithRev(start), clientv3.WithPrevKV(), clientv3.WithProgressNotify())
	// Once the watch has caught up, a progress notification says that
	// nothing else up to its revision is coming.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var (
		batch []Event
		cur   int64
		err   error
	)
	for {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case resp, ok = <-wch:
		case <-tick.C:
			_ = s.cli.RequestProgress(ctx)
			continue
		}
		if !ok {
			if ctx.Err() != nil {
				return floor, ctx.Err()
			}
			return floor, errors.New("store: changes: watch closed")
		}
		if resp.CompactRevision != 0 {
			return floor, compactedAt(resp.CompactRevision)
		}
		if err := resp.Err(); err != nil {
			return floor, fmt.Errorf("store: changes: %w", err)
		}
		for _, ev := range resp.Events {
			rev := ev.Kv.ModRevision
			if rev > to {
				break
			}
			if cur != 0 && rev != cur && len(batch) > 0 {
				if err := fn(cur, batch); err != nil {
					return floor, err
				}
				batch = nil
			}
			cur = rev
			if batch, err = s.appendChange(batch, ev); err != nil {
				return floor, err
			}
		}
		if (resp.IsProgressNotify() && resp.Header.Revision >= to) || cur >= to ||
			(len(resp.Events) > 0 && resp.Events[len(resp.Events)-1].Kv.ModRevision > to) {
			if len(batch) > 0 {
				if err := fn(cur, batch); err != nil {
					return floor, err
				}
			}
			return floor, nil
		}
	}
}

// appendChange appends to batch the object changes of one etcd event: a
// change of an existing object as the deletion of its previous version
// followed by the new version.
func (s *Store) appendChange(batch []Event, ev *clientv3.Event) ([]Event, error) {
	if ev.Type == mvccpb.PUT && ev.PrevKv != nil {
		old, ok, err := s.decodeEvent(&clientv3.Event{Type: mvccpb.DELETE, Kv: ev.Kv, PrevKv: ev.PrevKv})
		if err != nil {
			return batch, err
		}
		if ok {
			batch = append(batch, old)
		}
	}
	e, ok, err := s.decodeEvent(ev)
	if err != nil {
		return batch, err
	}
	if ok {
		batch = append(batch, e)
	}
	return batch, nil
}

// HistoryReader reads etcd's history in one pass, in revision order
// (etcdserver.Server: the embedded etcd's backend).
type HistoryReader interface {
	// History calls fn with every change of a key under prefix in
	// revisions from..to, oldest first, each with the key's previous
	// version when it existed, and returns the first revision it read
	// (from, or the compaction revision when later). Safe for concurrent
	// use; changes nothing.
	History(ctx context.Context, prefix string, from, to int64, fn func(*clientv3.Event) error) (first int64, err error)
}

// WithHistoryReader returns a store whose Changes reads the history
// through h, in time linear in the history, instead of through watches.
func (s *Store) WithHistoryReader(h HistoryReader) *Store {
	c := *s
	c.hist = h
	return &c
}

// changesDirect is Changes through the history reader.
func (s *Store) changesDirect(ctx context.Context, to int64, fn func(int64, []Event) error) (int64, error) {
	var (
		batch []Event
		cur   int64
	)
	first, err := s.hist.History(ctx, s.prefix, 1, to, func(ev *clientv3.Event) error {
		rev := ev.Kv.ModRevision
		if rev != cur && len(batch) > 0 {
			if err := fn(cur, batch); err != nil {
				return err
			}
			batch = nil
		}
		cur = rev
		var err error
		batch, err = s.appendChange(batch, ev)
		return err
	})
	floor := max(first-1, 0)
	if err != nil {
		return floor, fmt.Errorf("store: changes: %w", err)
	}
	if len(batch) > 0 {
		if err := fn(cur, batch); err != nil {
			return floor, err
		}
	}
	return floor, nil
}
