package plan

import (
	"fmt"
	"net/netip"
	"testing"
)

// BenchmarkCloneFollow is what the agent does with each delta from the
// controller (agent/session.go accept): copy its current plan and follow
// the delta (one remote endpoint added; one endpoint's policy), on a plan
// of n remote endpoints on one network (the wide workload's shape: each
// plan holds every other node's endpoints), with a whole Clone (the agent
// before) and with CloneFor (the maps the delta changes).
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
			for _, c := range []struct {
				name  string
				delta Delta
				clone func(Plan, Delta) Plan
			}{
				{"remote/Clone", Delta{UpsertRemote: []Remote{added}}, func(p Plan, _ Delta) Plan { return p.Clone() }},
				{"remote/CloneFor", Delta{UpsertRemote: []Remote{added}}, Plan.CloneFor},
				{"policy/Clone", Delta{UpsertPolicies: []EndpointPolicy{{Endpoint: "a", IngressIsolated: true}}}, func(p Plan, _ Delta) Plan { return p.Clone() }},
				{"policy/CloneFor", Delta{UpsertPolicies: []EndpointPolicy{{Endpoint: "a", IngressIsolated: true}}}, Plan.CloneFor},
			} {
				b.Run(c.name, func(b *testing.B) {
					d := c.delta
					d.Node, d.From, d.Revision = "n1", p.Revision, p.Revision+1
					b.ReportAllocs()
					for b.Loop() {
						next := c.clone(p, d)
						if err := next.Follow(d); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}
