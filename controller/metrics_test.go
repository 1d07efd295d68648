package controller

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestMetrics: the controller's /metrics counts its plan streams and
// what they sent (a snapshot to a new agent, a delta to one resuming
// with its revision), and carries the Go runtime's and the process's
// metrics.
func TestMetrics(t *testing.T) {
	addr, maddr := testkit.FreeAddr(t), testkit.FreeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	rctx, stop := context.WithCancel(ctx)
	go func() {
		done <- Run(rctx, Config{Listen: addr, DataDir: t.TempDir(), MetricsAddr: maddr}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	defer func() { stop(); <-done }()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ag := skiffv1.NewAgentServiceClient(conn)
	for {
		_, err := ag.Register(ctx, &skiffv1.RegisterRequest{Node: &skiffv1.Node{Name: "n1", UnderlayIp: "192.0.2.1"}})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("register: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	scrape := func() string {
		t.Helper()
		resp, err := http.Get("http://" + maddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// expect waits until every line is in the scrape.
	expect := func(lines ...string) {
		t.Helper()
		var got string
		for range 100 {
			got = scrape()
			missing := false
			for _, l := range lines {
				missing = missing || !strings.Contains(got, "\n"+l+"\n")
			}
			if !missing {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("/metrics lacks one of %q:\n%s", lines, got)
	}
	open := func(have int64) (context.CancelFunc, *skiffv1.PlanUpdate) {
		sctx, end := context.WithCancel(ctx)
		s, err := ag.StreamPlan(sctx, &skiffv1.StreamPlanRequest{Node: "n1", HaveRevision: have})
		if err != nil {
			t.Fatal(err)
		}
		u, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return end, u
	}
	end, u := open(0)
	if u.GetSnapshot() == nil {
		t.Fatalf("first update %v, want a snapshot", u)
	}
	expect("skiff_controller_plan_streams 1", "skiff_controller_plan_snapshots_sent_total 1", "skiff_controller_plan_deltas_sent_total 0")
	end()
	expect("skiff_controller_plan_streams 0")
	end, u = open(u.GetSnapshot().GetRevision())
	defer end()
	if u.GetDelta() == nil {
		t.Fatalf("resumed: first update %v, want a delta", u)
	}
	expect("skiff_controller_plan_streams 1", "skiff_controller_plan_snapshots_sent_total 1", "skiff_controller_plan_deltas_sent_total 1")
	if m := scrape(); !strings.Contains(m, "\ngo_goroutines ") || !strings.Contains(m, "\nprocess_resident_memory_bytes ") {
		t.Errorf("/metrics lacks the Go runtime's or the process's metrics:\n%s", m)
	}
}
