package controller

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// startForTest runs a controller with embedded etcd in-process and returns a
// management client.
func startForTest(tb testing.TB) skiffv1.ManagementServiceClient {
	tb.Helper()
	m, _ := startAt(tb)
	return m
}

// startAt is startForTest that also returns the controller's address.
func startAt(tb testing.TB) (skiffv1.ManagementServiceClient, string) {
	tb.Helper()
	addr := testkit.FreeAddr(tb)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Listen: addr, DataDir: tb.TempDir()}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	tb.Cleanup(func() { cancel(); <-done })
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	m := skiffv1.NewManagementServiceClient(conn)
	for i := 0; ; i++ {
		_, err := m.ListNetworks(ctx, &skiffv1.ListRequest{})
		if err == nil {
			return m, addr
		}
		if i > 300 {
			tb.Fatalf("controller not serving: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestRunServesAndStops(t *testing.T) {
	m := startForTest(t)
	if _, err := m.CreateNetwork(context.Background(), &skiffv1.CreateNetworkRequest{Network: &skiffv1.Network{Name: "blue", Vni: 1}}); err != nil {
		t.Fatal(err)
	}
	_, err := m.CreateNetwork(context.Background(), &skiffv1.CreateNetworkRequest{Network: &skiffv1.Network{Name: "red", Vni: 1}})
	if err == nil {
		t.Fatal("duplicate VNI accepted")
	}
}

// BenchmarkAllocate measures endpoint creation (one IP and one MAC
// allocated in an etcd transaction) through the gRPC API with the embedded
// etcd, from 16 concurrent clients.
func BenchmarkAllocate(b *testing.B) {
	m := startForTest(b)
	ctx := context.Background()
	if _, err := m.CreateNetwork(ctx, &skiffv1.CreateNetworkRequest{Network: &skiffv1.Network{Name: "blue", Vni: 100}}); err != nil {
		b.Fatal(err)
	}
	if _, err := m.CreateSubnet(ctx, &skiffv1.CreateSubnetRequest{Subnet: &skiffv1.Subnet{Name: "blue-v4", Network: "blue", Cidr: "10.64.0.0/14"}}); err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	b.SetParallelism(8) // 8 x GOMAXPROCS goroutines
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			_, err := m.CreateEndpoint(ctx, &skiffv1.CreateEndpointRequest{Endpoint: &skiffv1.Endpoint{
				Name: fmt.Sprintf("ep-%d", i), Network: "blue", Node: fmt.Sprintf("node-%d", i%100)}})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "allocs/s")
}
