package offload

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
)

// TestPolicyBeforeForwardingRules (kernel VM): an isolated endpoint on
// a network that routes out, with no remote endpoint yet, gives the host
// port sknp100 the policy pipeline before it has any forwarding rule:
// Apply gives it its clsact all the same and returns no error. The
// gateway port skh100 gets the reply mark's fw filter ahead of its zone
// (offload/flower ReplyMark), the node's stack the rule that sets the
// mark; a second Apply writes nothing.
func TestPolicyBeforeForwardingRules(t *testing.T) {
	guest.Require(t)
	node := newNS(t, "skrmnode")
	pf := guest.SwitchdevEswitch(t, "skrmnode", 75, 1)
	rep := guest.Representors(t, "skrmnode")["pf0vf0"]
	if rep == "" {
		t.Fatal("no pf0vf0 representor")
	}
	p := plan.New("n1")
	p.Revision = 3
	p.UnderlayIP = netip.MustParseAddr("192.0.2.1")
	p.Networks["blue"] = plan.Network{Name: "blue", VNI: 100, MTU: 1450, Egress: plan.EgressSNAT,
		Subnets: []plan.Subnet{{CIDR: netip.MustParsePrefix("198.51.100.0/24"), Gateway: netip.MustParseAddr("198.51.100.1")}}}
	p.Local["w"] = plan.Endpoint{Name: "w", Network: "blue", Kind: plan.KindVF, PF: pf, VFIndex: 0, MAC: "02:00:00:00:00:14",
		IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.20/24")}}
	p.Policies["w"] = plan.EndpointPolicy{Endpoint: "w", IngressIsolated: true}
	dp, err := New(Options{NetNS: node, Representor: func(plan.Endpoint) (Port, bool) { return Port{Rep: rep}, true }})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	if err := dp.Apply(p); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	hp := nsExec(t, "skrmnode", guest.TC, "filter", "show", "dev", "sknp100", "ingress", "chain", "0")
	if !strings.Contains(hp, "ct zone 101") {
		t.Errorf("the host port has no conntrack entry filter:\n%s", hp)
	}
	gw := nsExec(t, "skrmnode", guest.TC, "filter", "show", "dev", "skh100", "ingress", "chain", "0")
	if !strings.Contains(gw, "fw") || !strings.Contains(gw, "handle 0x200000/0x200000") || !strings.Contains(gw, "goto chain 3") {
		t.Errorf("the gateway port has no reply mark filter:\n%s", gw)
	}
	if nft := nsExec(t, "skrmnode", guest.NFT, "list", "chain", "inet", "skiff", "replies"); !strings.Contains(nft, `oifname "skg100" ct state established,related meta mark set meta mark | 0x00200000`) {
		t.Errorf("the node does not mark what leaves skg100 on established connections:\n%s", nft)
	}
	w := dp.Writes()
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	if n := dp.Writes() - w; n != 0 {
		t.Errorf("the same plan again made %d writes, want none", n)
	}
}
