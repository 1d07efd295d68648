package firewall

import (
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// listing is a table as nft-like text: each chain's declaration, then
// its rules with their tags.
func listing(t nl.NftTable) string {
	var b strings.Builder
	for _, s := range t.Sets {
		b.WriteString("set " + s.Name + "\n")
	}
	for _, c := range t.Chains {
		b.WriteString("chain " + c.Name + " " + c.Header() + "\n")
		for _, r := range c.Rules {
			b.WriteString("  " + r.String() + " # " + strings.ReplaceAll(r.Tag, "\x00", "/") + "\n")
		}
	}
	return b.String()
}

// The offload datapath's gateways (skg) are network devices like bridges:
// each is kept from every other network's bridge, host port and gateway,
// a none gateway routes nothing out or in, a snat gateway masquerades
// what leaves for anything that is not Skiff's; devices come in any
// order and are written sorted.
func TestIsolationGateways(t *testing.T) {
	got := listing(Isolation([]Device{{Name: "skg300", Egress: "routed"}, {Name: "skg100", Egress: "snat"}, {Name: "skg200"}}))
	want := `chain isolate type filter hook forward priority 0; policy accept;
  iifname "skg100" oifname "skb*" oifname != "skg100" drop # x:skg100>skb!skg100
  iifname "skg100" oifname "skn*" oifname != "skg100" drop # x:skg100>skn!skg100
  iifname "skg100" oifname "skg*" oifname != "skg100" drop # x:skg100>skg!skg100
  iifname "skg200" oifname "skb*" oifname != "skg200" drop # x:skg200>skb!skg200
  iifname "skg200" oifname "skn*" oifname != "skg200" drop # x:skg200>skn!skg200
  iifname "skg200" oifname "skg*" oifname != "skg200" drop # x:skg200>skg!skg200
  iifname "skg200" oifname != "skb*" oifname != "skn*" oifname != "skg*" drop # none:skg200
  iifname != "skb*" iifname != "skn*" iifname != "skg*" oifname "skg200" drop # in:skg200
  iifname "skg300" oifname "skb*" oifname != "skg300" drop # x:skg300>skb!skg300
  iifname "skg300" oifname "skn*" oifname != "skg300" drop # x:skg300>skn!skg300
  iifname "skg300" oifname "skg*" oifname != "skg300" drop # x:skg300>skg!skg300
chain egress type nat hook postrouting priority 100; policy accept;
  iifname "skg100" oifname != "skb*" oifname != "skn*" oifname != "skg*" masquerade # snat:skg100
`
	if got != want {
		t.Errorf("table:\n%s\nwant\n%s", got, want)
	}
}

// A network with a host port keeps ICMPv6 redirects from its pods (the
// output chain, by device), counts its host port as its own, and on a
// bridge keeps the host port's frames from conntrack; one without gets
// none of these; the reply mark is a postrouting rule of its own.
func TestIsolationHostPorts(t *testing.T) {
	got := listing(Isolation([]Device{
		{Name: "skb100", Egress: "snat", HostPort: "skn100", HostMAC: "06:64:c0:00:02:01"},
		{Name: "skg200", Egress: "routed", ReplyMark: 0x200000},
	}))
	want := `chain isolate type filter hook forward priority 0; policy accept;
  iifname "skb100" oifname "skb*" oifname != "skb100" oifname != "skn100" drop # x:skb100>skb!skb100,skn100
  iifname "skb100" oifname "skn*" oifname != "skb100" oifname != "skn100" drop # x:skb100>skn!skb100,skn100
  iifname "skb100" oifname "skg*" oifname != "skb100" oifname != "skn100" drop # x:skb100>skg!skb100,skn100
  iifname "skn100" oifname "skb*" oifname != "skb100" oifname != "skn100" drop # x:skn100>skb!skb100,skn100
  iifname "skn100" oifname "skn*" oifname != "skb100" oifname != "skn100" drop # x:skn100>skn!skb100,skn100
  iifname "skn100" oifname "skg*" oifname != "skb100" oifname != "skn100" drop # x:skn100>skg!skb100,skn100
  iifname "skg200" oifname "skb*" oifname != "skg200" drop # x:skg200>skb!skg200
  iifname "skg200" oifname "skn*" oifname != "skg200" drop # x:skg200>skn!skg200
  iifname "skg200" oifname "skg*" oifname != "skg200" drop # x:skg200>skg!skg200
chain egress type nat hook postrouting priority 100; policy accept;
  iifname "skb100" oifname != "skb*" oifname != "skn*" oifname != "skg*" masquerade # snat:skb100
  iifname "skn100" oifname != "skb*" oifname != "skn*" oifname != "skg*" masquerade # snat:skn100
chain untrack type filter hook prerouting priority -300; policy accept;
  iifname "skb100" ether daddr 06:64:c0:00:02:01 notrack # untrack:dst:skb100:06:64:c0:00:02:01
  iifname "skb100" ether saddr 06:64:c0:00:02:01 notrack # untrack:src:skb100:06:64:c0:00:02:01
chain replies type filter hook postrouting priority -150; policy accept;
  oifname "skg200" ct state established,related meta mark set mark | 0x200000 # reply:skg200:0x200000
chain noredirect type filter hook output priority 0; policy accept;
  oifname "skb100" icmpv6 type 137 drop # noredirect:skb100
`
	if got != want {
		t.Errorf("table:\n%s\nwant\n%s", got, want)
	}
	if n := len(Isolation(nil).Chains); n != 0 {
		t.Errorf("no device: %d chains, want none (the table is removed)", n)
	}
}
