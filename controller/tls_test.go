package controller

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// startTLS runs a controller with mTLS in-process until the test ends
// (more adds to its configuration) and returns a dialer: a connection
// with a certificate for cn signed by the controller's client CA (no
// certificate for an empty cn).
func startTLS(t *testing.T, more func(*Config)) func(cn string) *grpc.ClientConn {
	ca := testkit.NewCA(t)
	sc, sk := ca.LoopbackFiles(t, "controller")
	addr := testkit.FreeAddr(t)
	cfg := Config{Listen: addr, DataDir: t.TempDir(), TLSCert: sc, TLSKey: sk, TLSClientCA: ca.File(t)}
	if more != nil {
		more(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	t.Cleanup(func() { cancel(); <-done })

	pool := ca.Pool()
	return func(cn string) *grpc.ClientConn {
		tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}
		if cn != "" {
			c, k := ca.Loopback(t, cn)
			pair, err := tls.X509KeyPair(c, k)
			if err != nil {
				t.Fatal(err)
			}
			tc.Certificates = []tls.Certificate{pair}
		}
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
}

func TestMTLSNodeMaySpeakOnlyForItself(t *testing.T) {
	conn := startTLS(t, nil)
	n1 := skiffv1.NewAgentServiceClient(conn("node:n1"))
	reg := func(name, ip string) error {
		_, err := n1.Register(context.Background(), &skiffv1.RegisterRequest{Node: &skiffv1.Node{Name: name, UnderlayIp: ip}})
		return err
	}
	var err error
	for range 300 { // wait for the controller
		if err = reg("n1", "192.0.2.1"); status.Code(err) != codes.Unavailable {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("node n1 registering itself: %v", err)
	}
	if err := reg("n2", "192.0.2.2"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("node n1 registering n2: %v, want PermissionDenied", err)
	}
	_, err = n1.CreateEndpoint(context.Background(), &skiffv1.CreateEndpointRequest{Endpoint: &skiffv1.Endpoint{Name: "e", Network: "x", Node: "n2"}})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("node n1 creating an endpoint on n2: %v, want PermissionDenied", err)
	}
	_, err = skiffv1.NewManagementServiceClient(conn("node:n1")).ListNodes(context.Background(), &skiffv1.ListRequest{})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("node certificate on the management API: %v, want PermissionDenied", err)
	}
	nodes, err := skiffv1.NewManagementServiceClient(conn("admin")).ListNodes(context.Background(), &skiffv1.ListRequest{})
	if err != nil || len(nodes.Nodes) != 1 {
		t.Fatalf("admin list nodes: %v %v", nodes, err)
	}
	_, err = skiffv1.NewManagementServiceClient(conn("")).ListNodes(context.Background(), &skiffv1.ListRequest{})
	if err == nil {
		t.Fatal("a client without a certificate was served")
	}
}
