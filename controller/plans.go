package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/skiff-sdn/skiff/controller/api"
	"github.com/skiff-sdn/skiff/controller/planner"
	"github.com/skiff-sdn/skiff/controller/policy"
	"github.com/skiff-sdn/skiff/controller/store"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/internal/planpb"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// plannerState converts a store state to the planner's input. Objects that
// do not convert are skipped with an error log: one bad record must not
// stop every node's plan.
func plannerState(st *store.State, log *slog.Logger) planner.State {
	var out planner.State
	for _, n := range st.Networks {
		out.Networks = append(out.Networks, planpb.Network(n))
	}
	for _, s := range st.Subnets {
		ps, err := planpb.Subnet(s)
		if err != nil {
			log.Error("skipping stored subnet", "err", err)
			continue
		}
		out.Subnets = append(out.Subnets, ps)
	}
	for _, e := range st.Endpoints {
		pe, err := planpb.Endpoint(e)
		if err != nil {
			log.Error("skipping stored endpoint", "err", err)
			continue
		}
		out.Endpoints = append(out.Endpoints, pe)
	}
	for _, n := range st.Nodes {
		out.Nodes = append(out.Nodes, planpb.Node(n))
	}
	for _, p := range st.Policies {
		pol, err := storedPolicy(p)
		if err != nil {
			log.Error("skipping stored policy", "err", err)
			continue
		}
		out.Policies = append(out.Policies, pol)
	}
	for _, n := range st.Namespaces {
		out.Namespaces = append(out.Namespaces, planner.NamespaceLabels{Name: n.Name, Labels: n.Labels})
	}
	out.Connected, out.Away = st.Connected, st.Away
	for _, r := range st.DPUReady {
		out.DPUReady = append(out.DPUReady, endpointReady(r))
	}
	return out
}

func endpointReady(r *skiffv1.DPUEndpointReport) planner.EndpointReady {
	return planner.EndpointReady{Endpoint: r.GetEndpoint(), Ready: r.GetReady(), Reason: r.GetReason(), Error: r.GetError()}
}

// storedPolicy parses a stored policy's document.
func storedPolicy(p *skiffv1.Policy) (policy.Policy, error) {
	ps, err := policy.ParseYAML([]byte(p.GetDocument()))
	if err != nil {
		return policy.Policy{}, fmt.Errorf("policy %s/%s: %w", p.GetNamespace(), p.GetName(), err)
	}
	if len(ps) != 1 {
		return policy.Policy{}, fmt.Errorf("policy %s/%s: %d documents stored", p.GetNamespace(), p.GetName(), len(ps))
	}
	return ps[0], nil
}

func plannerChanges(evs []store.Event, log *slog.Logger) []planner.Change {
	var out []planner.Change
	for _, e := range evs {
		c := planner.Change{Delete: e.Delete}
		switch {
		case e.Network != nil:
			n := planpb.Network(e.Network)
			c.Network = &n
		case e.Subnet != nil:
			s, err := planpb.Subnet(e.Subnet)
			if err != nil {
				log.Error("skipping subnet change", "err", err)
				continue
			}
			c.Subnet = &s
		case e.Endpoint != nil:
			ep, err := planpb.Endpoint(e.Endpoint)
			if err != nil {
				log.Error("skipping endpoint change", "err", err)
				continue
			}
			c.Endpoint = &ep
		case e.Node != nil:
			n := planpb.Node(e.Node)
			c.Node = &n
		case e.Policy != nil:
			if e.Delete {
				c.Policy = &policy.Policy{Namespace: e.Policy.Namespace, Name: e.Policy.Name}
				break
			}
			pol, err := storedPolicy(e.Policy)
			if err != nil {
				log.Error("skipping policy change", "err", err)
				continue
			}
			c.Policy = &pol
		case e.Namespace != nil:
			c.Namespace = &planner.NamespaceLabels{Name: e.Namespace.Name, Labels: e.Namespace.Labels}
		case e.Status != nil:
			since := e.Status.Since
			if !e.Status.Connected {
				since = time.Now() // seen away now
			}
			c.Status = &planner.NodeStatus{Node: e.Status.Node, Connected: e.Status.Connected, Since: since}
		case e.DPUReady != nil:
			r := endpointReady(e.DPUReady)
			c.DPUReady = &r
		default:
			continue
		}
		out = append(out, c)
	}
	return out
}

// plans adapts the planner to the API's PlanSource.
type plans struct{ *planner.Planner }

type subscription struct{ *planner.Subscription }

func (p plans) Subscribe(ctx context.Context, node string, have int64) (api.PlanSubscription, error) {
	s, err := p.Planner.Subscribe(ctx, node, have)
	if err != nil {
		return nil, err
	}
	return subscription{s}, nil
}

func (s subscription) Next(ctx context.Context) (*plan.Plan, *plan.Delta, error) {
	u, err := s.Subscription.Next(ctx)
	if err != nil {
		return nil, nil, err
	}
	return u.Snapshot, u.Delta, nil
}

// startPlanner loads the planner from the store and keeps it current from
// the etcd watch until ctx ends. Plan streams send one delta per interval
// at most.
func startPlanner(ctx context.Context, st *store.Store, interval time.Duration, log *slog.Logger) (plans, error) {
	history := func(ctx context.Context, node string, rev int64) (plan.Plan, error) {
		s, err := st.ReadState(ctx, rev)
		if err != nil {
			return plan.Plan{}, fmt.Errorf("plan of %s at %d: %w", node, rev, err)
		}
		return planner.Build(plannerState(s, log), node), nil
	}
	pl := planner.New(log, planner.Options{History: history, Interval: interval})
	state, err := st.ReadState(ctx, 0)
	if err != nil {
		return plans{}, fmt.Errorf("controller: load state: %w", err)
	}
	pl.Load(state.Revision, plannerState(state, log))
	log.Info("planner loaded", "revision", state.Revision, "networks", len(state.Networks),
		"endpoints", len(state.Endpoints), "nodes", len(state.Nodes))
	loadRecent(ctx, st, pl, state.Revision, log)
	go func() {
		rev := state.Revision
		for ctx.Err() == nil {
			err := st.Watch(ctx, rev, func(r int64, evs []store.Event) error {
				pl.Advance(r, plannerChanges(evs, log))
				rev = r
				return nil
			})
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, store.ErrCompacted) {
				s, rerr := st.ReadState(ctx, 0)
				if rerr != nil {
					log.Error("planner reload", "err", rerr)
					time.Sleep(time.Second)
					continue
				}
				log.Warn("watch fell behind compaction; planner reloaded", "revision", s.Revision)
				pl.Load(s.Revision, plannerState(s, log))
				rev = s.Revision
				continue
			}
			log.Warn("store watch ended; resuming", "revision", rev, "err", err)
			time.Sleep(500 * time.Millisecond)
		}
	}()
	return plans{pl}, nil
}

// loadRecent reads what changed in etcd's history up to the load revision
// so that agents holding plans of earlier revisions resume without a
// rebuild of their old plan (planner.Recent). Without it (an error) they
// still resume, through Options.History.
func loadRecent(ctx context.Context, st *store.Store, pl *planner.Planner, rev int64, log *slog.Logger) {
	start := time.Now()
	var r planner.Recent
	n := 0
	floor, err := st.Changes(ctx, rev, func(at int64, evs []store.Event) error {
		r.Add(at, recentChanges(evs))
		n++
		return nil
	})
	if err != nil {
		log.Warn("planner: store history not read; agents of earlier revisions resume through a rebuild", "err", err)
		return
	}
	r.Floor = floor
	ok := pl.SetRecent(rev, r)
	log.Info("planner: store history read", "floor", floor, "revision", rev, "revisions", n, "taken", ok, "took", time.Since(start))
}

// recentChanges keeps of each event what planner.Recent counts (names
// only, so that an object that does not convert still counts).
func recentChanges(evs []store.Event) []planner.Change {
	out := make([]planner.Change, 0, len(evs))
	for _, e := range evs {
		var c planner.Change
		switch {
		case e.Network != nil:
			c.Network = &plan.Network{Name: e.Network.Name}
		case e.Subnet != nil:
			c.Subnet = &plan.Subnet{Network: e.Subnet.Network}
		case e.Endpoint != nil:
			c.Endpoint = &plan.Endpoint{Network: e.Endpoint.Network, Node: e.Endpoint.Node}
		case e.Node != nil:
			c.Node = &plan.Node{Name: e.Node.Name}
		case e.Policy != nil:
			c.Policy = &policy.Policy{}
		case e.Namespace != nil:
			c.Namespace = &planner.NamespaceLabels{}
		default:
			continue
		}
		out = append(out, c)
	}
	return out
}
