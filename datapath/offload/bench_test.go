package offload

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// benchPlan is offloadbench's node: one local endpoint, n remote ones.
func benchPlan(n int) plan.Plan {
	p := plan.New("n1")
	p.UnderlayIP = netip.MustParseAddr("192.0.2.1")
	nw := plan.Network{Name: "blue", VNI: 100, MTU: 1450}
	for i := range 15 {
		nw.FloodVTEPs = append(nw.FloodVTEPs, netip.AddrFrom4([4]byte{203, 0, 113, byte(1 + i)}))
	}
	p.Networks["blue"] = nw
	p.Local["pod"] = plan.Endpoint{Name: "pod", Network: "blue", Kind: plan.KindVeth, MAC: "02:00:00:00:00:0a",
		IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.10/24")}, VFIndex: -1}
	for i := range n {
		ip := netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		r := plan.Remote{Name: fmt.Sprintf("r%05d", i), Network: "blue", VTEP: netip.AddrFrom4([4]byte{203, 0, 113, byte(1 + i%100)}),
			MAC: fmt.Sprintf("02:42:00:00:%02x:%02x", byte(i>>8), byte(i)), IPs: []netip.Prefix{netip.PrefixFrom(ip, 15)}}
		p.Remote[r.Name] = r
	}
	return p
}

// An unchanged plan of 10,000 remote endpoints: compared map by map
// (no revision) and known by its revision.
func BenchmarkClassifySame(b *testing.B) {
	p := benchPlan(10000)
	last := p.Clone()
	b.Run("compare", func(b *testing.B) {
		for b.Loop() {
			if c := classify(last, p); !c.same {
				b.Fatal("not same")
			}
		}
	})
	p.Revision, last.Revision = 7, 7
	b.Run("revision", func(b *testing.B) {
		for b.Loop() {
			if c := classify(last, p); !c.same {
				b.Fatal("not same")
			}
		}
	})
}

// One remote endpoint moved, the plan made by plan.Follow.
func BenchmarkClassifyDelta(b *testing.B) {
	p := benchPlan(10000)
	p.Revision = 7
	q := p.Clone()
	r := q.Remote["r00042"]
	r.VTEP = netip.MustParseAddr("203.0.113.200")
	if err := q.Follow(plan.Delta{Node: "n1", From: 7, Revision: 8, UpsertRemote: []plan.Remote{r}}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if c := classify(p, q); len(c.remotes) != 1 {
			b.Fatal(c)
		}
	}
}

// One member joining a group of 10,000: the lists' common head and tail
// skipped, against sets of both.
func BenchmarkMemberDiff(b *testing.B) {
	var old []netip.Addr
	for i := range 10000 {
		old = append(old, netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
	}
	cur := append(slices.Clone(old), netip.MustParseAddr("10.255.0.1"))
	b.Run("head-tail", func(b *testing.B) {
		for b.Loop() {
			if j, _ := memberDiff(old, cur); len(j) != 1 {
				b.Fatal(j)
			}
		}
	})
	b.Run("sets", func(b *testing.B) {
		for b.Loop() {
			if j, _ := setDiff(old, cur); len(j) != 1 {
				b.Fatal(j)
			}
		}
	})
}
