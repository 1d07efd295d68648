package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// stream is an open plan stream of one node.
type stream struct {
	cancel context.CancelFunc
	c      skiffv1.AgentService_StreamPlanClient
}

func openStream(t *testing.T, a skiffv1.AgentServiceClient, node string, have int64) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c, err := a.StreamPlan(ctx, &skiffv1.StreamPlanRequest{Node: node, HaveRevision: have})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &stream{cancel: cancel, c: c}
	t.Cleanup(cancel)
	return s
}

func (s *stream) next(t *testing.T) *skiffv1.PlanUpdate {
	t.Helper()
	done := make(chan struct{})
	var u *skiffv1.PlanUpdate
	var err error
	go func() { u, err = s.c.Recv(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("no plan update within 30s")
	}
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func names[T interface{ GetName() string }](items []T) []string {
	var out []string
	for _, i := range items {
		out = append(out, i.GetName())
	}
	slices.Sort(out)
	return out
}

func register(t *testing.T, a skiffv1.AgentServiceClient, node, ip string) {
	t.Helper()
	if _, err := a.Register(context.Background(), &skiffv1.RegisterRequest{Node: &skiffv1.Node{Name: node, UnderlayIp: ip, Mode: "software"}}); err != nil {
		t.Fatal(err)
	}
}

func createEP(t *testing.T, m skiffv1.ManagementServiceClient, name, network, node string) *skiffv1.Endpoint {
	t.Helper()
	e, err := m.CreateEndpoint(context.Background(), &skiffv1.CreateEndpointRequest{Endpoint: &skiffv1.Endpoint{Name: name, Network: network, Node: node}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestPlanStreams checks plan relevance through the real controller's plan
// streams, deltas only to relevant nodes, and resumption without a full
// resend, across a controller restart too.
func TestPlanStreams(t *testing.T) {
	addr, data := testkit.FreeAddr(t), t.TempDir()
	ctrl := startController(t, addr, "--data-dir", data)
	m, a := mgmt(t, addr), agentClient(t, addr)
	setupNetwork(t, m, "blue", 100, "198.51.100.0/24")
	setupNetwork(t, m, "red", 200, "203.0.113.0/24")
	register(t, a, "n1", "192.0.2.1")
	register(t, a, "n2", "192.0.2.2")
	register(t, a, "n3", "192.0.2.3")
	createEP(t, m, "b1", "blue", "n1")
	createEP(t, m, "b2", "blue", "n2")
	createEP(t, m, "r2", "red", "n2")
	last := createEP(t, m, "r3", "red", "n3")

	// Wait until the planner has seen the last change.
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		p, err := m.GetPlan(context.Background(), &skiffv1.GetPlanRequest{Node: "n3"})
		if err != nil || p.Revision < last.Revision {
			return fmt.Errorf("plan of n3 at %d, want >= %d (%v)", p.GetRevision(), last.Revision, err)
		}
		return nil
	}))

	want := map[string]struct{ nets, local, remote, flood string }{
		"n1": {"[blue]", "[b1]", "[b2]", "blue=[192.0.2.2]"},
		"n2": {"[blue red]", "[b2 r2]", "[b1 r3]", "blue=[192.0.2.1] red=[192.0.2.3]"},
		"n3": {"[red]", "[r3]", "[r2]", "red=[192.0.2.2]"},
	}
	streams := map[string]*stream{}
	revs := map[string]int64{}
	for _, n := range []string{"n1", "n2", "n3"} {
		streams[n] = openStream(t, a, n, 0)
		u := streams[n].next(t)
		p := u.GetSnapshot()
		if p == nil {
			t.Fatalf("%s: first update is %v, want a snapshot", n, u)
		}
		var flood []string
		for _, nw := range p.Networks {
			flood = append(flood, fmt.Sprintf("%s=%v", nw.Name, nw.FloodVteps))
		}
		got := fmt.Sprintf("%v %v %v %v", names(p.Networks), names(p.LocalEndpoints), names(p.RemoteEndpoints), flood)
		w := want[n]
		if exp := fmt.Sprintf("%s %s %s [%s]", w.nets, w.local, w.remote, w.flood); got != exp {
			t.Errorf("%s: plan %s, want %s", n, got, exp)
		}
		if p.UnderlayIp == "" || p.Node != n {
			t.Errorf("%s: plan header %q %q", n, p.Node, p.UnderlayIp)
		}
		revs[n] = p.Revision
	}

	// A red endpoint on n3 concerns n2 (remote) and n3 (local), not n1. A
	// blue endpoint on n2 afterwards concerns n1 and n2: n1's first update
	// must be about it.
	createEP(t, m, "r3b", "red", "n3")
	createEP(t, m, "b2b", "blue", "n2")
	d := streams["n1"].next(t).GetDelta()
	if d == nil || fmt.Sprint(names(d.UpsertRemote)) != "[b2b]" || len(d.UpsertLocal) != 0 {
		t.Fatalf("n1 got %v, want only remote b2b", d)
	}
	d3 := streams["n3"].next(t).GetDelta()
	if d3 == nil || fmt.Sprint(names(d3.UpsertLocal)) != "[r3b]" {
		t.Fatalf("n3 got %v, want local r3b", d3)
	}
	revs["n1"] = d.Revision

	// n1 goes away; meanwhile blue changes. It resumes with a delta.
	streams["n1"].cancel()
	createEP(t, m, "b3", "blue", "n3")
	// The planner applies the store's changes after the create returns:
	// resume once n1's plan holds b3, so that the first delta carries it.
	testkit.Eventually(t, "n1's plan holds b3", 10*time.Second, func() (bool, string) {
		p, err := m.GetPlan(context.Background(), &skiffv1.GetPlanRequest{Node: "n1"})
		if err != nil {
			return false, err.Error()
		}
		return slices.Contains(names(p.RemoteEndpoints), "b3"), fmt.Sprint(names(p.RemoteEndpoints))
	})
	s := openStream(t, a, "n1", revs["n1"])
	u := s.next(t)
	if u.GetDelta() == nil {
		t.Fatalf("resume from %d got a snapshot, want a delta", revs["n1"])
	}
	rd := u.GetDelta()
	if rd.FromRevision != revs["n1"] || fmt.Sprint(names(rd.UpsertRemote)) != "[b3]" {
		t.Fatalf("resume delta from %d with remotes %v, want from %d with [b3]", rd.FromRevision, names(rd.UpsertRemote), revs["n1"])
	}
	if fmt.Sprint(names(rd.UpsertNetworks)) != "[blue]" || fmt.Sprint(rd.UpsertNetworks[0].FloodVteps) != "[192.0.2.2 192.0.2.3]" {
		t.Fatalf("resume delta networks %v, want blue flooding to n2 and n3", rd.UpsertNetworks)
	}
	revs["n1"] = rd.Revision
	s.cancel()

	// The controller dies and comes back; n1 resumes from what it holds,
	// still with a delta, and one that is empty when nothing changed.
	ctrl.kill()
	startController(t, addr, "--data-dir", data)
	a = agentClient(t, addr)
	u = openStream(t, a, "n1", revs["n1"]).next(t)
	if u.GetDelta() == nil {
		t.Fatalf("resume after restart got a snapshot, want a delta")
	}
	if n := len(u.GetDelta().UpsertRemote) + len(u.GetDelta().UpsertLocal) + len(u.GetDelta().RemoveRemote); n != 0 {
		t.Fatalf("resume after restart with nothing changed carried %d items: %v", n, u.GetDelta())
	}
}

func TestStreamNeedsRegistration(t *testing.T) {
	addr := testkit.FreeAddr(t)
	startController(t, addr, "--data-dir", t.TempDir())
	c, err := agentClient(t, addr).StreamPlan(context.Background(), &skiffv1.StreamPlanRequest{Node: "ghost"})
	if err == nil {
		_, err = c.Recv()
	}
	if err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("stream of an unregistered node: %v", err)
	}
}
