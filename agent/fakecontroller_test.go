package agent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/internal/planpb"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// fakeController is an AgentService of one node's plan, on loopback: it
// creates endpoints in the plan (addresses from 198.51.100.0/24), answers
// a stream with a snapshot or, when the agent's revision is its own, a
// delta, pushes every change, and records what the agent sent.
type fakeController struct {
	skiffv1.UnimplementedAgentServiceServer
	t    *testing.T
	addr string
	srv  *grpc.Server

	mu       sync.Mutex
	plan     plan.Plan
	history  map[int64]plan.Plan // revision -> plan, for deltas
	streams  map[chan *skiffv1.PlanUpdate]bool
	haves    []int64 // HaveRevision of every stream opened
	sent     []string
	counters []*skiffv1.ReportCountersRequest
	events   []*skiffv1.NodeEvent
	failNext error // the next CreateEndpoint fails with it
	nextIP   int
}

func newFakeController(t *testing.T, node string) *fakeController {
	f := &fakeController{t: t, plan: plan.New(node), history: map[int64]plan.Plan{}, streams: map[chan *skiffv1.PlanUpdate]bool{}, nextIP: 10}
	f.plan.UnderlayIP = netip.MustParseAddr("192.0.2.1")
	f.plan.Revision = 1
	f.history[1] = f.plan.Clone()
	f.start(t, "127.0.0.1:0")
	return f
}

// start serves on addr (the same address again after stop).
func (f *fakeController) start(t *testing.T, addr string) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	f.addr = l.Addr().String()
	f.srv = grpc.NewServer()
	skiffv1.RegisterAgentServiceServer(f.srv, f)
	go func() { _ = f.srv.Serve(l) }()
	t.Cleanup(f.srv.Stop)
}

// streamsSeen is how many plan streams were opened.
func (f *fakeController) streamsSeen() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.haves)
}

// stop drops every connection and stops listening.
func (f *fakeController) stop() { f.srv.Stop() }

// change applies fn to the plan as a new revision and pushes the delta.
func (f *fakeController) change(fn func(p *plan.Plan)) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := f.plan.Clone()
	fn(&f.plan)
	f.plan.Revision++
	f.history[f.plan.Revision] = f.plan.Clone()
	d := plan.Diff(old, f.plan)
	for ch := range f.streams {
		select {
		case ch <- &skiffv1.PlanUpdate{Update: &skiffv1.PlanUpdate_Delta{Delta: planpb.DeltaPB(d)}}:
		default:
			f.t.Errorf("fake controller: a stream is not reading")
		}
	}
	return f.plan.Revision
}

func (f *fakeController) addNetwork(name string, vni uint32) {
	f.change(func(p *plan.Plan) {
		p.Networks[name] = plan.Network{Name: name, VNI: vni, MTU: 1450, Subnets: []plan.Subnet{{Name: name + "-v4", Network: name,
			CIDR: netip.MustParsePrefix("198.51.100.0/24"), Gateway: netip.MustParseAddr("198.51.100.1")}}}
	})
}

func (f *fakeController) Register(_ context.Context, r *skiffv1.RegisterRequest) (*skiffv1.RegisterResponse, error) {
	f.record("register " + r.GetNode().GetName())
	return &skiffv1.RegisterResponse{Node: r.GetNode()}, nil
}

func (f *fakeController) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent = append(f.sent, s)
}

func (f *fakeController) StreamPlan(r *skiffv1.StreamPlanRequest, s grpc.ServerStreamingServer[skiffv1.PlanUpdate]) error {
	ch := make(chan *skiffv1.PlanUpdate, 64)
	f.mu.Lock()
	f.haves = append(f.haves, r.GetHaveRevision())
	var first *skiffv1.PlanUpdate
	if old, ok := f.history[r.GetHaveRevision()]; ok && r.GetHaveRevision() > 0 {
		first = &skiffv1.PlanUpdate{Update: &skiffv1.PlanUpdate_Delta{Delta: planpb.DeltaPB(plan.Diff(old, f.plan))}}
		f.sent = append(f.sent, fmt.Sprintf("delta %d->%d", old.Revision, f.plan.Revision))
	} else {
		first = &skiffv1.PlanUpdate{Update: &skiffv1.PlanUpdate_Snapshot{Snapshot: planpb.PlanPB(f.plan)}}
		f.sent = append(f.sent, fmt.Sprintf("snapshot %d", f.plan.Revision))
	}
	f.streams[ch] = true
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.streams, ch)
		f.mu.Unlock()
	}()
	if err := s.Send(first); err != nil {
		return err
	}
	for {
		select {
		case u := <-ch:
			if err := s.Send(u); err != nil {
				return err
			}
		case <-s.Context().Done():
			return nil
		}
	}
}

func (f *fakeController) CreateEndpoint(_ context.Context, r *skiffv1.CreateEndpointRequest) (*skiffv1.Endpoint, error) {
	e := r.GetEndpoint()
	f.mu.Lock()
	if err := f.failNext; err != nil {
		f.failNext = nil
		f.mu.Unlock()
		return nil, err
	}
	if _, ok := f.plan.Networks[e.GetNetwork()]; !ok {
		f.mu.Unlock()
		return nil, status.Errorf(codes.NotFound, "network %q does not exist", e.GetNetwork())
	}
	if _, ok := f.plan.Local[e.GetName()]; ok {
		f.mu.Unlock()
		return nil, status.Errorf(codes.AlreadyExists, "endpoint %q exists", e.GetName())
	}
	f.nextIP++
	ip := f.nextIP
	f.mu.Unlock()
	ep := plan.Endpoint{Name: e.GetName(), Network: e.GetNetwork(), Node: f.plan.Node, Kind: e.GetKind(), Labels: e.GetLabels(),
		Owner: e.GetOwner(), Namespace: e.GetNamespace(), PF: e.GetPf(), VFIndex: -1,
		MAC: fmt.Sprintf("02:00:00:00:00:%02x", ip), IPs: []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("198.51.100.%d/24", ip))}}
	if e.VfIndex != nil {
		ep.VFIndex = int(e.GetVfIndex())
	}
	rev := f.change(func(p *plan.Plan) { p.Local[ep.Name] = ep })
	pb := planpb.EndpointPB(ep)
	pb.Revision = rev
	return pb, nil
}

func (f *fakeController) DeleteEndpoint(_ context.Context, r *skiffv1.DeleteRequest) (*skiffv1.DeleteResponse, error) {
	f.mu.Lock()
	_, ok := f.plan.Local[r.GetName()]
	f.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "endpoint %q does not exist", r.GetName())
	}
	f.change(func(p *plan.Plan) { delete(p.Local, r.GetName()) })
	return &skiffv1.DeleteResponse{}, nil
}

func (f *fakeController) ReportCounters(_ context.Context, r *skiffv1.ReportCountersRequest) (*skiffv1.ReportCountersResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counters = append(f.counters, r)
	return &skiffv1.ReportCountersResponse{}, nil
}

func (f *fakeController) ReportEvents(_ context.Context, r *skiffv1.ReportEventsRequest) (*skiffv1.ReportEventsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, r.GetEvents()...)
	return &skiffv1.ReportEventsResponse{}, nil
}

// endpoints lists the endpoints the controller holds.
func (f *fakeController) endpoints() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.plan.Local {
		out = append(out, n)
	}
	return out
}
