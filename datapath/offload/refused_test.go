package offload

import (
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl/nltest"
	"github.com/skiff-sdn/skiff/internal/nl/tc"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
)

// A network the offload compile cannot express (a remote endpoint behind
// an IPv6 VTEP, which this IPv4 tunnel cannot reach) is refused alone, on the fake: the Apply succeeds,
// blue's rules stay exactly as they were and keep changing in place,
// red's are removed; with a NetworkPolicy isolating c, c is cut off and
// not ready with the reason, which its rule states (Counters, what
// skiffctl shows) and RefusedNetworks give too; without the policy, c
// is forwarded in software by the replication bridge (ready, its rule
// state "software"); without that endpoint, red's rules come back.
func TestRefusedNetworkFake(t *testing.T) {
	w, dp, a, b, c, r1, r2 := threeEndpoints(t)
	ns := w.NS("")
	r2.VTEP = vtep2
	locals := []plan.Endpoint{a, b, c}
	// A remote endpoint of red behind an IPv6 VTEP (a node whose
	// underlay is IPv6): this node's tunnel is IPv4 and cannot reach it.
	rx := remote("rx", "02:00:00:00:00:1c", "203.0.113.20/24", netip.MustParseAddr("2001:db8::2"))
	rx.Network = "red"
	// red refused, with a policy isolating c both ways: nothing of it
	// either (its filters would lead into rules that are not there).
	refused := func(remotes ...plan.Remote) plan.Plan {
		p := offloadPlan([]plan.Network{blueNet, redNet}, locals, append(remotes, rx)...)
		p.Policies["c"] = plan.EndpointPolicy{Endpoint: "c", IngressIsolated: true, EgressIsolated: true}
		return p
	}
	// red refused without the policy: c falls back to software.
	soft := func(remotes ...plan.Remote) plan.Plan {
		p := refused(remotes...)
		delete(p.Policies, "c")
		return p
	}
	// Compared without filter handles: these steps reach the states of
	// TestTransitionsFake in another order, and the kernel's handles
	// follow the order of writes.
	handles := regexp.MustCompile(` handle 0x[0-9a-f]+`)
	show := func(s string) string {
		ls := strings.Split(handles.ReplaceAllString(nltest.ShortCookies(s), ""), "\n")
		for i := 0; i < len(ls); {
			j := i
			for j < len(ls) && strings.HasPrefix(ls[j], "filter ") {
				j++
			}
			slices.Sort(ls[i:j]) // each run of filters, without the order of handles
			i = max(j, i+1)
		}
		return strings.Join(ls, "\n")
	}
	bothOf := func(blue replicated, rules ...string) string {
		return show(bridged(nltest.Expect(append([]string{offloadForeign, reps(3), blueLinks, blueQdiscs, blueRules(false), red,
			isolation(none("skg100"), none("skg200"))}, rules...)...), blue, redRepl))
	}
	// red's gateway stays (and the node's isolation of it); nothing of
	// red's in the eswitch. blue's VLAN device keeps the MTU the bridge
	// had with red's port (the kernel lowers a VLAN device's MTU with
	// its link's, never raises it).
	refusedOf := func(blue replicated, rules ...string) string {
		return show(strings.Replace(bridged(nltest.Expect(append([]string{offloadForeign, reps(3), blueLinks, blueQdiscs, blueRules(false),
			strings.Join(strings.Split(red, "\n")[:5], "\n"), isolation(none("skg100"), none("skg200"))}, rules...)...), blue),
			"link skrb.1 vlan mtu 1450", "link skrb.1 vlan mtu 1400", 1))
	}
	both, redRefused := bothOf(blueRepl), refusedOf(blueRepl)
	// red forwarded in software: red's gateway port and pf0vf2 on the
	// bridge in VLAN 2 with c's and the gateway's entries (none for rx,
	// whose VTEP the tunnel does not reach), no filter of red's.
	softOf := func(blue replicated, rules ...string) string {
		return show(bridged(nltest.Expect(append([]string{offloadForeign, reps(3), blueLinks, blueQdiscs, blueRules(false),
			strings.Join(strings.Split(red, "\n")[:5], "\n"), isolation(none("skg100"), none("skg200"))}, rules...)...), blue, redRepl))
	}
	ready := func(want map[string]string) func(t *testing.T) {
		return func(t *testing.T) {
			t.Helper()
			for ep, why := range want {
				ok, reason := dp.Ready(ep)
				if ok != (why == "") || !strings.Contains(reason, why) {
					t.Errorf("Ready(%s) = %v %q, want ready %v with a reason containing %q", ep, ok, reason, why == "", why)
				}
			}
		}
	}
	const reason = `network red is not offloaded on this node: remote[rx].vtep: "2001:db8::2" is not an IPv4 address`
	refusedState := func(t *testing.T) {
		t.Helper()
		ready(map[string]string{"a": "", "b": "", "c": reason})(t)
		if got := dp.RefusedNetworks(); len(got) != 1 || !strings.Contains(got["red"], "remote[rx].vtep") {
			t.Errorf("RefusedNetworks() = %q", got)
		}
		cs, err := dp.Counters(refused(r1))
		if err != nil {
			t.Fatal(err)
		}
		rs := cs.Endpoints["c"].Rules
		if len(rs) != 1 || rs[0].Kind != RefusedKind || rs[0].Device != "pf0vf2" || rs[0].State != "" || !strings.HasPrefix(rs[0].Reason, reason) ||
			!strings.Contains(rs[0].Reason, "a NetworkPolicy isolates endpoint c") {
			t.Errorf("c's rule states %+v, want one %s on pf0vf2 with the reason (cut off: a policy isolates it)", rs, RefusedKind)
		}
		if len(cs.Endpoints["a"].Rules) == 0 {
			t.Errorf("a has no rule states")
		}
	}
	apply := func(p plan.Plan) func() error { return func() error { return dp.Apply(p) } }
	nltest.Table{NS: ns, Writes: dp.Writes, Show: show}.Run(t, []nltest.Step{
		{Name: "blue and red", Apply: apply(offloadPlan([]plan.Network{blueNet, redNet}, locals, r1)), Want: both, Writes: nltest.AnyWrites,
			After: ready(map[string]string{"a": "", "b": "", "c": ""})},
		{Name: "red has a remote endpoint behind an IPv6 VTEP: refused alone, its rules and replication removed, blue's untouched",
			Apply: apply(refused(r1)), Want: redRefused, Writes: nltest.AnyWrites, After: refusedState},
		{Name: "the same plan again: nothing written", Apply: apply(refused(r1)), Want: redRefused, Writes: 0},
		{Name: "a remote endpoint of blue: its rules alone, in place", Apply: apply(refused(r1, r2)),
			Want: refusedOf(blueWithR2("192.0.2.2"), r2Rules("192.0.2.2")), Writes: 5, After: refusedState},
		{Name: "red still refused, without the policy: c forwarded in software", Apply: apply(soft(r1, r2)),
			Want: softOf(blueWithR2("192.0.2.2"), r2Rules("192.0.2.2")), Writes: nltest.AnyWrites, After: func(t *testing.T) {
				ready(map[string]string{"a": "", "b": "", "c": ""})(t)
				cs, err := dp.Counters(soft(r1, r2))
				if err != nil {
					t.Fatal(err)
				}
				rs := cs.Endpoints["c"].Rules
				if len(rs) != 1 || rs[0].Kind != RefusedKind || rs[0].State != "software" || !strings.HasPrefix(rs[0].Reason, reason) ||
					!strings.Contains(rs[0].Reason, "forwarded in software") {
					t.Errorf("c's rule states %+v, want one %s in software with the reason", rs, RefusedKind)
				}
			}},
		{Name: "the same plan again: nothing written", Apply: apply(soft(r1, r2)), Want: softOf(blueWithR2("192.0.2.2"), r2Rules("192.0.2.2")), Writes: 0},
		{Name: "red without it: its rules again", Apply: apply(offloadPlan([]plan.Network{blueNet, redNet}, locals, r1, r2)),
			Want: bothOf(blueWithR2("192.0.2.2"), r2Rules("192.0.2.2")), Writes: nltest.AnyWrites, After: func(t *testing.T) {
				ready(map[string]string{"a": "", "b": "", "c": ""})(t)
				if got := dp.RefusedNetworks(); len(got) != 0 {
					t.Errorf("RefusedNetworks() = %q after red fits again", got)
				}
			}},
	})
}

// A refused network's endpoint whose VF is stood in for by a veth falls
// back to software through it: what the stand-in sends enters the
// representor (a chain-0 filter leads to the chain holding that
// redirect: without it nothing the endpoint sends reaches the bridge),
// and what the bridge sends the representor goes to the stand-in.
func TestRefusedStandInFake(t *testing.T) {
	w, _, dp := offloadNodeWith(t, map[string]Port{"c": {Rep: "pf0vf2", Target: "skt2"}}, nil)
	ns := w.NS("")
	ns.AddDevice(nltest.Device{Name: "skt2", Up: true})
	c := local("c", "red", "02:00:00:00:00:0c", "203.0.113.10/24")
	rx := remote("rx", "02:00:00:00:00:1c", "203.0.113.20/24", netip.MustParseAddr("2001:db8::2"))
	rx.Network = "red"
	p := offloadPlan([]plan.Network{redNet}, []plan.Endpoint{c}, rx)
	for range 2 {
		if err := dp.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := dp.RefusedNetworks()["red"]; !ok {
		t.Fatalf("red not refused: %v", dp.RefusedNetworks())
	}
	var entry, redirect bool
	for _, f := range ns.Filters("skt2") {
		for _, a := range f.Actions {
			switch {
			case f.Chain == flower.ChainEntry && a.Kind == tc.KindGact && a.Verdict == tc.Goto(flower.ChainForward):
				entry = true
			case f.Chain == flower.ChainForward && a.Kind == tc.KindMirred && a.MirredOp == tc.TCA_INGRESS_REDIR:
				redirect = true
			}
		}
	}
	if !entry || !redirect {
		t.Errorf("the stand-in's ingress: a chain-0 filter to chain %d %v, the redirect into the representor %v; want both:\n%+v",
			flower.ChainForward, entry, redirect, ns.Filters("skt2"))
	}
}
