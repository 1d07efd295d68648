package plan

import (
	"fmt"
	"net/netip"
	"testing"
)

// BenchmarkCloneFollow is what the agent does with each delta from the
// controller (agent/session.go accept): clone its current plan and follow
// the delta, here one remote endpoint added, on a plan of n remote
// endpoints on one network (the wide workload's shape: each plan holds
// every other node's endpoints).
func BenchmarkCloneFollow(b *testing.B) {
	for _, n := range []int{1000, 10000, 30000} {
		b.Run(fmt.Sprintf("remotes=%d", n), func(b *testing.B) {
			p := New("n1")
			p.Networks["pods"] = Network{Name: "pods", VNI: 1, MTU: 1450}
			for i := range n {
				name := fmt.Sprintf("r%05d", i)
				p.Remote[name] = Remote{Name: name, Network: "pods", Node: fmt.Sprintf("node-%d", i/30),
					VTEP: netip.AddrFrom4([4]byte{192, 0, 2, byte(i / 30 % 250)}), MAC: fmt.Sprintf("02:00:00:%02x:%02x:%02x", i>>16, (i>>8)&0xff, i&0xff),
					IPs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 15)}}
			}
			added := Remote{Name: "new", Network: "pods", Node: "node-x", VTEP: netip.MustParseAddr("192.0.2.99"), MAC: "02:ff:00:00:00:01",
				IPs: []netip.Prefix{netip.MustParsePrefix("198.19.255.250/15")}}
			b.ReportAllocs()
			for b.Loop() {
				next := p.Clone()
				if err := next.Follow(Delta{Node: "n1", From: p.Revision, Revision: p.Revision + 1, UpsertRemote: []Remote{added}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
