package controller

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/skiff-sdn/skiff/controller/bgp"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// TestBGPServiceRefusesAgents: with mTLS, an agent's certificate may not
// read the BGP tables; an operator's may.
func TestBGPServiceRefusesAgents(t *testing.T) {
	ca := newCA(t)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sc, sk := ca.issue(t, "controller")
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Listen: addr, DataDir: filepath.Join(dir, "data"), TLSCert: write("s.crt", sc), TLSKey: write("s.key", sk),
			TLSClientCA: write("ca.crt", ca.pem), BGP: &bgp.Config{ASN: 64512, RouterID: "192.0.2.254", ListenPort: -1}},
			slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	defer func() { cancel(); <-done }()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	client := func(cn string) skiffv1.BgpServiceClient {
		c, k := ca.issue(t, cn)
		pair, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair}})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return skiffv1.NewBgpServiceClient(cc)
	}
	admin := client("admin")
	var (
		r   *skiffv1.ListBgpPeersResponse
		err error
	)
	for range 300 { // wait for the controller
		if r, err = admin.ListBgpPeers(context.Background(), &skiffv1.ListBgpPeersRequest{}); status.Code(err) != codes.Unavailable {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || r.GetLocalAsn() != 64512 || r.GetRouterId() != "192.0.2.254" || len(r.GetPeers()) != 0 {
		t.Fatalf("admin: %v %v", r, err)
	}
	if _, err := client("node:n1").ListBgpRoutes(context.Background(), &skiffv1.ListBgpRoutesRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("agent certificate on the BGP API: %v, want PermissionDenied", err)
	}
}
