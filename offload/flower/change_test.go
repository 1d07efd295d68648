package flower

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// RemoteRules of a remote endpoint are exactly the rules Compile makes
// for it: those the whole plan has and the plan without it has not.
func TestRemoteRules(t *testing.T) {
	p, reps := base()
	p.Remote["r2"] = plan.Remote{Name: "r2", Network: "blue", VTEP: netip.MustParseAddr("192.0.2.3"), MAC: "02:00:00:00:00:02", IPs: pfx("198.51.100.2/24")}
	in := Input{Reps: reps, VXLAN: "skvx"}
	all, err := Compile(p, in)
	if err != nil {
		t.Fatal(err)
	}
	without := p.Clone()
	delete(without.Remote, "r2")
	rest, err := Compile(without, in)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range all {
		if !slices.ContainsFunc(rest, func(o Rule) bool { return o.String() == r.String() }) {
			want = append(want, r.String())
		}
	}
	got, err := RemoteRules(p, in, []string{"r2", "gone"})
	if err != nil {
		t.Fatal(err)
	}
	var gs []string
	for _, r := range got {
		gs = append(gs, r.String())
	}
	slices.Sort(gs)
	slices.Sort(want)
	if len(want) != 4 || !slices.Equal(gs, want) {
		t.Errorf("RemoteRules(r2):\n%v\nwant (encap and ARP on both representors)\n%v", gs, want)
	}
	if got, err := RemoteRules(p, in, []string{"gone"}); err != nil || len(got) != 0 {
		t.Errorf("RemoteRules of a name not in the plan: %v, %v", got, err)
	}
	// A bad remote endpoint is the same error as Compile's.
	p.Remote["r2"] = plan.Remote{Name: "r2", Network: "blue", VTEP: netip.MustParseAddr("192.0.2.3"), MAC: "nope"}
	if _, err := RemoteRules(p, in, []string{"r2"}); err == nil {
		t.Error("RemoteRules of a remote endpoint with a bad MAC: no error")
	}
}
