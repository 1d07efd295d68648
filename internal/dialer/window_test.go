package dialer

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// frameCounter counts the HTTP/2 frames a client sends on the connections
// a listener accepts.
type frameCounter struct {
	net.Listener
	pings, windowUpdates atomic.Int64
}

func (l *frameCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	r, w := io.Pipe()
	go l.count(r)
	return &teeConn{Conn: c, w: w}, nil
}

// count parses what the client sent: the preface, then frames.
func (l *frameCounter) count(r *io.PipeReader) {
	defer r.Close()
	if _, err := io.ReadFull(r, make([]byte, len(http2.ClientPreface))); err != nil {
		return
	}
	fr := http2.NewFramer(nil, r)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.PingFrame:
			if !f.IsAck() {
				l.pings.Add(1)
			}
		case *http2.WindowUpdateFrame:
			l.windowUpdates.Add(1)
		}
	}
}

// teeConn copies what is read from the client to the counter.
type teeConn struct {
	net.Conn
	w *io.PipeWriter
}

func (c *teeConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		_, _ = c.w.Write(b[:n])
	}
	if err != nil {
		c.w.CloseWithError(err)
	}
	return n, err
}

// watch streams n health status changes, one every 2 ms (the way plan
// deltas come, one per interval), to a client dialled with opts, and
// returns the pings and window updates the client sent.
func watch(t *testing.T, n int, dial func(addr string) (*grpc.ClientConn, error)) (pings, updates int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fc := &frameCounter{Listener: l}
	s := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(s, hs)
	go func() { _ = s.Serve(fc) }()
	defer s.Stop()
	conn, err := dial(l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hs.SetServingStatus("plan", healthpb.HealthCheckResponse_SERVING)
	st, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: "plan"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	status := []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_SERVING}
	for i := range n {
		hs.SetServingStatus("plan", status[i%2])
		if _, err := st.Recv(); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	cancel()
	conn.Close()
	s.Stop()
	return fc.pings.Load(), fc.windowUpdates.Load()
}

// TestStaticWindowsSendNoPings: a stream of spaced messages makes gRPC's
// default client ping for most of them (bandwidth-delay estimation), and
// the connection Dial makes ping for none (nor sends window updates).
func TestStaticWindowsSendNoPings(t *testing.T) {
	const n = 100
	pings, updates := watch(t, n, func(addr string) (*grpc.ClientConn, error) {
		return grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	})
	t.Logf("gRPC's default windows: %d messages, %d pings, %d window updates", n, pings, updates)
	if pings < n/4 {
		t.Fatalf("gRPC's default windows: %d pings for %d messages; the counter does not see them", pings, n)
	}
	pings, updates = watch(t, n, func(addr string) (*grpc.ClientConn, error) {
		return Dial(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	})
	t.Logf("Dial: %d messages, %d pings, %d window updates", n, pings, updates)
	// One window update: the connection's window announced at the start.
	if pings != 0 || updates > 1 {
		t.Fatalf("Dial: %d pings and %d window updates for %d small messages, want none but the initial one", pings, updates, n)
	}
}
