package dialer

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/skiff-sdn/skiff/test/testkit"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in, uri, err string
		addrs        int
	}{
		{in: "127.0.0.1:7400", uri: "127.0.0.1:7400"},
		{in: " ctrl.example:7400 ", uri: "ctrl.example:7400"},
		{in: "127.0.0.1:7400,127.0.0.2:7400", addrs: 2},
		{in: "a:1, b:2 ,c:3", addrs: 3},
		{in: "dns:///controllers.example:7400", uri: "dns:///controllers.example:7400"},
		{in: "dns://127.0.0.1:53/controllers.example:7400", uri: "dns://127.0.0.1:53/controllers.example:7400"},
		{in: "", err: "--controller: is required"},
		{in: "127.0.0.1", err: `address 1 ("127.0.0.1"): want host:port`},
		{in: "a:1,,b:2", err: "address 2 of"},
		{in: "a:1,a:1", err: `address "a:1" is given twice`},
		{in: ":7400", err: "the host is empty"},
		{in: "a:", err: "the port is empty"},
		{in: "dns:///controllers.example", err: "want host:port"},
		{in: "dns:controllers", err: "want dns:///name:port"},
		{in: "unix:///run/skiff.sock", err: "only host:port"},
	} {
		tg, err := Parse(c.in)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("Parse(%q) = %v, want error containing %q", c.in, err, c.err)
			}
		case err != nil:
			t.Errorf("Parse(%q): %v", c.in, err)
		case c.addrs > 0:
			if len(tg.Addrs) != c.addrs || !strings.HasPrefix(tg.URI, "skiff-controllers-") {
				t.Errorf("Parse(%q) = %+v, want a list of %d", c.in, tg, c.addrs)
			}
		case tg.URI != c.uri || tg.Addrs != nil:
			t.Errorf("Parse(%q) = %+v, want %q", c.in, tg, c.uri)
		}
	}
}

// serve starts a gRPC server with the health service on addr.
func serve(t *testing.T, addr string) (*grpc.Server, string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return s, l.Addr().String()
}

// answeredBy makes calls until one succeeds and returns the server's
// address. Calls may fail while the connection moves to another replica,
// as the agent's session retries its calls.
func answeredBy(t *testing.T, conn *grpc.ClientConn) string {
	t.Helper()
	var p peer.Peer
	testkit.Eventually(t, "a replica answering", 10*time.Second, testkit.NoError(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p))
		return err
	}))
	return p.Addr.String()
}

// failover checks that conn moves to the other replica when the one it
// uses stops, and back when that one stops too and the first returns.
func failover(t *testing.T, conn *grpc.ClientConn, servers map[string]*grpc.Server) {
	t.Helper()
	first := answeredBy(t, conn)
	if servers[first] == nil {
		t.Fatalf("answered by %s, not a replica", first)
	}
	servers[first].Stop()
	second := answeredBy(t, conn)
	if second == first || servers[second] == nil {
		t.Fatalf("after %s stopped, answered by %s", first, second)
	}
}

func TestListFailsOver(t *testing.T) {
	a, aAddr := serve(t, "127.0.0.1:0")
	b, bAddr := serve(t, "127.0.0.1:0")
	conn, err := Dial(aAddr+","+bAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	failover(t, conn, map[string]*grpc.Server{aAddr: a, bAddr: b})
}

// TestListSpreads checks that clients of one list do not all pick the
// same replica.
func TestListSpreads(t *testing.T) {
	_, aAddr := serve(t, "127.0.0.1:0")
	_, bAddr := serve(t, "127.0.0.1:0")
	seen := map[string]int{}
	for range 20 {
		conn, err := Dial(aAddr+","+bAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		seen[answeredBy(t, conn)]++
		conn.Close()
	}
	if len(seen) != 2 {
		t.Fatalf("20 clients all used one replica: %v", seen)
	}
}

// TestDNSFailsOver resolves a name with two addresses through a DNS server
// of the test's own (replicas on 127.0.0.1 and 127.0.0.2, one port).
func TestDNSFailsOver(t *testing.T) {
	a, aAddr := serve(t, "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(aAddr)
	b, bAddr := serve(t, "127.0.0.2:"+port)
	dns := serveDNS(t, "controllers.skiff.test.", [][4]byte{{127, 0, 0, 1}, {127, 0, 0, 2}})
	conn, err := Dial("dns://"+dns+"/controllers.skiff.test:"+port, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	failover(t, conn, map[string]*grpc.Server{aAddr: a, bAddr: b})
}

// serveDNS answers A queries for name with addrs and every other query
// with no records, on a UDP port of 127.0.0.1, until the test ends.
func serveDNS(t *testing.T, name string, addrs [][4]byte) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var q dnsmessage.Message
			if q.Unpack(buf[:n]) != nil || len(q.Questions) != 1 {
				continue
			}
			r := dnsmessage.Message{Header: dnsmessage.Header{ID: q.ID, Response: true, Authoritative: true}, Questions: q.Questions}
			qq := q.Questions[0]
			if strings.EqualFold(qq.Name.String(), name) && qq.Type == dnsmessage.TypeA {
				for _, a := range addrs {
					r.Answers = append(r.Answers, dnsmessage.Resource{
						Header: dnsmessage.ResourceHeader{Name: qq.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 1},
						Body:   &dnsmessage.AResource{A: a}})
				}
			}
			out, err := r.Pack()
			if err == nil {
				_, _ = pc.WriteTo(out, from)
			}
		}
	}()
	return pc.LocalAddr().String()
}
