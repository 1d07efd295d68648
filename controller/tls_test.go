package controller

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T) *testCA {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "skiff-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns PEM certificate and key for cn, valid for 127.0.0.1.
func (ca *testCA) issue(t *testing.T, cn string) ([]byte, []byte) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// startTLS runs a controller with mTLS in-process until the test ends
// (more adds to its configuration) and returns a dialer: a connection
// with a certificate for cn signed by the controller's client CA (no
// certificate for an empty cn).
func startTLS(t *testing.T, more func(*Config)) func(cn string) *grpc.ClientConn {
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
	cfg := Config{Listen: addr, DataDir: filepath.Join(dir, "data"), TLSCert: write("s.crt", sc), TLSKey: write("s.key", sk),
		TLSClientCA: write("ca.crt", ca.pem)}
	if more != nil {
		more(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	t.Cleanup(func() { cancel(); <-done })

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	return func(cn string) *grpc.ClientConn {
		tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}
		if cn != "" {
			c, k := ca.issue(t, cn)
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
