package flower

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// wide is a node of a network with 250 local endpoints and one remote
// endpoint on each of vteps other nodes.
func wide(vteps int) (plan.Plan, map[string]string) {
	p := plan.New("n1")
	p.UnderlayIP = netip.MustParseAddr("192.0.2.1")
	n := plan.Network{Name: "blue", VNI: 100}
	reps := map[string]string{}
	for i := range 250 {
		name := fmt.Sprintf("e%d", i)
		p.Local[name] = plan.Endpoint{Name: name, Network: "blue", MAC: fmt.Sprintf("02:00:00:00:%02x:%02x", i>>8, i&0xff),
			IPs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 16)}, VFIndex: -1}
		reps[name] = fmt.Sprintf("rep%d", i)
	}
	for i := range vteps {
		v := netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		n.FloodVTEPs = append(n.FloodVTEPs, v)
		name := fmt.Sprintf("r%d", i)
		p.Remote[name] = plan.Remote{Name: name, Network: "blue", VTEP: v, MAC: fmt.Sprintf("02:01:00:00:%02x:%02x", i>>8, i&0xff),
			IPs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), 16)}}
	}
	p.Networks["blue"] = n
	return p, reps
}

// With Sends, a representor holds an encap rule for the remote endpoints
// its endpoint sent to, whatever the number of nodes in the network;
// without, one for every remote endpoint.
func TestCompileSends(t *testing.T) {
	sends := map[string][]string{"e0": {"r0", "r7", "nosuch"}, "e1": {"r7"}}
	count := func(vteps int, limit bool) map[string]int {
		t.Helper()
		p, reps := wide(vteps)
		in := Input{Reps: reps, VXLAN: "skvx"}
		if limit {
			in.Sends = func(ep string) []string { return sends[ep] }
		}
		return perDevice(t, p, in)
	}
	small, large := count(10, true), count(5000, true)
	if !maps.Equal(small, large) {
		t.Errorf("with Sends, rules per device differ between 10 and 5,000 nodes")
	}
	// A local and an ARP rule per other local endpoint, and an encap
	// rule per remote endpoint sent to.
	if large["rep0"] != 2*249+2 || large["rep1"] != 2*249+1 || large["rep2"] != 2*249 {
		t.Errorf("rep0, rep1, rep2 hold %d, %d, %d rules; want %d, %d, %d", large["rep0"], large["rep1"], large["rep2"], 2*249+2, 2*249+1, 2*249)
	}
	if all := count(5000, false); all["rep2"] != 2*249+5000 {
		t.Errorf("without Sends rep2 holds %d rules, want %d", all["rep2"], 2*249+5000)
	}
}

// SendRules of pairs are exactly the rules Compile adds when Sends names
// them too.
func TestSendRules(t *testing.T) {
	p, reps := wide(20)
	before := map[string][]string{"e0": {"r1"}}
	after := map[string][]string{"e0": {"r1", "r2"}, "e5": {"r3", "r4"}}
	compile := func(s map[string][]string) []string {
		t.Helper()
		rs, err := Compile(p, Input{Reps: reps, VXLAN: "skvx", Sends: func(ep string) []string { return s[ep] }})
		if err != nil {
			t.Fatal(err)
		}
		return ruleStrings(rs)
	}
	old := compile(before)
	var want []string
	for _, r := range compile(after) {
		if !slices.Contains(old, r) {
			want = append(want, r)
		}
	}
	added := map[string][]string{"e0": {"r2"}, "e5": {"r3", "r4", "gone"}, "gone": {"r5"}}
	got, err := SendRules(p, Input{Reps: reps, VXLAN: "skvx"}, added)
	if err != nil {
		t.Fatal(err)
	}
	gs := ruleStrings(got)
	slices.Sort(want)
	if len(want) != 3 || !slices.Equal(gs, want) {
		t.Errorf("SendRules:\n%v\nwant\n%v", gs, want)
	}
	// A remote endpoint of another network gives none.
	p.Networks["red"] = plan.Network{Name: "red", VNI: 200}
	p.Remote["x"] = plan.Remote{Name: "x", Network: "red", VTEP: netip.MustParseAddr("198.51.100.9"), MAC: "02:09:00:00:00:01"}
	if got, err := SendRules(p, Input{Reps: reps, VXLAN: "skvx"}, map[string][]string{"e0": {"x"}}); err != nil || len(got) != 0 {
		t.Errorf("SendRules of another network's remote endpoint: %v, %v", got, err)
	}
	// A refused network is not incremental.
	p.Remote["bad"] = plan.Remote{Name: "bad", Network: "blue", VTEP: netip.MustParseAddr("2001:db8::1"), MAC: "02:09:00:00:00:02"}
	if _, err := SendRules(p, Input{Reps: reps, VXLAN: "skvx"}, map[string][]string{"e0": {"bad"}}); err == nil {
		t.Error("SendRules of a refused network: no error")
	}
}

// ruleStrings is rs as strings, sorted.
func ruleStrings(rs []Rule) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.String())
	}
	slices.Sort(out)
	return out
}

// perDevice is the number of rules Compile makes of p on each device.
func perDevice(t *testing.T, p plan.Plan, in Input) map[string]int {
	t.Helper()
	rs, err := Compile(p, in)
	if err != nil {
		t.Fatalf("%d remote endpoints: %v", len(p.Remote), err)
	}
	per := map[string]int{}
	for _, r := range rs {
		per[r.Dev]++
	}
	return per
}
