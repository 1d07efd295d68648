package flower

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// hostPortInput: base's network blue with a gateway (skh100) and the
// node's host port (sknp100, MAC 06:64:c0:00:02:01) with two peers
// (other nodes' host ports).
func hostPortInput(reps map[string]string) Input {
	return Input{Reps: reps, VXLAN: "skvx",
		Gateways: map[string]Gateway{"blue": {Port: "skh100", MAC: "02:73:6b:00:00:64", IPs: vteps("198.51.100.254")}},
		HostPorts: map[string]HostPort{"blue": {Port: "sknp100", MAC: "06:64:c0:00:02:01", Peers: map[netip.Addr]string{
			netip.MustParseAddr("192.0.2.2"): "06:64:c0:00:02:02", netip.MustParseAddr("192.0.2.3"): "06:64:c0:00:02:03"}}}}
}

// gatewayRules are base's gateway rules for skh100 (IPv4 only).
var gatewayRules = []string{
	"repa ARP tip 198.51.100.254 action redirect:skh100 [gateway a]",
	"repa UNI dst_mac 02:73:6b:00:00:64 action redirect:skh100 [gateway a]",
	"repb ARP tip 198.51.100.254 action redirect:skh100 [gateway b]",
	"repb UNI dst_mac 02:73:6b:00:00:64 action redirect:skh100 [gateway b]",
	"skh100 ARP tip 198.51.100.10 action redirect:repa [gateway a]",
	"skh100 ARP tip 198.51.100.11 action redirect:repb [gateway b]",
	"skh100 UNI dst_mac 02:00:00:00:00:0a action redirect:repa [gateway a]",
	"skh100 UNI dst_mac 02:00:00:00:00:0b action redirect:repb [gateway b]",
}

// serviceRules are base's rules with the network's host port: those
// delivering to a local endpoint from another one or from the tunnel
// restore a Service's address on its backend's reply (ct nat, zone 0);
// ARP frames to those MACs (act_ct drops what is not IP) get ARP rules
// of their own; ARP by target address, broadcast and the gateway
// port's rules are unchanged.
func serviceRules(t *testing.T) []string {
	nat := map[string]string{
		"repa UNI dst_mac 02:00:00:00:00:0b action redirect:repb [local a]":                                  "repa UNI dst_mac 02:00:00:00:00:0b action ct nat action redirect:repb [local a]",
		"repb UNI dst_mac 02:00:00:00:00:0a action redirect:repa [local b]":                                  "repb UNI dst_mac 02:00:00:00:00:0a action ct nat action redirect:repa [local b]",
		"skvx UNI decap100 dst_mac 02:00:00:00:00:0a action tunnel_key unset action redirect:repa [decap a]": "skvx UNI decap100 dst_mac 02:00:00:00:00:0a action tunnel_key unset action ct nat action redirect:repa [decap a]",
		"skvx UNI decap100 dst_mac 02:00:00:00:00:0b action tunnel_key unset action redirect:repb [decap b]": "skvx UNI decap100 dst_mac 02:00:00:00:00:0b action tunnel_key unset action ct nat action redirect:repb [decap b]",
	}
	var out []string
	for _, r := range baseRules {
		if n, ok := nat[r]; ok {
			delete(nat, r)
			r = n
		}
		out = append(out, r)
	}
	if len(nat) > 0 {
		t.Fatalf("serviceRules: not in baseRules: %v", nat)
	}
	return append(out,
		"repa ARP dst_mac 02:00:00:00:00:0b action redirect:repb [arp a]",
		"repb ARP dst_mac 02:00:00:00:00:0a action redirect:repa [arp b]",
		"skvx ARP decap100 dst_mac 02:00:00:00:00:0a action tunnel_key unset action redirect:repa [arp a]",
		"skvx ARP decap100 dst_mac 02:00:00:00:00:0b action tunnel_key unset action redirect:repb [arp b]")
}

// TestCompileHostPort: a network with the node's host port gets, besides
// its gateway's rules, exactly: the host port's packets to each remote
// endpoint encapsulated to its VTEP (on sknp100); the node's own host
// port MAC from the tunnel to sknp100; each other node's host port MAC
// from the gateway port (the pods' replies the node routes back out of
// skg100) encapsulated to that node; and ct nat on the rules delivering
// to its endpoints from each other and the tunnel (serviceRules).
// Nothing else for the local endpoints (the node reaches them through
// the gateway).
func TestCompileHostPort(t *testing.T) {
	p, reps := base()
	in := hostPortInput(reps)
	svcRules := serviceRules(t)
	hostRules := []string{
		"sknp100 UNI dst_mac 02:00:00:00:00:01 action set:192.0.2.2 action redirect:skvx [encap ]",
		"skvx UNI decap100 dst_mac 06:64:c0:00:02:01 action tunnel_key unset action redirect:sknp100 [hostport ]",
		"skh100 UNI dst_mac 06:64:c0:00:02:02 action set:192.0.2.2 action redirect:skvx [hostport ]",
		"skh100 UNI dst_mac 06:64:c0:00:02:03 action set:192.0.2.3 action redirect:skvx [hostport ]",
	}
	expect(t, "host port", in, p, sorted(svcRules, gatewayRules, hostRules))

	// The remote endpoint's rules (what an incremental change writes)
	// include the host port's encap to it, and nothing of the peers.
	rs, err := RemoteRules(p, in, []string{"r1"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"repa UNI dst_mac 02:00:00:00:00:01 action set:192.0.2.2 action redirect:skvx [encap a]",
		"repb UNI dst_mac 02:00:00:00:00:01 action set:192.0.2.2 action redirect:skvx [encap b]",
		hostRules[0],
	}
	if got := sorted(render(rs)); !slices.Equal(got, sorted(want)) {
		t.Errorf("RemoteRules r1:\ngot\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(sorted(want), "\n  "))
	}

	// Without a gateway (no endpoint of the network plumbed here: a
	// node reaching pods of a network it has none on), the host port's
	// encap and decap rules alone: nothing is routed back out.
	gws := in.Gateways
	in.Gateways = nil
	expect(t, "host port without a gateway", in, p, sorted(svcRules, hostRules[:2]))
	// And with no local endpoint at all: those two rules alone.
	q := p.Clone()
	q.Local = map[string]plan.Endpoint{}
	expect(t, "host port, no local endpoint", Input{VXLAN: "skvx", HostPorts: in.HostPorts}, q, sorted(hostRules[:2]))
	in.Gateways = gws

	// Without a host port (egress none), none of its rules.
	in.HostPorts = nil
	expect(t, "no host port", in, p, sorted(baseRules, gatewayRules))
}

// TestCompileHostPortRefused: bad host ports are refused, naming the
// field.
func TestCompileHostPortRefused(t *testing.T) {
	for _, c := range []struct {
		name, want string
		change     func(in *Input)
	}{
		{"no port", "hostPorts[blue].port: required", func(in *Input) { hp := in.HostPorts["blue"]; hp.Port = ""; in.HostPorts["blue"] = hp }},
		{"bad MAC", `hostPorts[blue].mac: "06:64" is not a MAC address`, func(in *Input) { hp := in.HostPorts["blue"]; hp.MAC = "06:64"; in.HostPorts["blue"] = hp }},
		{"IPv6 peer", `hostPorts[blue].peers: "2001:db8::2" is not an IPv4 address`, func(in *Input) {
			in.HostPorts["blue"].Peers[netip.MustParseAddr("2001:db8::2")] = "06:64:00:00:00:02"
		}},
		{"bad peer MAC", `hostPorts[blue].peers[192.0.2.3]: "x" is not a MAC address`, func(in *Input) {
			in.HostPorts["blue"].Peers[netip.MustParseAddr("192.0.2.3")] = "x"
		}},
	} {
		p, reps := base()
		in := hostPortInput(reps)
		c.change(&in)
		if _, err := Compile(p, in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

// TestCompilePolicyHostPort: in a network with isolated endpoints, the
// host port is tracked and committed in the network's zone like the
// gateway port, so that a Service connection the node DNATs to a remote
// backend (out of the host port, with the client's address) is known
// when the backend's reply comes from the tunnel (established, not new
// to the client's ingress rules); what leaves it for an isolated local
// endpoint's address meets that endpoint's ingress rules.
func TestCompilePolicyHostPort(t *testing.T) {
	p, reps := base()
	p.Policies["b"] = plan.EndpointPolicy{Endpoint: "b", IngressIsolated: true}
	rs := compileBoth(t, p, hostPortInput(reps))
	var got []string
	for _, r := range renderPolicy(rs) {
		if strings.HasPrefix(r, "sknp100 ") {
			got = append(got, r)
		}
	}
	want := sorted([]string{
		"sknp100 0 ALL all: goto chain 3",
		"sknp100 0 CT ip: ct zone 101, goto chain 1",
		"sknp100 1 EST ip ct_state +trk+est: goto chain 3",
		"sknp100 1 REL ip ct_state +trk+rel: goto chain 3",
		"sknp100 1 OPEN ip: goto chain 2",
		"sknp100 2 DENY ip dst 198.51.100.11/32: drop [b ingress 0]",
		"sknp100 2 OPEN ip: ct commit zone 101, goto chain 3",
	})
	if slices.Sort(got); !slices.Equal(got, want) {
		t.Errorf("host port's policy filters:\ngot\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
