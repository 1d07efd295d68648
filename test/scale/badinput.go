package scale

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// badCase is one request a misbehaving agent makes, and how the
// controller must answer it: with code (and msg in the error), or with
// codes.OK where the call checks the answer itself.
type badCase struct {
	what string
	code codes.Code
	msg  string // part of the error message
	call func(ctx context.Context, rogue, ghost skiffv1.AgentServiceClient, raw *grpc.ClientConn) error
}

// rawCodec sends bytes as they are (a malformed request).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { return nil }
func (rawCodec) Name() string                       { return "proto" }

// streamErr opens a plan stream and returns the error of its first
// receive (a refusal), or of a stream that delivers instead of refusing.
func streamErr(ctx context.Context, c skiffv1.AgentServiceClient, r *skiffv1.StreamPlanRequest) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := c.StreamPlan(ctx, r)
	if err != nil {
		return err
	}
	if _, err := s.Recv(); err != nil {
		return err
	}
	return errors.New("the stream delivered a plan")
}

func badCases(victim, victimIP string) []badCase {
	reg := func(n *skiffv1.Node) func(context.Context, skiffv1.AgentServiceClient, skiffv1.AgentServiceClient, *grpc.ClientConn) error {
		return func(ctx context.Context, rogue, _ skiffv1.AgentServiceClient, _ *grpc.ClientConn) error {
			_, err := rogue.Register(ctx, &skiffv1.RegisterRequest{Node: n})
			return err
		}
	}
	big := &skiffv1.NodeCapabilities{Kernel: strings.Repeat("x", 5<<20)}
	return []badCase{
		{"register another node's name", codes.PermissionDenied, "may not act for node", reg(&skiffv1.Node{Name: victim, UnderlayIp: "198.18.255.1", Mode: "software"})},
		{"stream another node's plan", codes.PermissionDenied, "may not act for node", func(ctx context.Context, rogue, _ skiffv1.AgentServiceClient, _ *grpc.ClientConn) error {
			return streamErr(ctx, rogue, &skiffv1.StreamPlanRequest{Node: victim})
		}},
		{"report another node's counters", codes.PermissionDenied, "may not act for node", func(ctx context.Context, rogue, _ skiffv1.AgentServiceClient, _ *grpc.ClientConn) error {
			_, err := rogue.ReportCounters(ctx, &skiffv1.ReportCountersRequest{Node: victim})
			return err
		}},
		{"create an endpoint on another node", codes.PermissionDenied, "may not act for node", func(ctx context.Context, rogue, _ skiffv1.AgentServiceClient, _ *grpc.ClientConn) error {
			_, err := rogue.CreateEndpoint(ctx, &skiffv1.CreateEndpointRequest{Endpoint: &skiffv1.Endpoint{Name: "stolen", Network: "x", Node: victim}})
			return err
		}},
		{"register without a node", codes.InvalidArgument, "node: required", reg(nil)},
		{"register with a malformed underlay address", codes.InvalidArgument, "underlayIp", reg(&skiffv1.Node{Name: "rogue", UnderlayIp: "not-an-ip", Mode: "software"})},
		{"register with another node's underlay address", codes.AlreadyExists, "underlayIp", reg(&skiffv1.Node{Name: "rogue", UnderlayIp: victimIP, Mode: "software"})},
		{"register with an unknown mode", codes.InvalidArgument, "mode", reg(&skiffv1.Node{Name: "rogue", UnderlayIp: "198.18.255.1", Mode: "warp"})},
		{"register a 5 MiB node", codes.ResourceExhausted, "larger than max", reg(&skiffv1.Node{Name: "rogue", UnderlayIp: "198.18.255.1", Mode: "software", Capabilities: big})},
		{"stream with a negative revision", codes.InvalidArgument, "haveRevision", func(ctx context.Context, rogue, _ skiffv1.AgentServiceClient, _ *grpc.ClientConn) error {
			return streamErr(ctx, rogue, &skiffv1.StreamPlanRequest{Node: "rogue", HaveRevision: -5})
		}},
		// A plan from a store this one never was (restored from a backup)
		// cannot be resumed: the answer is a snapshot, at once.
		{"stream from a revision the store has not reached", codes.OK, "", func(ctx context.Context, rogue, _ skiffv1.AgentServiceClient, _ *grpc.ClientConn) error {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			s, err := rogue.StreamPlan(ctx, &skiffv1.StreamPlanRequest{Node: "rogue", HaveRevision: 1 << 50})
			if err != nil {
				return err
			}
			u, err := s.Recv()
			if err != nil {
				return err
			}
			if u.GetSnapshot() == nil {
				return errors.New("resumed a revision from the future")
			}
			return nil
		}},
		{"stream with a malformed node name", codes.InvalidArgument, "node", func(ctx context.Context, rogue, _ skiffv1.AgentServiceClient, _ *grpc.ClientConn) error {
			return streamErr(ctx, rogue, &skiffv1.StreamPlanRequest{Node: "Bad Name!"})
		}},
		{"stream before registering", codes.FailedPrecondition, "call Register first", func(ctx context.Context, _, ghost skiffv1.AgentServiceClient, _ *grpc.ClientConn) error {
			return streamErr(ctx, ghost, &skiffv1.StreamPlanRequest{Node: "ghost"})
		}},
		{"report 1001 events", codes.InvalidArgument, "at most 1000", func(ctx context.Context, rogue, _ skiffv1.AgentServiceClient, _ *grpc.ClientConn) error {
			evs := make([]*skiffv1.NodeEvent, 1001)
			for i := range evs {
				evs[i] = &skiffv1.NodeEvent{Kind: "x"}
			}
			_, err := rogue.ReportEvents(ctx, &skiffv1.ReportEventsRequest{Node: "rogue", Events: evs})
			return err
		}},
		{"create an endpoint with a malformed name", codes.InvalidArgument, "name", func(ctx context.Context, rogue, _ skiffv1.AgentServiceClient, _ *grpc.ClientConn) error {
			_, err := rogue.CreateEndpoint(ctx, &skiffv1.CreateEndpointRequest{Endpoint: &skiffv1.Endpoint{Name: "Not/A/Name", Network: "x", Node: "rogue"}})
			return err
		}},
		{"send bytes that are not a protobuf message", codes.Internal, "unmarshal", func(ctx context.Context, _, _ skiffv1.AgentServiceClient, raw *grpc.ClientConn) error {
			var out []byte
			return raw.Invoke(ctx, skiffv1.AgentService_Register_FullMethodName, []byte{0xff, 0xff, 0xff, 0xff}, &out, grpc.ForceCodec(rawCodec{}))
		}},
		{"use the management API with a node certificate", codes.PermissionDenied, "may not use the management API", func(ctx context.Context, _, _ skiffv1.AgentServiceClient, raw *grpc.ClientConn) error {
			_, err := skiffv1.NewManagementServiceClient(raw).ListNodes(ctx, &skiffv1.ListRequest{})
			return err
		}},
	}
}

// BadInput registers a rogue node under mTLS and has it send, rounds
// times, requests that are malformed, out of order, or that speak for
// another node, while endpoint changes go on; every request must be
// refused with the expected code, no simulated agent may lose its session,
// and every plan must stay correct.
func (e *Env) BadInput(ctx context.Context, rounds, changes int) error {
	const sc = "bad input"
	if e.Cluster.CA == nil {
		return errors.New("bad input needs mTLS")
	}
	victim := e.Fleet.Agents[len(e.Fleet.Agents)-1]
	dial := func(cn string) (*grpc.ClientConn, error) {
		creds, err := e.Cluster.CA.Client(cn)
		if err != nil {
			return nil, err
		}
		return grpc.NewClient(e.Cluster.Controllers[0].Addr, grpc.WithTransportCredentials(creds))
	}
	rc, err := dial("node:rogue")
	if err != nil {
		return err
	}
	defer rc.Close()
	gc, err := dial("node:ghost")
	if err != nil {
		return err
	}
	defer gc.Close()
	rogue, ghost := skiffv1.NewAgentServiceClient(rc), skiffv1.NewAgentServiceClient(gc)
	if _, err := rogue.Register(ctx, &skiffv1.RegisterRequest{Node: &skiffv1.Node{Name: "rogue", UnderlayIp: "198.18.255.2", Mode: "software"}}); err != nil {
		return fmt.Errorf("rogue's own registration: %w", err)
	}
	before := e.Fleet.Stats()
	cases := badCases(victim.Node, victim.UnderlayIP)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		wrong  []string
		called int
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range rounds {
			for _, c := range cases {
				cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
				err := c.call(cctx, rogue, ghost, rc)
				cancel()
				mu.Lock()
				called++
				if status.Code(err) != c.code || (err != nil && !strings.Contains(err.Error(), c.msg)) {
					if len(wrong) < 10 {
						wrong = append(wrong, fmt.Sprintf("%s: got %v, want %s containing %q", c.what, err, c.code, c.msg))
					}
				}
				mu.Unlock()
			}
		}
	}()
	var lat []time.Duration
	for range changes {
		ep, members := e.newEndpoint("bad")
		w := e.Fleet.Expect(ep.Name, members, false)
		if err := CreateEndpoint(ctx, e.Mgmt, ep); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		d, err := e.Fleet.Wait(wctx, w)
		cancel()
		if err != nil {
			return err
		}
		lat = append(lat, d)
		if err := DeleteEndpoint(ctx, e.Mgmt, ep.Name); err != nil {
			return err
		}
	}
	wg.Wait()
	after := e.Fleet.Stats()
	e.Report.Add(sc, "malformed, out-of-order and impersonating requests", "%d (%d kinds x %d rounds), %d not answered as expected", called, len(cases), rounds, len(wrong))
	e.Report.Add(sc, "simulated agents' sessions lost meanwhile", "%d", after.Sessions-before.Sessions)
	e.Report.Add(sc, "endpoint created -> every relevant agent, p50 / p99 meanwhile", "%s / %s", ms(Percentile(lat, 50)), ms(Percentile(lat, 99)))
	if len(wrong) > 0 {
		return fmt.Errorf("requests not answered as expected:\n%s", strings.Join(wrong, "\n"))
	}
	if after.Sessions != before.Sessions || after.Rejected != before.Rejected {
		return fmt.Errorf("bad input disturbed the agents: %d sessions and %d rejected updates more", after.Sessions-before.Sessions, after.Rejected-before.Rejected)
	}
	return e.InSync(ctx, time.Minute)
}
