package scale

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// FleetConfig shapes a fleet of simulated agents.
type FleetConfig struct {
	// Target is the agents' --controller value (one address, a list or a
	// dns: name): they dial it with the real agent's dialer.
	Target string
	// Nodes are the node names and underlay addresses, one agent each.
	Nodes []NodeSpec
	// Creds returns a node's credentials (its own certificate under mTLS).
	Creds func(node string) (credentials.TransportCredentials, error)
	// Counters is the counter report interval (default 10 s, the real
	// agent's default).
	Counters time.Duration
	// MaxMessage is the largest plan update accepted (default 64 MiB).
	MaxMessage int
	// Logf, when set, receives what the agents have to say.
	Logf func(format string, args ...any)
}

// NodeSpec names one node.
type NodeSpec struct{ Name, UnderlayIP string }

// Fleet is many simulated agents in this process.
type Fleet struct {
	cfg     FleetConfig
	Agents  []*Agent
	byNode  map[string]*Agent
	watches watches
	fails   failures
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// NewFleet prepares one agent per node (certificates and connections; no
// call is made yet).
func NewFleet(cfg FleetConfig) (*Fleet, error) {
	if cfg.Counters == 0 {
		cfg.Counters = 10 * time.Second
	}
	if cfg.MaxMessage == 0 {
		cfg.MaxMessage = 64 << 20
	}
	f := &Fleet{cfg: cfg, byNode: map[string]*Agent{}, watches: watches{m: map[string]*Watch{}}}
	f.Agents = make([]*Agent, len(cfg.Nodes))
	err := parallel(len(cfg.Nodes), 8, func(i int) error {
		n := cfg.Nodes[i]
		creds, err := cfg.Creds(n.Name)
		if err != nil {
			return err
		}
		f.Agents[i], err = newAgent(f, n.Name, n.UnderlayIP, creds)
		return err
	})
	if err != nil {
		f.Close()
		return nil, err
	}
	for _, a := range f.Agents {
		f.byNode[a.Node] = a
	}
	return f, nil
}

func (f *Fleet) logf(format string, args ...any) {
	if f.cfg.Logf != nil {
		f.cfg.Logf(format, args...)
	}
}

// Agent returns the agent of node.
func (f *Fleet) Agent(node string) *Agent { return f.byNode[node] }

// RegisterAll registers every node (setup), width calls at a time.
func (f *Fleet) RegisterAll(ctx context.Context, width int) error {
	return parallel(len(f.Agents), width, func(i int) error {
		if err := f.Agents[i].register(ctx); err != nil {
			return fmt.Errorf("register %s: %w", f.Agents[i].Node, err)
		}
		return nil
	})
}

// Start starts every agent's session and counter reports.
func (f *Fleet) Start(ctx context.Context) {
	ctx, f.cancel = context.WithCancel(ctx)
	for _, a := range f.Agents {
		f.wg.Add(2)
		go func() { defer f.wg.Done(); a.run(ctx) }()
		go func() { defer f.wg.Done(); a.reportCounters(ctx, f.cfg.Counters) }()
	}
}

// Stop ends every session (the agents keep their plans).
func (f *Fleet) Stop() {
	if f.cancel != nil {
		f.cancel()
		f.wg.Wait()
		f.cancel = nil
	}
}

// Close stops the fleet and closes its connections.
func (f *Fleet) Close() {
	f.Stop()
	for _, a := range f.Agents {
		if a != nil {
			a.conn.Close()
		}
	}
}

// Stats sums what the agents received.
func (f *Fleet) Stats() AgentStats {
	var s AgentStats
	for _, a := range f.Agents {
		_, st, _ := a.state()
		s.add(st)
	}
	return s
}

// WaitSessions waits until every agent has received the first update of a
// session opened after since, and returns when the last one did.
func (f *Fleet) WaitSessions(ctx context.Context, since time.Time) (time.Time, error) {
	for {
		var last time.Time
		waiting, example := 0, ""
		for _, a := range f.Agents {
			s, _, _ := a.state()
			if s.first.IsZero() || s.opened.Before(since) {
				waiting++
				example = a.Node
				continue
			}
			if s.first.After(last) {
				last = s.first
			}
		}
		if waiting == 0 {
			return last, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d agents have no new session yet (%s among them): %w", waiting, example, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// LastApplied returns the last time any agent's plan changed.
func (f *Fleet) LastApplied() time.Time {
	var last time.Time
	for _, a := range f.Agents {
		a.mu.Lock()
		if a.applied.After(last) {
			last = a.applied
		}
		a.mu.Unlock()
	}
	return last
}

// Resumed counts how the sessions opened after since began: by first
// update kind ("snapshot", "delta", "in-sync").
func (f *Fleet) Resumed(since time.Time) map[string]int {
	out := map[string]int{}
	for _, a := range f.Agents {
		s, _, _ := a.state()
		if !s.opened.Before(since) && s.resumed != "" {
			out[s.resumed]++
		}
	}
	return out
}

// Verify compares every agent's plan with the controller's plan for its
// node (GetPlan) and returns how many differ, with a few examples.
func (f *Fleet) Verify(ctx context.Context, mgmt skiffv1.ManagementServiceClient, width int) (int, []string, error) {
	var mu sync.Mutex
	bad := 0
	var examples []string
	err := parallel(len(f.Agents), width, func(i int) error {
		a := f.Agents[i]
		p, err := mgmt.GetPlan(ctx, &skiffv1.GetPlanRequest{Node: a.Node})
		if err != nil {
			return fmt.Errorf("get plan %s: %w", a.Node, err)
		}
		want, err := fromPlan(p)
		if err != nil {
			return fmt.Errorf("plan of %s: %w", a.Node, err)
		}
		a.mu.Lock()
		d := a.plan.diff(want)
		if !a.has {
			d = "no plan"
		}
		a.mu.Unlock()
		if d != "" {
			mu.Lock()
			bad++
			if len(examples) < 5 {
				examples = append(examples, a.Node+": "+d)
			}
			mu.Unlock()
		}
		return nil
	})
	sort.Strings(examples)
	return bad, examples, err
}

// PlanItems returns the number of items every agent holds.
func (f *Fleet) PlanItems() int {
	n := 0
	for _, a := range f.Agents {
		a.mu.Lock()
		n += a.plan.size()
		a.mu.Unlock()
	}
	return n
}

// parallel runs fn(0..n-1), width at a time, and returns the first error.
func parallel(n, width int, fn func(i int) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ferr error
		next int
	)
	for range min(width, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if ferr != nil || next >= n {
					mu.Unlock()
					return
				}
				i := next
				next++
				mu.Unlock()
				if err := fn(i); err != nil {
					mu.Lock()
					if ferr == nil {
						ferr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return ferr
}
