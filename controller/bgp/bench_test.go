package bgp

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"
)

// bigState has n endpoints with one address each, spread over 100 nodes
// and 10 networks.
func bigState(n int) State {
	var s State
	for v := 0; v < 10; v++ {
		s.Networks = append(s.Networks, Network{Name: fmt.Sprintf("net%d", v), VNI: uint32(1000 + v)})
	}
	for i := 0; i < 100; i++ {
		s.Nodes = append(s.Nodes, Node{Name: fmt.Sprintf("n%d", i), VTEP: netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)}), Connected: true})
	}
	for i := 0; i < n; i++ {
		s.Endpoints = append(s.Endpoints, Endpoint{Name: fmt.Sprintf("e%d", i), Network: fmt.Sprintf("net%d", i%10), Node: fmt.Sprintf("n%d", (i/10)%100),
			MAC: fmt.Sprintf("02:00:%02x:%02x:%02x:%02x", byte(i>>24), byte(i>>16), byte(i>>8), byte(i)),
			IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})}})
	}
	return s
}

// peerHolds returns how many EVPN paths the peer has accepted from Skiff.
func (p *peer) holds(tb testing.TB) uint64 {
	var n uint64
	err := p.srv.ListPeer(context.Background(), &api.ListPeerRequest{}, func(ap *api.Peer) {
		for _, a := range ap.GetAfiSafis() {
			n += a.GetState().GetAccepted()
		}
	})
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// BenchmarkAdvertise100k: time for Skiff's speaker to advertise 100,000
// type-2 routes (plus the type-3 routes of the state) and for an
// in-process GoBGP peer over loopback to hold them all, then to withdraw
// them. Run with -benchtime 1x.
func BenchmarkAdvertise100k(b *testing.B) {
	const n = 100000
	s := bigState(n)
	for i := 0; i < b.N; i++ {
		sp, p := pair(b, Options{}, time.Second)
		cfg := sp.Config()
		start := time.Now()
		want := cfg.Desired(s)
		computed := time.Since(start)
		if _, _, err := sp.Advertise(want); err != nil {
			b.Fatal(err)
		}
		added := time.Since(start)
		for p.holds(b) < uint64(len(want)) {
			time.Sleep(20 * time.Millisecond)
		}
		held := time.Since(start)
		start = time.Now()
		if _, _, err := sp.Advertise(nil); err != nil {
			b.Fatal(err)
		}
		for p.holds(b) > 0 {
			time.Sleep(20 * time.Millisecond)
		}
		gone := time.Since(start)
		b.ReportMetric(float64(len(want)), "routes")
		b.ReportMetric(computed.Seconds(), "desired-s")
		b.ReportMetric(added.Seconds(), "advertised-s")
		b.ReportMetric(held.Seconds(), "peer-holds-s")
		b.ReportMetric(gone.Seconds(), "withdrawn-s")
		sp.Close()
		p.stop()
	}
}

// BenchmarkReconcileUnchanged100k: what one store change costs the
// follower with 100,000 endpoints when nothing else changed: computing
// the desired set and finding no difference.
func BenchmarkReconcileUnchanged100k(b *testing.B) {
	s := bigState(100000)
	cfg := Config{ASN: 64512, RouterID: "192.0.2.1"}
	sp := &Speaker{cfg: cfg, advertised: map[string]Route{}}
	for _, r := range cfg.Desired(s) {
		sp.advertised[r.key()] = r
	}
	sp.metrics = newMetrics(nil, sp)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if a, w, err := sp.Advertise(cfg.desired(s)); err != nil || a+w != 0 {
			b.Fatalf("added %d withdrawn %d: %v", a, w, err)
		}
	}
}
