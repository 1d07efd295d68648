package offload

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
)

// The node's stack enforces the egress of exactly the egress-isolated
// endpoints with a port here whose network routes out through a gateway
// here: named by that gateway and their addresses, egress only, with
// the groups their rules name (and no other).
func TestNodeEgress(t *testing.T) {
	p := plan.New("n1")
	p.Networks["pods"] = plan.Network{Name: "pods", VNI: 100, Egress: plan.EgressSNAT}
	p.Networks["tenant"] = plan.Network{Name: "tenant", VNI: 200, Egress: plan.EgressNone}
	pfx := func(s ...string) (out []netip.Prefix) {
		for _, x := range s {
			out = append(out, netip.MustParsePrefix(x))
		}
		return out
	}
	p.Local["c"] = plan.Endpoint{Name: "c", Network: "pods", IPs: pfx("198.51.100.3/25", "2001:db8::3/64")}
	p.Local["i"] = plan.Endpoint{Name: "i", Network: "pods", IPs: pfx("198.51.100.4/25")}
	p.Local["t"] = plan.Endpoint{Name: "t", Network: "tenant", IPs: pfx("198.51.100.130/25")}
	p.Local["u"] = plan.Endpoint{Name: "u", Network: "pods", IPs: pfx("198.51.100.5/25")} // no representor
	b := netip.MustParseAddr("198.51.100.2")
	p.Groups["b"] = plan.AddressGroup{Name: "b", Members: []netip.Addr{b}}
	p.Groups["other"] = plan.AddressGroup{Name: "other", Members: []netip.Addr{netip.MustParseAddr("198.51.100.9")}}
	egress := []plan.PolicyRule{
		{Peers: []plan.PolicyPeer{{Group: "b"}}, Ports: []plan.PolicyPort{{Protocol: "TCP", Port: 8080}}},
		{Peers: []plan.PolicyPeer{{CIDR: netip.MustParsePrefix("203.0.113.0/24")}}},
	}
	for _, name := range []string{"c", "t", "u"} {
		p.Policies[name] = plan.EndpointPolicy{Endpoint: name, EgressIsolated: true, Egress: egress}
	}
	p.Policies["i"] = plan.EndpointPolicy{Endpoint: "i", IngressIsolated: true,
		Ingress: []plan.PolicyRule{{Peers: []plan.PolicyPeer{{Group: "other"}}}}}
	in := flower.Input{Reps: map[string]string{"c": "repc", "i": "repi", "t": "rept"},
		Gateways: map[string]flower.Gateway{
			"pods":   {Port: "skh100", MAC: "02:73:6b:00:00:64"},
			"tenant": {Port: "skh200", MAC: "02:73:6b:00:00:c8"}}}
	cfg := nodeEgress(p, in)
	want := `groups map[b:[198.51.100.2]] endpoints [{Name:c Device:skg100 IPs:[198.51.100.3 2001:db8::3] IngressIsolated:false EgressIsolated:true Ingress:[] Egress:[{Peers:[{Group:b CIDR:invalid Prefix Except:[]}] Ports:[{Proto:6 From:8080 To:0}]} {Peers:[{Group: CIDR:203.0.113.0/24 Except:[]}] Ports:[]}]}]`
	if got := fmt.Sprintf("groups %v endpoints %+v", cfg.Groups, cfg.Endpoints); got != want {
		t.Errorf("nodeEgress:\ngot  %s\nwant %s", got, want)
	}
	// Without a gateway here nothing is routed for c: nothing to enforce.
	delete(in.Gateways, "pods")
	if cfg := nodeEgress(p, in); len(cfg.Endpoints) != 0 || len(cfg.Groups) != 0 {
		t.Errorf("no gateway: %+v", cfg)
	}
}
