package scale

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Watch waits for one endpoint change (created, or deleted) to reach the
// plan of every node it concerns.
type Watch struct {
	Name   string
	Remove bool
	Start  time.Time

	mu   sync.Mutex
	want map[string]bool
	done chan struct{}
	at   time.Time
}

// watches are the fleet's open watches by endpoint name.
type watches struct {
	mu     sync.Mutex
	m      map[string]*Watch
	active atomic.Int32
}

// Expect opens a watch for endpoint name on nodes; call it before making
// the change. Start is set to now.
func (f *Fleet) Expect(name string, nodes []string, remove bool) *Watch {
	w := &Watch{Name: name, Remove: remove, Start: time.Now(), want: map[string]bool{}, done: make(chan struct{})}
	for _, n := range nodes {
		w.want[n] = true
	}
	f.watches.mu.Lock()
	f.watches.m[name] = w
	f.watches.active.Store(int32(len(f.watches.m)))
	f.watches.mu.Unlock()
	if len(nodes) == 0 {
		w.at = w.Start
		close(w.done)
	}
	return w
}

// Wait returns how long the change took to reach every node, from Start.
func (f *Fleet) Wait(ctx context.Context, w *Watch) (time.Duration, error) {
	defer func() {
		f.watches.mu.Lock()
		if f.watches.m[w.Name] == w {
			delete(f.watches.m, w.Name)
		}
		f.watches.active.Store(int32(len(f.watches.m)))
		f.watches.mu.Unlock()
	}()
	select {
	case <-w.done:
		return w.at.Sub(w.Start), nil
	case <-ctx.Done():
		w.mu.Lock()
		left := len(w.want)
		w.mu.Unlock()
		return 0, fmt.Errorf("endpoint %s: %d nodes never saw the change: %w", w.Name, left, ctx.Err())
	}
}

func (w *Watch) mark(node string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.want[node] {
		return
	}
	delete(w.want, node)
	if len(w.want) == 0 {
		w.at = at
		close(w.done)
	}
}

// saw is called by an agent with the endpoints a delta upserted and
// removed.
func (ws *watches) saw(node string, changed, removed []string, at time.Time) {
	if ws.active.Load() == 0 {
		return
	}
	ws.mu.Lock()
	var hit []*Watch
	for _, n := range changed {
		if w := ws.m[n]; w != nil && !w.Remove {
			hit = append(hit, w)
		}
	}
	for _, n := range removed {
		if w := ws.m[n]; w != nil && w.Remove {
			hit = append(hit, w)
		}
	}
	ws.mu.Unlock()
	for _, w := range hit {
		w.mark(node, at)
	}
}

// sawPlan is called by an agent that received a snapshot.
func (ws *watches) sawPlan(a *Agent, at time.Time) {
	if ws.active.Load() == 0 {
		return
	}
	ws.mu.Lock()
	open := make([]*Watch, 0, len(ws.m))
	for _, w := range ws.m {
		open = append(open, w)
	}
	ws.mu.Unlock()
	a.mu.Lock()
	var hit []*Watch
	for _, w := range open {
		held := a.plan.has(kindLocal, w.Name) || a.plan.has(kindRemote, w.Name)
		if held != w.Remove {
			hit = append(hit, w)
		}
	}
	a.mu.Unlock()
	for _, w := range hit {
		w.mark(a.Node, at)
	}
}
