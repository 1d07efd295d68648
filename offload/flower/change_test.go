package flower

import (
	"maps"
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
	gs := ruleStrings(got)
	slices.Sort(want)
	if len(want) != 2 || !slices.Equal(gs, want) {
		t.Errorf("RemoteRules(r2):\n%v\nwant (encap on both representors)\n%v", gs, want)
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

// MemberRules of members are exactly the filters the whole plan has and
// the plan without those members has not.
func TestMemberRules(t *testing.T) {
	p, reps := base()
	in := Input{Reps: reps, VXLAN: "skvx"}
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	p.Groups["g"] = plan.AddressGroup{Name: "g", Members: []netip.Addr{a("198.51.100.1"), a("198.51.100.10"), a("203.0.113.9")}}
	p.Groups["other"] = plan.AddressGroup{Name: "other", Members: []netip.Addr{a("203.0.113.7")}}
	p.Policies["b"] = plan.EndpointPolicy{Endpoint: "b", IngressIsolated: true, Ingress: []plan.PolicyRule{
		{Peers: []plan.PolicyPeer{{Group: "g"}, {Group: "other"}}, Ports: []plan.PolicyPort{{Protocol: "TCP", Port: 80}, {Protocol: "UDP", Port: 53}}},
	}}
	p.Policies["a"] = plan.EndpointPolicy{Endpoint: "a", EgressIsolated: true, IngressIsolated: true, Egress: []plan.PolicyRule{
		{Peers: []plan.PolicyPeer{{Group: "other"}}},
		{Peers: []plan.PolicyPeer{{Group: "g"}, {CIDR: netip.MustParsePrefix("203.0.113.0/24"), Except: []netip.Prefix{netip.MustParsePrefix("203.0.113.8/29")}}}, Ports: []plan.PolicyPort{{Protocol: "UDP", Port: 53}}},
	}, Ingress: []plan.PolicyRule{{Peers: []plan.PolicyPeer{{Group: "g"}}}}}
	in.Gateways = map[string]Gateway{"blue": {Port: "skh100", MAC: "02:00:00:00:01:00", IPs: []netip.Addr{a("198.51.100.254")}}}
	fwd, err := Compile(p, in)
	if err != nil {
		t.Fatal(err)
	}
	strs := func(rs []PolicyRule) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Dev+" "+r.String())
		}
		slices.Sort(out)
		return out
	}
	all, err := CompilePolicy(p, in, fwd)
	if err != nil {
		t.Fatal(err)
	}
	for _, ms := range [][]netip.Addr{{a("198.51.100.10")}, {a("198.51.100.1"), a("203.0.113.9")}, {a("203.0.113.9")}} {
		q := p.Clone()
		q.Groups["g"] = plan.AddressGroup{Name: "g", Members: slices.DeleteFunc(slices.Clone(p.Groups["g"].Members), func(x netip.Addr) bool { return slices.Contains(ms, x) })}
		rest, err := CompilePolicy(q, in, fwd)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		restS := strs(rest)
		for _, s := range strs(all) {
			if !slices.Contains(restS, s) {
				want = append(want, s)
			}
		}
		got, err := MemberRules(p, in, fwd, "g", ms)
		if err != nil {
			t.Fatal(err)
		}
		if len(want) == 0 || !slices.Equal(strs(got), want) {
			t.Errorf("MemberRules(g, %v):\n%v\nwant\n%v", ms, strs(got), want)
		}
		// What the datapath passes: the first forwarding rule of each
		// device stands for them all.
		one := FirstPerDevice(fwd)
		devs := map[string]bool{}
		for _, r := range fwd {
			devs[r.Dev] = true
		}
		var oneDevs []string
		for _, r := range one {
			oneDevs = append(oneDevs, r.Dev)
		}
		slices.Sort(oneDevs)
		if !slices.Equal(oneDevs, slices.Sorted(maps.Keys(devs))) || len(one) >= len(fwd) {
			t.Errorf("FirstPerDevice: devices %v of %d rules, want each of %v once", oneDevs, len(fwd), slices.Sorted(maps.Keys(devs)))
		}
		got, err = MemberRules(p, in, one, "g", ms)
		if err != nil || !slices.Equal(strs(got), want) {
			t.Errorf("MemberRules(g, %v) with one forwarding rule per device: %v\n%v\nwant\n%v", ms, err, strs(got), want)
		}
	}
}
