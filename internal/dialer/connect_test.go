package dialer

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// slowListener hands out connections the server reads from and writes to
// only delay after they were accepted: a controller busy with thousands
// of handshakes, which answers each connection late but answers it.
type slowListener struct {
	net.Listener
	delay    time.Duration
	accepted atomic.Int64
}

func (l *slowListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.accepted.Add(1)
	return &slowConn{Conn: c, ready: time.Now().Add(l.delay)}, nil
}

type slowConn struct {
	net.Conn
	ready time.Time
}

func (c *slowConn) Read(b []byte) (int, error) {
	time.Sleep(time.Until(c.ready))
	return c.Conn.Read(b)
}

func (c *slowConn) Write(b []byte) (int, error) {
	time.Sleep(time.Until(c.ready))
	return c.Conn.Write(b)
}

// TestSlowServerConnects: a connection the controller answers 6 s late
// (thousands of agents handshaking at once on its cores) is waited for,
// not abandoned and redone. With a 5 s connect timeout every attempt was
// dropped just before its answer and started over, each costing the
// controller a handshake: 5,000 agents starting together made 31,000
// failed attempts (docs/perf-log/scale.md, run C).
func TestSlowServerConnects(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &slowListener{Listener: inner, delay: 6 * time.Second}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	go func() { _ = s.Serve(l) }()
	defer s.Stop()
	conn, err := Dial(inner.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("no answer after %s and %d connections: %v", time.Since(start).Round(time.Millisecond), l.accepted.Load(), err)
	}
	if n := l.accepted.Load(); n != 1 {
		t.Errorf("%d connections for one slow answer, want 1", n)
	}
}
