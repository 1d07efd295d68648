package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/skiff-sdn/skiff/internal/dialer"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// Agent is a simulated skiff-agent: a real gRPC client of AgentService,
// with its own connection and its node's certificate, that does what the
// real agent's session does (register; follow the plan stream, resuming
// with the revision it holds; reconnect with the same backoff; report
// counters every interval) into an in-memory plan instead of a datapath.
type Agent struct {
	Node       string
	UnderlayIP string
	fleet      *Fleet
	conn       *grpc.ClientConn
	client     skiffv1.AgentServiceClient

	mu      sync.Mutex
	plan    *digestPlan
	has     bool
	session session
	stats   AgentStats
	applied time.Time // last update that changed the plan
}

// session is what an agent knows of its current plan stream.
type session struct {
	open    bool
	opened  time.Time
	have    int64     // revision asked for
	first   time.Time // first update received (zero: none yet)
	resumed string    // first update: "snapshot", "delta" or "in-sync"
	peer    string    // the replica's address
}

// AgentStats counts what an agent received.
type AgentStats struct {
	Sessions   int // plan streams opened
	Snapshots  int // snapshots received (first updates and after a reset)
	Deltas     int // deltas received, resumes included
	Resumes    int // sessions opened holding a plan
	ResumeSnap int // of those, answered with a snapshot
	InSync     int // of those, answered with an empty delta
	Rejected   int // updates that did not apply (a controller bug)
	Errors     int // sessions that ended with an error
	// DeltaBytes is the deltas' encoded size; GroupAddrs the group
	// member addresses they carried (whole groups' members, and member
	// changes' added and removed addresses).
	DeltaBytes, GroupAddrs int64
}

func (s *AgentStats) add(o AgentStats) {
	s.Sessions += o.Sessions
	s.Snapshots += o.Snapshots
	s.Deltas += o.Deltas
	s.Resumes += o.Resumes
	s.ResumeSnap += o.ResumeSnap
	s.InSync += o.InSync
	s.Rejected += o.Rejected
	s.Errors += o.Errors
	s.DeltaBytes += o.DeltaBytes
	s.GroupAddrs += o.GroupAddrs
}

func newAgent(f *Fleet, node, underlay string, creds credentials.TransportCredentials) (*Agent, error) {
	conn, err := dialer.Dial(f.cfg.Target, grpc.WithTransportCredentials(creds),
		// The real agent's keepalive: the controller reads and answers
		// an idle agent's pings every 5 s (and does not ping it itself).
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: dialer.KeepaliveTime, Timeout: dialer.KeepaliveTimeout, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(f.cfg.MaxMessage)))
	if err != nil {
		return nil, err
	}
	return &Agent{Node: node, UnderlayIP: underlay, fleet: f, conn: conn, client: skiffv1.NewAgentServiceClient(conn),
		plan: newDigestPlan(node)}, nil
}

// run keeps the session up until ctx ends, with the real agent's backoff
// (200 ms doubling to 10 s, reset after a session of more than 10 s).
func (a *Agent) run(ctx context.Context) {
	backoff := 200 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		err := a.stream(ctx)
		a.mu.Lock()
		a.session.open = false
		failed := err != nil && ctx.Err() == nil
		if failed {
			a.stats.Errors++
		}
		a.mu.Unlock()
		if failed {
			a.fleet.fails.add(err)
		}
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > 10*time.Second {
			backoff = 200 * time.Millisecond
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

func (a *Agent) node() *skiffv1.Node {
	return &skiffv1.Node{Name: a.Node, UnderlayIp: a.UnderlayIP, Mode: "software", AgentVersion: "scale-sim"}
}

// register registers the node once (setup).
func (a *Agent) register(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := a.client.Register(rctx, &skiffv1.RegisterRequest{Node: a.node()})
	return err
}

func (a *Agent) stream(ctx context.Context) error {
	if err := a.register(ctx); err != nil {
		return fmt.Errorf("register: %w", err)
	}
	a.mu.Lock()
	have := a.plan.revision
	a.session = session{opened: time.Now(), have: have}
	a.stats.Sessions++
	if have > 0 {
		a.stats.Resumes++
	}
	a.mu.Unlock()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := a.client.StreamPlan(sctx, &skiffv1.StreamPlanRequest{Node: a.Node, HaveRevision: have})
	if err != nil {
		return fmt.Errorf("open plan stream: %w", err)
	}
	a.mu.Lock()
	a.session.open = true
	if p, ok := peer.FromContext(s.Context()); ok {
		a.session.peer = p.Addr.String()
	}
	a.mu.Unlock()
	for {
		u, err := s.Recv()
		switch {
		case err == nil:
			if err := a.accept(u); err != nil {
				return err
			}
		case errors.Is(err, io.EOF):
			return errors.New("the controller ended the plan stream")
		case ctx.Err() != nil:
			return nil // the fleet stops
		default:
			return fmt.Errorf("plan stream: %w", err)
		}
	}
}

// accept applies one update. A delta that does not apply makes the agent
// forget its revision and start over from a snapshot, as the real one does.
func (a *Agent) accept(u *skiffv1.PlanUpdate) error {
	now := time.Now()
	var (
		snap    *digestPlan
		changed []string
		removed []string
	)
	if s := u.GetSnapshot(); s != nil {
		p, err := fromPlan(s)
		if err == nil && p.node != a.Node {
			err = fmt.Errorf("snapshot for node %q", p.node)
		}
		if err != nil {
			a.reject(err)
			return err
		}
		snap = p
	}
	a.mu.Lock()
	first := a.session.first.IsZero()
	if first {
		a.session.first = now
	}
	switch {
	case snap != nil:
		a.plan, a.has, a.applied = snap, true, now
		a.stats.Snapshots++
		if first {
			a.session.resumed = "snapshot"
			if a.session.have > 0 {
				a.stats.ResumeSnap++
			}
		}
	case u.GetDelta() != nil:
		d := u.GetDelta()
		if err := a.plan.apply(d); err != nil {
			a.mu.Unlock()
			a.reject(err)
			return err
		}
		a.stats.Deltas++
		a.stats.DeltaBytes += int64(proto.Size(d))
		a.stats.GroupAddrs += groupAddrs(d)
		empty := len(d.UpsertNetworks)+len(d.RemoveNetworks)+len(d.UpsertLocal)+len(d.RemoveLocal)+len(d.UpsertRemote)+
			len(d.RemoveRemote)+len(d.UpsertPolicies)+len(d.RemovePolicies)+len(d.UpsertGroups)+len(d.RemoveGroups)+len(d.ChangeGroups) == 0 && d.UnderlayIp == nil
		if !empty {
			a.applied = now
		}
		if first {
			a.session.resumed = "delta"
			if empty {
				a.session.resumed = "in-sync"
				a.stats.InSync++
			}
		}
		for _, e := range d.UpsertLocal {
			changed = append(changed, e.GetName())
		}
		for _, r := range d.UpsertRemote {
			changed = append(changed, r.GetName())
		}
		removed = append(append(removed, d.RemoveLocal...), d.RemoveRemote...)
		for _, p := range d.UpsertPolicies {
			changed = append(changed, policyItem(p.GetEndpoint()))
		}
		for _, n := range d.RemovePolicies {
			removed = append(removed, policyItem(n))
		}
	default:
		a.mu.Unlock()
		err := errors.New("empty plan update")
		a.reject(err)
		return err
	}
	a.mu.Unlock()
	if snap != nil {
		a.fleet.watches.sawPlan(a, now)
	} else {
		a.fleet.watches.saw(a.Node, changed, removed, now)
	}
	return nil
}

func (a *Agent) reject(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stats.Rejected++
	a.plan.revision = 0
	a.fleet.logf("agent %s: rejected an update, asking for a snapshot: %v", a.Node, err)
}

// reportCounters sends counters for the local endpoints every interval
// while a session is open (the first after a random part of it, so that
// agents spread their reports).
func (a *Agent) reportCounters(ctx context.Context, interval time.Duration) {
	select {
	case <-time.After(rand.N(interval)):
	case <-ctx.Done():
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var n uint64
	for {
		a.mu.Lock()
		open := a.session.open
		var eps []string
		for name := range a.plan.items[kindLocal] {
			eps = append(eps, name.Value())
		}
		a.mu.Unlock()
		if open {
			n++
			req := &skiffv1.ReportCountersRequest{Node: a.Node, Time: timestamppb.Now()}
			for _, e := range eps {
				req.Endpoints = append(req.Endpoints, &skiffv1.EndpointCounters{Endpoint: e,
					Counters: &skiffv1.Counters{RxPackets: n * 10, RxBytes: n * 1000, TxPackets: n * 9, TxBytes: n * 900}})
			}
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, _ = a.client.ReportCounters(rctx, req)
			cancel()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// snapshot returns the agent's session and stats.
func (a *Agent) state() (session, AgentStats, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.session, a.stats, a.has
}

// groupAddrs is the number of group member addresses d carries.
func groupAddrs(d *skiffv1.PlanDelta) int64 {
	var n int
	for _, g := range d.GetUpsertGroups() {
		n += len(g.GetMembers())
	}
	for _, c := range d.GetChangeGroups() {
		n += len(c.GetAdd()) + len(c.GetRemove())
	}
	return int64(n)
}
