package localapi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// backend records requests and answers from a table.
type backend struct {
	mu      sync.Mutex
	created []CreateRequest
	deleted []string
	fail    error
}

func (b *backend) Create(_ context.Context, r CreateRequest) (*CreateResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail != nil {
		return nil, b.fail
	}
	b.created = append(b.created, r)
	return &CreateResponse{Name: r.Name, Network: r.Network, HostIf: "skp1", IfName: r.IfName, MAC: "02:00:00:00:00:01", MTU: 1450,
		IPs: []string{"198.51.100.2/24"}, Gateways: []string{"198.51.100.1"}, Revision: 7}, nil
}

func (b *backend) Delete(_ context.Context, r DeleteRequest) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.deleted = append(b.deleted, r.Name)
	return b.fail
}

func (b *backend) List() []Endpoint {
	return []Endpoint{{Name: "pod-a", Network: "blue", Owner: "pod:default/a", Labels: map[string]string{"app": "a"}, HostIf: "skp1"}}
}

func (b *backend) Status() Status {
	return Status{Ready: true, Connected: true, Revision: 7, Applied: 6}
}

func serve(t *testing.T, b Backend, l *Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = Server{Backend: b}.Serve(ctx, l) }()
	t.Cleanup(func() { cancel(); <-done })
}

// exercise runs every call through c against b.
func exercise(t *testing.T, c *Client, b *backend) {
	ctx := context.Background()
	vf := 3
	req := CreateRequest{Name: "pod-a", Network: "blue", NetNS: "/proc/1/ns/net", IfName: "eth0", MTU: 1400,
		Labels: map[string]string{"app": "a"}, Owner: "pod:default/a", Namespace: "default", PF: "eth1", VF: &vf}
	r, err := c.Create(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want := &CreateResponse{Name: "pod-a", Network: "blue", HostIf: "skp1", IfName: "eth0", MAC: "02:00:00:00:00:01", MTU: 1450,
		IPs: []string{"198.51.100.2/24"}, Gateways: []string{"198.51.100.1"}, Revision: 7}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("create: %+v, want %+v", r, want)
	}
	if got := b.created[0]; !reflect.DeepEqual(got, req) {
		t.Fatalf("the backend got %+v, the client sent %+v", got, req)
	}
	if err := c.Delete(ctx, "pod-a"); err != nil || b.deleted[0] != "pod-a" {
		t.Fatalf("delete: %v %v", err, b.deleted)
	}
	eps, err := c.List(ctx)
	if err != nil || len(eps) != 1 || eps[0].Owner != "pod:default/a" || eps[0].Labels["app"] != "a" {
		t.Fatalf("list: %+v %v", eps, err)
	}
	s, err := c.Status(ctx)
	if err != nil || !s.Ready || s.Revision != 7 || s.Applied != 6 {
		t.Fatalf("status: %+v %v", s, err)
	}
	// Every code crosses the wire with its message.
	for _, code := range []string{CodeInvalid, CodeNotFound, CodeExists, CodeExhausted, CodeUnavailable, CodeForbidden, CodeFailed} {
		b.fail = &Error{Code: code, Message: "network: \"x\" " + code}
		_, err := c.Create(ctx, req)
		var e *Error
		if !errors.As(err, &e) || e.Code != code || e.Message != "network: \"x\" "+code {
			t.Errorf("code %s: got %v", code, err)
		}
	}
	b.fail = errors.New("plain")
	if err := c.Delete(ctx, "x"); err == nil || err.(*Error).Code != CodeFailed {
		t.Errorf("a plain backend error: %v", err)
	}
	b.fail = nil
	if err := c.Delete(ctx, ""); err == nil || err.(*Error).Code != CodeInvalid {
		t.Errorf("delete without a name: %v", err)
	}
}

func TestUnixSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the unix transport serves root only: run as root (make test)")
	}
	sock := filepath.Join(t.TempDir(), "run", "agent.sock")
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(sock)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v %v", st.Mode().Perm(), err)
	}
	b := &backend{}
	serve(t, b, l)
	c := NewClient(sock)
	defer c.Close()
	exercise(t, c, b)
}

func TestNoAgent(t *testing.T) {
	c := NewClient(filepath.Join(t.TempDir(), "none.sock"))
	defer c.Close()
	_, err := c.Status(context.Background())
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeUnavailable || !strings.Contains(e.Message, "none.sock") {
		t.Fatalf("no agent: %v", err)
	}
}

func TestTCPWithMutualTLS(t *testing.T) {
	ca := testkit.NewCA(t)
	cert, key := ca.LoopbackFiles(t, "node:dpu1")
	l, err := ListenTLS("127.0.0.1:0", TLS{Cert: cert, Key: key, ClientCA: ca.File(t), Allow: []string{"node:host1"}})
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{}
	serve(t, b, l)
	addr := l.Addr().String()

	hc, hk := ca.LoopbackFiles(t, "node:host1")
	c, err := Dial(addr, ClientTLS{CA: ca.File(t), Cert: hc, Key: hk})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	exercise(t, c, b)

	// Another node's certificate, from the same CA: refused by name.
	oc, ok := ca.LoopbackFiles(t, "node:host2")
	other, err := Dial(addr, ClientTLS{CA: ca.File(t), Cert: oc, Key: ok})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	_, err = other.Create(context.Background(), CreateRequest{Name: "x"})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeForbidden || !strings.Contains(e.Message, "node:host2") {
		t.Fatalf("a node that is not allowed: %v", err)
	}

	// A certificate from another CA: no connection at all.
	ca2 := testkit.NewCA(t)
	fc, fk := ca2.LoopbackFiles(t, "node:host1")
	forged, err := Dial(addr, ClientTLS{CA: ca.File(t), Cert: fc, Key: fk})
	if err != nil {
		t.Fatal(err)
	}
	defer forged.Close()
	if _, err := forged.Status(context.Background()); !errors.As(err, &e) || e.Code != CodeUnavailable {
		t.Fatalf("a certificate of another CA: %v", err)
	}
	if len(b.created) != 1 {
		t.Fatalf("refused callers reached the backend: %d creates", len(b.created))
	}

	// Misconfiguration is an error naming what is missing.
	if _, err := ListenTLS("127.0.0.1:0", TLS{Cert: cert, Key: key, ClientCA: ca.File(t)}); err == nil || !strings.Contains(err.Error(), "allow") {
		t.Errorf("no allowed clients: %v", err)
	}
	if _, err := Dial(addr, ClientTLS{CA: ca.File(t)}); err == nil {
		t.Error("a client without a certificate")
	}
}
