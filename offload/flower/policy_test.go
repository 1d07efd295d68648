package flower

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// renderPolicy: "dev chain prio match: actions [endpoint direction rule]"
// with the priorities by name.
func renderPolicy(rs []PolicyRule) []string {
	names := map[uint16]string{PrioDeny: "DENY", PrioOpen: "OPEN", PrioDeny6: "DENY6", PrioOpen6: "OPEN6"}
	var out []string
	for _, r := range rs {
		prio, ok := names[r.Prio]
		switch {
		case ok:
		case r.Chain == ChainEntry && r.Prio == PrioEntryCt:
			prio = "CT"
		case r.Chain == ChainEntry && r.Prio == PrioEntryIPv6:
			prio = "V6"
		case r.Chain == ChainEntry && r.Prio == PrioEntryAll:
			prio = "ALL"
		case r.Chain == ChainEgress && r.Prio == PrioTracked:
			prio = "EST"
		case r.Chain == ChainEgress && r.Prio == PrioRelated:
			prio = "REL"
		case r.Chain == ChainEgress && r.Prio == PrioTracked6:
			prio = "EST6"
		case r.Chain == ChainEgress && r.Prio == PrioRelated6:
			prio = "REL6"
		case r.Chain == ChainEgress && r.Prio == PrioND:
			prio = "ND"
		case r.Prio >= PrioRule6 && r.Prio < PrioDeny:
			prio = "S" + string(rune('0'+r.Prio-PrioRule6))
		case r.Prio >= PrioRule && r.Prio < PrioDeny:
			prio = "R" + string(rune('0'+r.Prio-PrioRule))
		}
		m := strings.ReplaceAll(r.Match.String(), " ct_state +trk+new", " NEW")
		s := r.Dev + " " + string(rune('0'+r.Chain)) + " " + prio + " " + m + ":"
		for i, a := range r.Actions {
			if i > 0 {
				s += ","
			}
			s += " " + a.String()
		}
		if r.Endpoint != "" {
			s += " [" + r.Endpoint + " " + r.Direction + " " + string(rune('0'+r.RuleIndex+1)) + "]"
		}
		out = append(out, s)
	}
	return out
}

// The pipeline's filters that do not depend on the policy.
var (
	entryAll = []string{
		"repa 0 ALL all: goto chain 3",
		"repb 0 ALL all: goto chain 3",
		"skvx 0 ALL all: goto chain 3",
	}
	ctBlue = []string{ // zone 101 for VNI 100
		"repa 0 CT ip: ct zone 101, goto chain 1",
		"repa 1 EST ip ct_state +trk+est: goto chain 3",
		"repa 1 REL ip ct_state +trk+rel: goto chain 3",
		"repb 0 CT ip: ct zone 101, goto chain 1",
		"repb 1 EST ip ct_state +trk+est: goto chain 3",
		"repb 1 REL ip ct_state +trk+rel: goto chain 3",
		"skvx 0 CT ip enc_key_id 100: ct zone 101, goto chain 1",
		"skvx 1 EST ip ct_state +trk+est: goto chain 3",
		"skvx 1 REL ip ct_state +trk+rel: goto chain 3",
		"skvx 1 OPEN ip enc_key_id 100: goto chain 2",
		"skvx 2 OPEN ip enc_key_id 100: ct commit zone 101, goto chain 3",
		"repa 2 OPEN ip: ct commit zone 101, goto chain 3",
		"repb 2 OPEN ip: ct commit zone 101, goto chain 3",
	}
)

// compileBoth compiles p's forwarding rules, then its policy rules.
func compileBoth(t *testing.T, p plan.Plan, in Input) []PolicyRule {
	t.Helper()
	fwd, err := Compile(p, in)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := CompilePolicy(p, in, fwd)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func expectPolicy(t *testing.T, name string, p plan.Plan, reps map[string]string, want ...[]string) {
	t.Helper()
	t.Log(name)
	rs := compileBoth(t, p, Input{Reps: reps, VXLAN: "skvx"})
	for _, r := range rs {
		r.Index = 1
		if err := r.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	got := renderPolicy(rs)
	slices.Sort(got)
	w := sorted(want...)
	if !slices.Equal(got, w) {
		t.Errorf("%s:\ngot\n  %s\nwant\n  %s", name, strings.Join(got, "\n  "), strings.Join(w, "\n  "))
	}
}

func TestCompilePolicyTransitions(t *testing.T) {
	p, reps := base()
	expectPolicy(t, "no policy: everything to forwarding, no conntrack", p, reps, entryAll)

	// b isolated for ingress: TCP 80-90 and UDP 53 from group g (a and
	// a remote), everything from 203.0.113.0/24 except 203.0.113.128/25.
	p.Groups["g"] = plan.AddressGroup{Name: "g", Members: []netip.Addr{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.10"), netip.MustParseAddr("2001:db8::1")}}
	p.Policies["b"] = plan.EndpointPolicy{Endpoint: "b", IngressIsolated: true, Ingress: []plan.PolicyRule{
		{Peers: []plan.PolicyPeer{{Group: "g"}}, Ports: []plan.PolicyPort{{Protocol: "TCP", Port: 80, EndPort: 90}, {Protocol: "UDP", Port: 53}}},
		{Peers: []plan.PolicyPeer{{CIDR: netip.MustParsePrefix("203.0.113.0/24"), Except: []netip.Prefix{netip.MustParsePrefix("203.0.113.128/25")}}}},
	}}
	bIn := func(dev, key string) []string {
		k := ""
		if key != "" {
			k = " " + key
		}
		return []string{
			dev + " 2 R0 ip" + k + " ip_proto 6 src 198.51.100.1/32 dst 198.51.100.11/32 dst_port 80-90 NEW: ct commit zone 101, goto chain 3 [b ingress 1]",
			dev + " 2 R0 ip" + k + " ip_proto 17 src 198.51.100.1/32 dst 198.51.100.11/32 dst_port 53 NEW: ct commit zone 101, goto chain 3 [b ingress 1]",
			dev + " 2 R0 ip" + k + " ip_proto 6 src 198.51.100.10/32 dst 198.51.100.11/32 dst_port 80-90 NEW: ct commit zone 101, goto chain 3 [b ingress 1]",
			dev + " 2 R0 ip" + k + " ip_proto 17 src 198.51.100.10/32 dst 198.51.100.11/32 dst_port 53 NEW: ct commit zone 101, goto chain 3 [b ingress 1]",
			dev + " 2 R1 ip" + k + " src 203.0.113.0/25 dst 198.51.100.11/32 NEW: ct commit zone 101, goto chain 3 [b ingress 2]",
			dev + " 2 DENY ip" + k + " dst 198.51.100.11/32: drop [b ingress 0]",
		}
	}
	// On a's representor only the filters that can match a's packets.
	isoB := sorted(entryAll, ctBlue, without(bIn("repa", ""), "src 198.51.100.1/32", "src 203.0.113.0/25"), bIn("skvx", "enc_key_id 100"), []string{
		"repa 1 OPEN ip: goto chain 2",
		"repb 1 OPEN ip: goto chain 2",
		"repb 0 V6 ipv6: drop [b  0]",
	})
	expectPolicy(t, "b isolated for ingress", p, reps, isoB)

	// a isolated for egress too: only to b on TCP 80, and to anything on
	// UDP 53 (DNS).
	p.Groups["only-b"] = plan.AddressGroup{Name: "only-b", Members: []netip.Addr{netip.MustParseAddr("198.51.100.11")}}
	p.Policies["a"] = plan.EndpointPolicy{Endpoint: "a", EgressIsolated: true, Egress: []plan.PolicyRule{
		{Peers: []plan.PolicyPeer{{Group: "only-b"}}, Ports: []plan.PolicyPort{{Protocol: "TCP", Port: 80}}},
		{Ports: []plan.PolicyPort{{Protocol: "UDP", Port: 53}}},
	}}
	expectPolicy(t, "a isolated for egress", p, reps, without(isoB, "repa 1 OPEN"), []string{
		"repa 0 V6 ipv6: drop [a  0]",
		"repa 1 R0 ip ip_proto 6 dst 198.51.100.11/32 dst_port 80 NEW: goto chain 2 [a egress 1]",
		"repa 1 R1 ip ip_proto 17 dst_port 53 NEW: goto chain 2 [a egress 2]",
		"repa 1 DENY ip: drop [a egress 0]",
	})

	// The group loses its local member: its filters go, nothing else.
	p.Groups["g"] = plan.AddressGroup{Name: "g", Members: []netip.Addr{netip.MustParseAddr("198.51.100.1")}}
	expectPolicy(t, "group member removed", p, reps, without(isoB, "repa 1 OPEN", "src 198.51.100.10/32"), []string{
		"repa 0 V6 ipv6: drop [a  0]",
		"repa 1 R0 ip ip_proto 6 dst 198.51.100.11/32 dst_port 80 NEW: goto chain 2 [a egress 1]",
		"repa 1 R1 ip ip_proto 17 dst_port 53 NEW: goto chain 2 [a egress 2]",
		"repa 1 DENY ip: drop [a egress 0]",
	})

	// Policies gone: back to no conntrack at all.
	delete(p.Policies, "a")
	delete(p.Policies, "b")
	expectPolicy(t, "policies removed", p, reps, entryAll)
}

func TestCompilePolicyGatewayAndNetworks(t *testing.T) {
	p, reps := base()
	p.Networks["red"] = plan.Network{Name: "red", VNI: 100 + 65535} // same zone as blue
	p.Local["c"] = plan.Endpoint{Name: "c", Network: "red", MAC: "02:00:00:00:00:0c", IPs: pfx("198.51.100.11/24"), VFIndex: -1}
	reps["c"] = "repc"
	p.Policies["b"] = plan.EndpointPolicy{Endpoint: "b", IngressIsolated: true}
	p.Policies["c"] = plan.EndpointPolicy{Endpoint: "c", EgressIsolated: true}
	in := Input{Reps: reps, VXLAN: "skvx"}
	fwd, err := Compile(p, in)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CompilePolicy(p, in, fwd); err == nil || !strings.Contains(err.Error(), "shares conntrack zone 101") {
		t.Fatalf("two networks in one zone: %v", err)
	}
	// Another VNI: c's deny stays in red; b's (same address) in blue.
	p.Networks["red"] = plan.Network{Name: "red", VNI: 200}
	in.Gateways = map[string]Gateway{"blue": {Port: "skh100", MAC: "02:00:00:00:00:fe", IPs: []netip.Addr{netip.MustParseAddr("198.51.100.254")}}}
	fwd, err = Compile(p, in)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := CompilePolicy(p, in, fwd)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(renderPolicy(rs), "\n")
	for _, w := range []string{
		"repc 0 CT ip: ct zone 201, goto chain 1",
		"repc 1 DENY ip: drop [c egress 0]",
		"skvx 2 DENY ip enc_key_id 100 dst 198.51.100.11/32: drop [b ingress 0]",
		"skvx 2 OPEN ip enc_key_id 200: ct commit zone 201, goto chain 3",
		"skh100 0 CT ip: ct zone 101, goto chain 1",
		"skh100 1 EST ip ct_state +trk+est: goto chain 3",
		"skh100 1 OPEN ip: goto chain 2",
		"skh100 2 DENY ip dst 198.51.100.11/32: drop [b ingress 0]",
		"skh100 0 ALL all: goto chain 3",
	} {
		if !strings.Contains(got, w+"\n") && !strings.HasSuffix(got, w) {
			t.Errorf("missing %q in\n%s", w, got)
		}
	}
	for _, bad := range []string{"repc 2 DENY", "skvx 2 DENY ip enc_key_id 200"} {
		if strings.Contains(got, bad) {
			t.Errorf("a deny of blue's b leaked into red: %q in\n%s", bad, got)
		}
	}
}

func TestCompilePolicyErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		pol  plan.EndpointPolicy
		want string
	}{
		{"unknown group", plan.EndpointPolicy{IngressIsolated: true, Ingress: []plan.PolicyRule{{Peers: []plan.PolicyPeer{{Group: "nope"}}}}},
			`policies[b].ingress[0].peers[0].group: "nope" is not in the plan`},
		{"except outside", plan.EndpointPolicy{EgressIsolated: true, Egress: []plan.PolicyRule{{}, {Peers: []plan.PolicyPeer{{CIDR: netip.MustParsePrefix("10.0.0.0/8"), Except: []netip.Prefix{netip.MustParsePrefix("11.0.0.0/16")}}}}}},
			`policies[b].egress[1].peers[0].except: 11.0.0.0/16 is not inside 10.0.0.0/8`},
		{"protocol", plan.EndpointPolicy{IngressIsolated: true, Ingress: []plan.PolicyRule{{Ports: []plan.PolicyPort{{Protocol: "ICMP"}}}}},
			`policies[b].ingress[0].ports[0].protocol: "ICMP" is not TCP, UDP or SCTP`},
		{"endPort", plan.EndpointPolicy{IngressIsolated: true, Ingress: []plan.PolicyRule{{Ports: []plan.PolicyPort{{Protocol: "TCP", Port: 90, EndPort: 80}}}}},
			`policies[b].ingress[0].ports[0].endPort: 80 is below port 90`},
		{"empty peer", plan.EndpointPolicy{IngressIsolated: true, Ingress: []plan.PolicyRule{{Peers: []plan.PolicyPeer{{}}}}},
			`policies[b].ingress[0].peers[0]: neither a group nor a CIDR`},
	} {
		p, reps := base()
		tc.pol.Endpoint = "b"
		p.Policies["b"] = tc.pol
		in := Input{Reps: reps, VXLAN: "skvx"}
		if _, err := CompilePolicy(p, in, nil); err == nil || err.Error() != tc.want {
			t.Errorf("%s: got %v, want %s", tc.name, err, tc.want)
		}
	}
}

func TestSubtract(t *testing.T) {
	for _, tc := range []struct {
		cidr   string
		except []string
		want   string
	}{
		{"10.0.0.0/8", nil, "10.0.0.0/8"},
		{"10.0.0.0/8", []string{"10.0.0.0/8"}, ""},
		{"10.0.0.0/24", []string{"10.0.0.0/25"}, "10.0.0.128/25"},
		{"10.0.0.0/24", []string{"10.0.0.64/26"}, "10.0.0.0/26 10.0.0.128/25"},
		{"10.0.0.0/30", []string{"10.0.0.1/32", "10.0.0.2/32"}, "10.0.0.0/32 10.0.0.3/32"},
		{"0.0.0.0/0", []string{"128.0.0.0/1", "0.0.0.0/2"}, "64.0.0.0/2"},
		{"10.0.0.0/24", []string{"10.0.0.0/26", "10.0.0.0/25"}, "10.0.0.128/25"},
	} {
		var ex []netip.Prefix
		for _, e := range tc.except {
			ex = append(ex, netip.MustParsePrefix(e))
		}
		got, err := subtract(netip.MustParsePrefix(tc.cidr), ex)
		if err != nil {
			t.Fatalf("%s - %v: %v", tc.cidr, tc.except, err)
		}
		var s []string
		for _, p := range got {
			s = append(s, p.String())
		}
		if strings.Join(s, " ") != tc.want {
			t.Errorf("%s - %v = %v, want %s", tc.cidr, tc.except, s, tc.want)
		}
		// Every address of a sample is in the result iff in cidr and in
		// no except.
		c := netip.MustParsePrefix(tc.cidr)
		for a := c.Addr(); c.Contains(a); a = a.Next() {
			in := false
			for _, p := range got {
				in = in || p.Contains(a)
			}
			out := false
			for _, e := range ex {
				out = out || e.Contains(a)
			}
			if in == out {
				t.Errorf("%s - %v: %s in result %v, in an except %v", tc.cidr, tc.except, a, in, out)
			}
			if c.Bits() < 20 {
				break // too many to walk
			}
		}
	}
}
