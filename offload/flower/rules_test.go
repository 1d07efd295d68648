package flower

import (
	"bytes"
	"errors"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
)

func pfx(s string) []netip.Prefix { return []netip.Prefix{netip.MustParsePrefix(s)} }

func vteps(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, x := range s {
		out = append(out, netip.MustParseAddr(x))
	}
	return out
}

// base: node n1 with local endpoints a and b on blue (vni 100), one remote
// endpoint r1 behind 192.0.2.2.
func base() (plan.Plan, map[string]string) {
	p := plan.New("n1")
	p.UnderlayIP = netip.MustParseAddr("192.0.2.1")
	p.Networks["blue"] = plan.Network{Name: "blue", VNI: 100, FloodVTEPs: vteps("192.0.2.2")}
	p.Local["a"] = plan.Endpoint{Name: "a", Network: "blue", MAC: "02:00:00:00:00:0a", IPs: pfx("198.51.100.10/24"), VFIndex: -1}
	p.Local["b"] = plan.Endpoint{Name: "b", Network: "blue", MAC: "02:00:00:00:00:0b", IPs: pfx("198.51.100.11/24"), VFIndex: -1}
	p.Remote["r1"] = plan.Remote{Name: "r1", Network: "blue", VTEP: netip.MustParseAddr("192.0.2.2"), MAC: "02:00:00:00:00:01", IPs: pfx("198.51.100.1/24")}
	return p, map[string]string{"a": "repa", "b": "repb"}
}

// Short names of the long tc words, to keep the tables readable.
var short = strings.NewReplacer(
	"tunnel_key set id 100 src_ip 192.0.2.1 dst_ip ", "set:",
	" dst_port 4789", "",
	"enc_key_id 100 enc_dst_ip 192.0.2.1 enc_dst_port 4789 ", "decap100 ",
	" prio 21248 proto 0x0806", " ARP",
	" prio 21249 proto 0x0003", " UNI",
	"arp_op request arp_tip ", "tip ",
	"mirred redirect dev ", "redirect:",
	"mirred mirror dev ", "mirror:",
)

func render(rs []Rule) []string {
	var out []string
	for _, r := range rs {
		out = append(out, short.Replace(r.String())+" ["+r.Kind+" "+r.Endpoint+"]")
	}
	return out
}

// The rules of base, by hand.
var baseRules = []string{
	"repa ARP tip 198.51.100.11 action redirect:repb [arp a]",
	"repa UNI dst_mac 02:00:00:00:00:01 action set:192.0.2.2 action redirect:skvx [encap a]",
	"repa UNI dst_mac 02:00:00:00:00:0b action redirect:repb [local a]",
	"repb ARP tip 198.51.100.10 action redirect:repa [arp b]",
	"repb UNI dst_mac 02:00:00:00:00:01 action set:192.0.2.2 action redirect:skvx [encap b]",
	"repb UNI dst_mac 02:00:00:00:00:0a action redirect:repa [local b]",
	"skvx ARP decap100 tip 198.51.100.10 action tunnel_key unset action redirect:repa [arp a]",
	"skvx ARP decap100 tip 198.51.100.11 action tunnel_key unset action redirect:repb [arp b]",
	"skvx UNI decap100 dst_mac 02:00:00:00:00:0a action tunnel_key unset action redirect:repa [decap a]",
	"skvx UNI decap100 dst_mac 02:00:00:00:00:0b action tunnel_key unset action redirect:repb [decap b]",
}

// without returns rules minus those containing any of the substrings.
func without(rules []string, subs ...string) []string {
	return slices.DeleteFunc(slices.Clone(rules), func(r string) bool {
		for _, s := range subs {
			if strings.Contains(r, s) {
				return true
			}
		}
		return false
	})
}

func sorted(rs ...[]string) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r...)
	}
	slices.Sort(out)
	return out
}

// expect fails t unless p compiles to want (rendered, sorted).
func expect(t *testing.T, name string, in Input, p plan.Plan, want []string) {
	t.Helper()
	rs, err := Compile(p, in)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if got := sorted(render(rs)); !slices.Equal(got, want) {
		t.Errorf("%s:\ngot\n  %s\nwant\n  %s", name, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestCompileTransitions(t *testing.T) {
	steps := []struct {
		name   string
		change func(p *plan.Plan, reps map[string]string)
		want   []string
	}{
		{"base", func(*plan.Plan, map[string]string) {}, baseRules},
		{"add remote VTEP with an endpoint", func(p *plan.Plan, _ map[string]string) {
			n := p.Networks["blue"]
			n.FloodVTEPs = vteps("192.0.2.2", "192.0.2.3")
			p.Networks["blue"] = n
			p.Remote["r2"] = plan.Remote{Name: "r2", Network: "blue", VTEP: netip.MustParseAddr("192.0.2.3"), MAC: "02:00:00:00:00:02", IPs: pfx("198.51.100.2/24")}
		}, sorted(without(baseRules, "FLOOD dst_mac ff:ff:ff:ff:ff:ff action mirror"), []string{
			"repa UNI dst_mac 02:00:00:00:00:02 action set:192.0.2.3 action redirect:skvx [encap a]",
			"repb UNI dst_mac 02:00:00:00:00:02 action set:192.0.2.3 action redirect:skvx [encap b]",
		})},
		{"remote endpoint moves to the other VTEP", func(p *plan.Plan, _ map[string]string) {
			r := p.Remote["r1"]
			r.VTEP = netip.MustParseAddr("192.0.2.3")
			p.Remote["r1"] = r
			n := p.Networks["blue"]
			n.FloodVTEPs = vteps("192.0.2.3")
			p.Networks["blue"] = n
			delete(p.Remote, "r2")
		}, sorted(without(baseRules, "192.0.2.2"), []string{
			"repa UNI dst_mac 02:00:00:00:00:01 action set:192.0.2.3 action redirect:skvx [encap a]",
			"repb UNI dst_mac 02:00:00:00:00:01 action set:192.0.2.3 action redirect:skvx [encap b]",
		})},
		{"local endpoint b deleted; last remote VTEP removed", func(p *plan.Plan, reps map[string]string) {
			delete(p.Local, "b")
			delete(reps, "b")
			delete(p.Remote, "r1")
			n := p.Networks["blue"]
			n.FloodVTEPs = nil
			p.Networks["blue"] = n
		}, []string{
			"skvx ARP decap100 tip 198.51.100.10 action tunnel_key unset action redirect:repa [arp a]",
			"skvx UNI decap100 dst_mac 02:00:00:00:00:0a action tunnel_key unset action redirect:repa [decap a]",
		}},
		{"local endpoint a moves to another representor", func(p *plan.Plan, reps map[string]string) {
			reps["a"] = "repz"
		}, []string{
			"skvx ARP decap100 tip 198.51.100.10 action tunnel_key unset action redirect:repz [arp a]",
			"skvx UNI decap100 dst_mac 02:00:00:00:00:0a action tunnel_key unset action redirect:repz [decap a]",
		}},
		{"endpoint not plumbed yet: no rules, no network rules", func(p *plan.Plan, reps map[string]string) {
			delete(reps, "a")
		}, nil},
	}
	p, reps := base()
	for _, s := range steps {
		s.change(&p, reps)
		rs, err := Compile(p, Input{Reps: reps, VXLAN: "skvx"})
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		got := sorted(render(rs))
		expect(t, s.name, Input{Reps: reps, VXLAN: "skvx"}, p, s.want)
		// Compile is deterministic.
		again, _ := Compile(p, Input{Reps: reps, VXLAN: "skvx"})
		if !slices.Equal(sorted(render(again)), got) {
			t.Errorf("%s: a second Compile differs", s.name)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	cases := []struct {
		name   string
		change func(p *plan.Plan, in *Input)
		want   string
	}{
		{"no vxlan", func(_ *plan.Plan, in *Input) { in.VXLAN = "" }, "vxlan: device name required"},
		{"no underlay", func(p *plan.Plan, _ *Input) { p.UnderlayIP = netip.Addr{} }, "underlayIP:"},
		{"bad local MAC", func(p *plan.Plan, _ *Input) { e := p.Local["a"]; e.MAC = "zz"; p.Local["a"] = e }, `local[a].mac: "zz"`},
		{"bad remote MAC", func(p *plan.Plan, _ *Input) { r := p.Remote["r1"]; r.MAC = "02:00"; p.Remote["r1"] = r }, `remote[r1].mac: "02:00"`},
		{"IPv6 VTEP", func(p *plan.Plan, _ *Input) {
			r := p.Remote["r1"]
			r.VTEP = netip.MustParseAddr("2001:db8::1")
			p.Remote["r1"] = r
		}, "remote[r1].vtep:"},
		{"bad VNI", func(p *plan.Plan, _ *Input) { n := p.Networks["blue"]; n.VNI = 1 << 24; p.Networks["blue"] = n }, "networks[blue].vni: must be 1..16777215"},
		{"duplicate MAC", func(p *plan.Plan, _ *Input) { r := p.Remote["r1"]; r.MAC = "02:00:00:00:00:0b"; p.Remote["r1"] = r }, "duplicate MAC or IP"},
	}
	for _, c := range cases {
		p, reps := base()
		in := Input{Reps: reps, VXLAN: "skvx"}
		c.change(&p, &in)
		_, err := Compile(p, in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
}

func TestCookie(t *testing.T) {
	p, reps := base()
	rs, err := Compile(p, Input{Reps: reps, VXLAN: "skvx"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range rs {
		c := r.Cookie()
		if len(c) != 16 || string(c[:2]) != "sk" {
			t.Fatalf("cookie %x of %s", c, r)
		}
		if seen[string(c[4:10])] {
			t.Errorf("two rules share a match hash: %s", r)
		}
		seen[string(c[4:10])] = true
	}
	// Same match, other actions: same match hash, other rule hash.
	a, b := rs[0], rs[0]
	b.Actions = []Action{{Kind: Redirect, Dev: "other"}}
	ca, cb := a.Cookie(), b.Cookie()
	if string(ca[4:10]) != string(cb[4:10]) || string(ca[10:]) == string(cb[10:]) {
		t.Errorf("cookies %x and %x", ca, cb)
	}
}

// No rule grows with the number of VTEPs a network floods to, nor with
// its local endpoints beyond their unicast: broadcast and multicast are
// the node's replication path's (datapath/offload), not the rules'. A
// network of 5,000 VTEPs and 250 local endpoints compiles, and each
// representor holds what it held with one VTEP.
func TestCompileNoFanOut(t *testing.T) {
	p, reps := wide(0)
	n := p.Networks["blue"]
	in := Input{Reps: reps, VXLAN: "skvx"}
	count := func(vteps int) map[string]int {
		t.Helper()
		m := n
		for i := range vteps {
			m.FloodVTEPs = append(m.FloodVTEPs, netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}))
		}
		p.Networks["blue"] = m
		return perDevice(t, p, in)
	}
	one, many := count(1), count(5000)
	if !maps.Equal(one, many) {
		t.Errorf("rules per device differ between 1 and 5,000 VTEPs")
	}
	// Each representor: a local rule and an ARP rule per other local
	// endpoint; skvx: a decap and an ARP rule per local endpoint.
	if one["rep0"] != 2*249 || one["skvx"] != 2*250 {
		t.Errorf("rep0 has %d rules, skvx %d; want %d and %d", one["rep0"], one["skvx"], 2*249, 2*250)
	}
}

// A veth standing in for the VF behind repa: its traffic enters repa's
// ingress, and traffic for the endpoint goes to the veth, not the
// representor.
func TestCompileStandIn(t *testing.T) {
	p, reps := base()
	delete(p.Local, "b")
	delete(reps, "b")
	targets := map[string]string{"a": "vetha"}
	want := []string{
		"repa UNI dst_mac 02:00:00:00:00:01 action set:192.0.2.2 action redirect:skvx [encap a]",
		"skvx ARP decap100 tip 198.51.100.10 action tunnel_key unset action redirect:vetha [arp a]",
		"skvx UNI decap100 dst_mac 02:00:00:00:00:0a action tunnel_key unset action redirect:vetha [decap a]",
		"vetha UNI action mirred ingress redirect dev repa [standin a]",
	}
	expect(t, "", Input{Reps: reps, Targets: targets, VXLAN: "skvx"}, p, want)
}

// The node's gateway of a network: pods reach it by MAC and ARP; it
// reaches them the same way and floods to them only (never to VTEPs).
func TestCompileGateway(t *testing.T) {
	p, reps := base()
	delete(p.Local, "b")
	delete(reps, "b")
	delete(p.Remote, "r1")
	n := p.Networks["blue"]
	n.FloodVTEPs = nil
	p.Networks["blue"] = n
	in := Input{Reps: reps, VXLAN: "skvx", Gateways: map[string]Gateway{
		"blue": {Port: "skh100", MAC: "02:73:6b:00:00:64", IPs: vteps("198.51.100.254")}}}
	expect(t, "gateway", in, p, []string{
		"repa ARP tip 198.51.100.254 action redirect:skh100 [gateway a]",
		"repa UNI dst_mac 02:73:6b:00:00:64 action redirect:skh100 [gateway a]",
		"skh100 ARP tip 198.51.100.10 action redirect:repa [gateway a]",
		"skh100 UNI dst_mac 02:00:00:00:00:0a action redirect:repa [gateway a]",
		"skvx ARP decap100 tip 198.51.100.10 action tunnel_key unset action redirect:repa [arp a]",
		"skvx UNI decap100 dst_mac 02:00:00:00:00:0a action tunnel_key unset action redirect:repa [decap a]",
	})
	in.Gateways["blue"] = Gateway{Port: "skh100", MAC: "bad", IPs: vteps("198.51.100.254")}
	if _, err := Compile(p, in); err == nil || !strings.Contains(err.Error(), `gateways[blue].mac: "bad"`) {
		t.Errorf("bad gateway MAC: %v", err)
	}
}

// cookieFor makes, in one buffer, the cookie the programmer always made:
// the hash of MatchKey, and that of String with the mirred targets'
// indexes after it (installed filters keep their handles across an
// upgrade).
func TestCookieForUnchanged(t *testing.T) {
	p, reps := base()
	rs, err := Compile(p, Input{Reps: reps, VXLAN: "skvx"})
	if err != nil {
		t.Fatal(err)
	}
	devs := map[string]Device{"skvx": {Name: "skvx", Index: 3}}
	for i, rep := range slices.Sorted(maps.Values(reps)) {
		devs[rep] = Device{Name: rep, Index: 10 + i}
	}
	for _, r := range rs {
		all := r.String()
		for _, a := range r.Actions {
			if a.Dev != "" {
				all += " " + a.Dev + "=" + strconv.Itoa(devs[a.Dev].Index)
			}
		}
		if got, want := cookieFor(devs, r), cookie(r.MatchKey(), all); !bytes.Equal(got, want) {
			t.Errorf("%s: cookie %x, want %x", r, got, want)
		}
	}
}

// A network Compile cannot express is refused alone: the rules of the
// others are those of a plan without it, and the error names it.
func TestCompileRefusesOneNetwork(t *testing.T) {
	p, reps := base()
	p.Networks["green"] = plan.Network{Name: "green", VNI: 200, FloodVTEPs: vteps("192.0.2.2")}
	p.Local["g"] = plan.Endpoint{Name: "g", Network: "green", MAC: "02:00:00:00:00:1a", IPs: pfx("203.0.113.10/24"), VFIndex: -1}
	reps["g"], reps["h"] = "repg", "reph" // h: only in one case
	in := Input{Reps: reps, VXLAN: "skvx"}
	green, err := Compile(p, in)
	if err != nil {
		t.Fatal(err)
	}
	blueOnly, _ := base()
	want, err := Compile(blueOnly, Input{Reps: map[string]string{"a": "repa", "b": "repb"}, VXLAN: "skvx"})
	if err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(p *plan.Plan){
		"a local endpoint's MAC": func(p *plan.Plan) { e := p.Local["g"]; e.MAC = "zz"; p.Local["g"] = e },
		"a remote endpoint's VTEP": func(p *plan.Plan) {
			p.Remote["rg"] = plan.Remote{Name: "rg", Network: "green", VTEP: netip.MustParseAddr("2001:db8::2"), MAC: "02:00:00:00:00:1b"}
		},
		"a duplicate MAC": func(p *plan.Plan) {
			p.Local["h"] = plan.Endpoint{Name: "h", Network: "green", MAC: "02:00:00:00:00:1a", IPs: pfx("203.0.113.11/24"), VFIndex: -1}
		},
		"its VNI": func(p *plan.Plan) { n := p.Networks["green"]; n.VNI = 0; p.Networks["green"] = n },
	} {
		q := p.Clone()
		change(&q)
		got, err := Compile(q, in)
		refused := RefusedNetworks(err)
		if len(refused) != 1 || refused["green"] == nil {
			t.Errorf("%s: error %v, want green refused alone", name, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "network green refused: ") {
			t.Errorf("%s: error %q does not name the network first", name, err)
		}
		if !slices.Equal(render(got), render(want)) {
			t.Errorf("%s: rules\n%s\nwant blue's alone\n%s", name, strings.Join(render(got), "\n"), strings.Join(render(want), "\n"))
		}
		// The remote endpoints of blue still change alone; green's
		// are not incremental while green is refused.
		if _, err := RemoteRules(q, in, []string{"r1"}); err != nil {
			t.Errorf("%s: blue's remote: %v", name, err)
		}
		if _, ok := q.Remote["rg"]; ok {
			if _, err := RemoteRules(q, in, []string{"rg"}); !errors.Is(err, ErrNotIncremental) {
				t.Errorf("%s: green's remote: %v, want ErrNotIncremental", name, err)
			}
		}
	}
	if len(green) <= len(want) {
		t.Errorf("green has no rules of its own: %d against %d", len(green), len(want))
	}
}
