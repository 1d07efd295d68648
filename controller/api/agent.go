package api

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/skiff-sdn/skiff/controller/store"
	"github.com/skiff-sdn/skiff/internal/plan"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// PlanSource is what the agent service needs from the planner. It must be
// safe for concurrent use.
type PlanSource interface {
	Plans
	// Revision is the store revision the plans are at.
	Revision() int64
	// Subscribe opens a node's plan stream; haveRev is the revision the
	// agent holds (0: none).
	Subscribe(ctx context.Context, node string, haveRev int64) (PlanSubscription, error)
}

// PlanSubscription yields a node's plan updates: exactly one of snapshot and
// delta is set.
type PlanSubscription interface {
	Next(ctx context.Context) (snapshot *plan.Plan, delta *plan.Delta, err error)
	Close()
}

// Agent implements skiffv1.AgentServiceServer.
type Agent struct {
	skiffv1.UnimplementedAgentServiceServer
	store     *store.Store
	plans     PlanSource
	counters  *counters
	log       *slog.Logger
	statusTTL time.Duration
	// signNode signs a node's renewed client certificate; nil when the
	// controller holds no CA.
	signNode func(node string, csrPEM []byte) ([]byte, error)
	// snapshots bounds the snapshots being built at once: a plan
	// materialized, converted and encoded is tens of MB on a network that
	// spans every node, and a thousand agents connecting at once would
	// otherwise build them all together. Once sent, only the encoded
	// bytes wait for the agent to read them.
	snapshots chan struct{}
	remotes   *remoteCache
	metrics   *metrics
}

// GetNetwork implements skiffv1.AgentServiceServer: any node may read a
// network by name.
func (a *Agent) GetNetwork(ctx context.Context, r *skiffv1.GetRequest) (*skiffv1.Network, error) {
	if err := authorizeSomeNode(ctx); err != nil {
		return nil, err
	}
	n, err := a.store.GetNetwork(ctx, r.GetName())
	if err != nil {
		return nil, grpcError("get network", err)
	}
	return n, nil
}

// RenewCertificate implements skiffv1.AgentServiceServer.
func (a *Agent) RenewCertificate(ctx context.Context, r *skiffv1.RenewCertificateRequest) (*skiffv1.RenewCertificateResponse, error) {
	if r.GetNode() == "" {
		return nil, status.Error(codes.InvalidArgument, "node: required")
	}
	if err := authorizeNode(ctx, r.GetNode()); err != nil {
		return nil, err
	}
	if _, tls := callerCN(ctx); !tls || a.signNode == nil {
		return nil, status.Error(codes.FailedPrecondition, "this controller issues no certificates (it runs without --ca-dir)")
	}
	cert, err := a.signNode(r.GetNode(), r.GetCsr())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	a.log.Info("node certificate renewed", "node", r.GetNode())
	return &skiffv1.RenewCertificateResponse{Certificate: cert}, nil
}

// SetNodeSigner makes RenewCertificate sign with sign.
func (s Servers) SetNodeSigner(sign func(node string, csrPEM []byte) ([]byte, error)) {
	s.Agent.signNode = sign
}

func (a *Agent) Register(ctx context.Context, r *skiffv1.RegisterRequest) (*skiffv1.RegisterResponse, error) {
	if r.GetNode() == nil {
		return nil, status.Error(codes.InvalidArgument, "node: required")
	}
	if err := authorizeNode(ctx, r.Node.GetName()); err != nil {
		return nil, err
	}
	n, err := a.store.RegisterNode(ctx, r.Node)
	if err != nil {
		return nil, grpcError("register", err)
	}
	a.log.Info("node registered", "node", n.Name, "underlay", n.UnderlayIp, "mode", n.Mode, "revision", n.Revision)
	return &skiffv1.RegisterResponse{Node: n}, nil
}

func (a *Agent) StreamPlan(r *skiffv1.StreamPlanRequest, srv skiffv1.AgentService_StreamPlanServer) error {
	ctx := srv.Context()
	node := r.GetNode()
	if err := store.ValidateName("node", node); err != nil {
		return grpcError("stream plan", err)
	}
	if err := authorizeNode(ctx, node); err != nil {
		return err
	}
	if _, err := a.store.GetNode(ctx, node); err != nil {
		if status.Code(grpcError("", err)) == codes.NotFound {
			return status.Errorf(codes.FailedPrecondition, "node: %q is not registered; call Register first", node)
		}
		return grpcError("stream plan", err)
	}
	have := r.GetHaveRevision()
	if have < 0 {
		return status.Errorf(codes.InvalidArgument, "haveRevision: must not be negative, got %d", have)
	}
	if have > a.plans.Revision() {
		// Either this replica's planner lags (Subscribe waits for it) or
		// the agent's plan comes from a store this one has never been
		// (restored from a backup): such a plan cannot be resumed.
		cur, err := a.store.Revision(ctx)
		if err != nil {
			return grpcError("stream plan", err)
		}
		if have > cur {
			a.log.Warn("agent holds a revision the store has not reached; sending a snapshot", "node", node, "haveRevision", have, "storeRevision", cur)
			have = 0
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		if err := a.store.MarkConnected(ctx, node, a.statusTTL); err != nil && ctx.Err() == nil {
			a.log.Warn("node status", "node", node, "err", err)
		}
	}()
	release := func() {}
	if have == 0 && a.snapshots != nil {
		select {
		case a.snapshots <- struct{}{}:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
		release = sync.OnceFunc(func() { <-a.snapshots })
		defer release()
	}
	sub, err := a.plans.Subscribe(ctx, node, have)
	if err != nil {
		return grpcError("stream plan", err)
	}
	defer sub.Close()
	a.log.Info("plan stream opened", "node", node, "haveRevision", have)
	a.metrics.streams.Inc()
	defer a.metrics.streams.Dec()
	for {
		snap, delta, err := sub.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				a.log.Info("plan stream closed", "node", node)
				return nil
			}
			return grpcError("stream plan", err)
		}
		var u *skiffv1.PlanUpdate
		if snap != nil {
			u = &skiffv1.PlanUpdate{Update: &skiffv1.PlanUpdate_Snapshot{Snapshot: a.remotes.planPB(*snap)}}
			a.log.Debug("plan snapshot sent", "node", node, "revision", snap.Revision)
		} else {
			u = &skiffv1.PlanUpdate{Update: &skiffv1.PlanUpdate_Delta{Delta: a.remotes.deltaPB(*delta)}}
			a.log.Debug("plan delta sent", "node", node, "from", delta.From, "revision", delta.Revision, "items", delta.Size())
		}
		if err := srv.Send(u); err != nil {
			return err
		}
		if snap != nil {
			a.metrics.snapshots.Inc()
		} else {
			a.metrics.deltas.Inc()
			a.metrics.items.Add(float64(delta.Size()))
		}
		release()
	}
}

func (a *Agent) ReportEvents(ctx context.Context, r *skiffv1.ReportEventsRequest) (*skiffv1.ReportEventsResponse, error) {
	if err := authorizeNode(ctx, r.GetNode()); err != nil {
		return nil, err
	}
	if len(r.GetEvents()) > 1000 {
		return nil, status.Errorf(codes.InvalidArgument, "events: at most 1000 per report, got %d", len(r.GetEvents()))
	}
	for _, e := range r.GetEvents() {
		a.log.Info("node event", "node", r.Node, "kind", e.GetKind(), "subject", e.GetSubject(), "detail", e.GetDetail())
	}
	return &skiffv1.ReportEventsResponse{}, nil
}

func (a *Agent) ReportCounters(ctx context.Context, r *skiffv1.ReportCountersRequest) (*skiffv1.ReportCountersResponse, error) {
	if err := authorizeNode(ctx, r.GetNode()); err != nil {
		return nil, err
	}
	if err := store.ValidateName("node", r.GetNode()); err != nil {
		return nil, grpcError("report counters", err)
	}
	a.counters.set(r)
	return &skiffv1.ReportCountersResponse{}, nil
}

func (a *Agent) CreateEndpoint(ctx context.Context, r *skiffv1.CreateEndpointRequest) (*skiffv1.Endpoint, error) {
	if err := authorizeNode(ctx, r.GetEndpoint().GetNode()); err != nil {
		return nil, err
	}
	return createEndpoint(ctx, a.store, a.log, r)
}

func (a *Agent) DeleteEndpoint(ctx context.Context, r *skiffv1.DeleteRequest) (*skiffv1.DeleteResponse, error) {
	e, err := a.store.GetEndpoint(ctx, r.GetName())
	if err != nil {
		return nil, grpcError("delete endpoint", err)
	}
	if err := authorizeNode(ctx, e.Node); err != nil {
		return nil, err
	}
	if err := a.store.DeleteEndpoint(ctx, r.GetName()); err != nil {
		return nil, grpcError("delete endpoint", err)
	}
	return &skiffv1.DeleteResponse{}, nil
}

// Servers holds both services over one store and plan source.
type Servers struct {
	Management *Management
	Agent      *Agent
}

// New returns the services. statusTTL is how long a node stays "connected"
// after its controller dies without closing the stream.
func New(st *store.Store, plans PlanSource, log *slog.Logger, statusTTL time.Duration) Servers {
	c := &counters{}
	remotes := newRemoteCache(1 << 18)
	return Servers{
		Management: &Management{store: st, plans: plans, counters: c, log: log, remotes: remotes},
		Agent: &Agent{store: st, plans: plans, counters: c, log: log, statusTTL: statusTTL,
			snapshots: make(chan struct{}, 2*runtime.GOMAXPROCS(0)), remotes: remotes, metrics: newMetrics()},
	}
}

// ReportDPUEndpoints implements skiffv1.AgentServiceServer: a DPU node
// speaks for its host's endpoints; what it reports reaches the host in
// its plan.
func (a *Agent) ReportDPUEndpoints(ctx context.Context, r *skiffv1.ReportDPUEndpointsRequest) (*skiffv1.ReportDPUEndpointsResponse, error) {
	if err := authorizeNode(ctx, r.GetNode()); err != nil {
		return nil, err
	}
	if err := store.ValidateName("node", r.GetNode()); err != nil {
		return nil, grpcError("report DPU endpoints", err)
	}
	if len(r.GetEndpoints()) > 10000 {
		return nil, status.Errorf(codes.InvalidArgument, "endpoints: at most 10000 per report, got %d", len(r.GetEndpoints()))
	}
	if err := a.store.SetDPUEndpoints(ctx, r.GetNode(), r.GetEndpoints()); err != nil {
		return nil, grpcError("report DPU endpoints", err)
	}
	return &skiffv1.ReportDPUEndpointsResponse{}, nil
}
