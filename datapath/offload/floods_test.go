package offload

import (
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl/nltest"
	"github.com/skiff-sdn/skiff/internal/plan"
)

// A VTEP joining a network with its endpoint, on the fake, with encap
// rules on demand: the VXLAN device's flood entry for it and the
// endpoint's answers in the bridge alone (no whole Apply: no link
// listed, no rule compiled: the phases say so), the new VTEP's next hop resolved; the node
// then holds what a whole Apply of that plan makes. The VTEP leaving
// takes them out again.
func TestVTEPJoinFake(t *testing.T) {
	vtep4 := netip.MustParseAddr("192.0.2.4")
	ports := map[string]Port{"a": {Rep: "pf0vf0"}, "b": {Rep: "pf0vf1"}}
	a := local("a", "blue", "02:00:00:00:00:0a", "198.51.100.10/24")
	b := local("b", "blue", "02:00:00:00:00:0b", "198.51.100.11/24")
	r1 := remote("r1", "02:00:00:00:00:01", "198.51.100.5/24", vtep2)
	r4 := remote("r4", "02:00:00:00:00:04", "198.51.100.7/24", vtep4)
	joined := blueNet
	joined.FloodVTEPs = []netip.Addr{vtep2, vtep4}
	before := offloadPlan([]plan.Network{blueNet}, []plan.Endpoint{a, b}, r1)
	after := offloadPlan([]plan.Network{joined}, []plan.Endpoint{a, b}, r1, r4)

	// What a whole Apply of each plan makes, on nodes of their own.
	whole := func(p plan.Plan) string {
		w, _, dp := offloadNodeWith(t, ports, &LearnOptions{State: filepath.Join(t.TempDir(), "sends.json")})
		for range 2 {
			if err := dp.Apply(p); err != nil {
				t.Fatal(err)
			}
		}
		return nltest.ShortCookies(w.NS("").State())
	}
	wantBefore, wantAfter := whole(before), whole(after)
	if !strings.Contains(wantAfter, "192.0.2.4") {
		t.Fatalf("a whole Apply of the joined plan holds nothing for 192.0.2.4:\n%s", wantAfter)
	}

	w, _, dp := offloadNodeWith(t, ports, &LearnOptions{State: filepath.Join(t.TempDir(), "sends.json")})
	ns := w.NS("")
	for range 2 {
		if err := dp.Apply(before); err != nil {
			t.Fatal(err)
		}
	}
	listings := dp.listings
	for _, step := range []struct {
		name   string
		p      plan.Plan
		want   string
		writes int
	}{
		// The flood entry, r4's entries and neighbour in the bridge,
		// and (joining) the new VTEP's ARP probe: no rule written.
		{"192.0.2.4 joins blue with r4", after, wantAfter, 4},
		{"192.0.2.4 leaves blue with r4", before, wantBefore, 4},
	} {
		w0 := dp.Writes()
		if err := dp.Apply(step.p); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got := dp.Writes() - w0; got != step.writes {
			t.Errorf("%s: %d writes, want %d", step.name, got, step.writes)
		}
		var phases []string
		for _, ph := range dp.Phases() {
			phases = append(phases, ph.Name)
		}
		if !slices.Contains(phases, "floods") || slices.Contains(phases, "pairs") {
			t.Errorf("%s: phases %v, want the flood lists changed alone (floods, no whole Apply's pairs)", step.name, phases)
		}
		if m := nltest.Mismatch(step.want, nltest.ShortCookies(ns.State())); m != "" {
			t.Errorf("%s: the node does not hold what a whole Apply makes: %s", step.name, m)
		}
	}
	if dp.listings != listings {
		t.Errorf("the VTEP's changes listed the links %d times: a whole Apply ran", dp.listings-listings)
	}
	if n := ns.Probes("eth0", vtep4); n != 1 {
		t.Errorf("ARP probes for 192.0.2.4: %d, want 1", n)
	}
}
