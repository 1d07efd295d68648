package nl

import (
	"slices"
	"testing"

	"github.com/google/nftables/expr"
)

// The offload datapath's gateways (skg) are network devices like bridges:
// each is kept from every other network's bridge, host port and gateway,
// a none gateway routes nothing out or in, a snat gateway masquerades
// what leaves for anything that is not Skiff's.
func TestIsolationRulesGateways(t *testing.T) {
	rules := isolationRules([]BridgeEgress{{Name: "skg100", Egress: "snat"}, {Name: "skg200"}, {Name: "skg300", Egress: "routed"}})
	var got []string
	for _, r := range rules {
		got = append(got, r.chain+"|"+r.data)
	}
	slices.Sort(got)
	want := []string{
		"egress|snat:skg100",
		"|in:skg200",
		"|none:skg200",
	}
	for _, g := range []string{"skg100", "skg200", "skg300"} {
		for _, p := range []string{"skb", "skn", "skg"} {
			want = append(want, "|x:"+g+">"+p+"!"+g)
		}
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("rules:\n got %q\nwant %q", got, want)
	}
	// The masquerade and the none drop exclude every Skiff prefix.
	for _, r := range rules {
		if r.data != "snat:skg100" && r.data != "none:skg200" && r.data != "in:skg200" {
			continue
		}
		n := 0
		for _, e := range r.exprs {
			if c, ok := e.(*expr.Cmp); ok && c.Op == expr.CmpOpNeq && slices.Contains(skiffL3Prefixes, string(c.Data)) {
				n++
			}
		}
		if n != 3 {
			t.Errorf("%s compares %d Skiff prefixes, want 3", r.data, n)
		}
	}
}

// A network with a host port keeps ICMPv6 redirects from its pods (the
// output chain, by device); one without gets no such rule.
func TestIsolationRulesNoRedirect(t *testing.T) {
	rules := isolationRules([]BridgeEgress{{Name: "skg100", Egress: "snat", HostPort: "skn100"}, {Name: "skb200", Egress: "routed"}})
	var got []string
	for _, r := range rules {
		if r.chain == NftNoRedirectChain {
			got = append(got, r.data)
		}
	}
	if want := []string{"noredirect:skg100"}; !slices.Equal(got, want) {
		t.Errorf("output rules %q, want %q", got, want)
	}
}
