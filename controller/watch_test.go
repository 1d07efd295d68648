package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// TestWatchNodeStatus: a watch of nodes with initial gets the nodes as
// they are, then an event whenever an agent's stream opens or ends.
func TestWatchNodeStatus(t *testing.T) {
	m, addr := startAt(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ag := skiffv1.NewAgentServiceClient(conn)
	for _, n := range []string{"n1", "n2"} {
		if _, err := ag.Register(ctx, &skiffv1.RegisterRequest{Node: &skiffv1.Node{Name: n, UnderlayIp: "192.0.2." + n[1:]}}); err != nil {
			t.Fatal(err)
		}
	}
	// n1's agent is connected before the watch starts.
	sctx, stopStream := context.WithCancel(ctx)
	s, err := ag.StreamPlan(sctx, &skiffv1.StreamPlanRequest{Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := m.GetNode(ctx, &skiffv1.GetRequest{Name: "n1"})
		if err != nil {
			t.Fatal(err)
		}
		if n.Connected {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	w, err := m.Watch(ctx, &skiffv1.WatchRequest{Kinds: []string{"node"}, Initial: true})
	if err != nil {
		t.Fatal(err)
	}
	next := func() string {
		t.Helper()
		ev, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%s %s connected=%v", ev.Type, ev.GetNode().GetName(), ev.GetNode().GetConnected())
	}
	for _, want := range []string{"TYPE_PUT n1 connected=true", "TYPE_PUT n2 connected=false"} {
		if got := next(); got != want {
			t.Fatalf("initial: %s, want %s", got, want)
		}
	}
	stopStream()
	if got := next(); got != "TYPE_PUT n1 connected=false" {
		t.Fatalf("after n1's stream ended: %s", got)
	}
	s2, err := ag.StreamPlan(ctx, &skiffv1.StreamPlanRequest{Node: "n2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Recv(); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "TYPE_PUT n2 connected=true" {
		t.Fatalf("after n2's stream opened: %s", got)
	}
	if _, err := m.DeleteNode(ctx, &skiffv1.DeleteRequest{Name: "n1"}); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "TYPE_DELETE n1 connected=false" {
		t.Fatalf("after n1's delete: %s", got)
	}
}
