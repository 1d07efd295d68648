package controller

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/skiff-sdn/skiff/controller/kube"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// startKube runs the Kubernetes adapter beside the API: it is a client of
// the ManagementService like any other, over an in-process connection (a
// gRPC server of its own on a memory listener, without TLS, reachable
// from this process only). It returns once the adapter's configuration is
// loaded; the adapter runs until ctx ends.
func startKube(ctx context.Context, cfg kube.Config, mgmt skiffv1.ManagementServiceServer, reg prometheus.Registerer, log *slog.Logger) (func(), error) {
	rc, err := kube.RESTConfig(cfg.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	skiffv1.RegisterManagementServiceServer(gs, mgmt)
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///skiff-controller", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		gs.Stop()
		return nil, fmt.Errorf("controller: in-process connection: %w", err)
	}
	cfg.Registerer = reg
	ad, err := kube.New(cfg, rc, skiffv1.NewManagementServiceClient(conn), log)
	if err != nil {
		conn.Close()
		gs.Stop()
		return nil, fmt.Errorf("controller: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := ad.Run(ctx); err != nil {
			log.Error("kubernetes adapter stopped", "err", err)
		}
	}()
	return func() { <-done; conn.Close(); gs.Stop() }, nil
}
