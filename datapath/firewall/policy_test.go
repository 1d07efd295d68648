package firewall

import (
	"net/netip"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/nl"
)

// The policy table: replies first; each isolated endpoint's traffic,
// by its device and address, jumps to its chain; a rule per peer, port
// and family (a group's set per family, a CIDR only in its family with
// its exceptions), ND let through, the rest dropped and counted; the
// endpoints written sorted; no endpoint, no table.
func TestPolicyTable(t *testing.T) {
	a := netip.MustParseAddr
	pol := Policy{
		Groups: map[string][]netip.Addr{"web": {a("198.51.100.11"), a("2001:db8::11")}},
		Endpoints: []Endpoint{
			{Name: "c", Device: "skb100", IPs: []netip.Addr{a("198.51.100.13"), a("2001:db8::13")}, IngressIsolated: true,
				Ingress: []Rule{
					{Peers: []Peer{{Group: "web"}}, Ports: []Port{{Proto: unix.IPPROTO_TCP, From: 80, To: 90}}},
					{Peers: []Peer{{CIDR: netip.MustParsePrefix("198.51.100.0/24"), Except: []netip.Prefix{netip.MustParsePrefix("198.51.100.11/32")}}}},
				}},
			{Name: "b", Device: "skb100", IPs: []netip.Addr{a("198.51.100.12")}, EgressIsolated: true},
		},
	}
	got := listing(pol.Table())
	want := `set web-4
set web-6
chain forward type filter hook forward priority 0; policy accept;
  ct state established,related accept # established
  iifname "skb100" meta nfproto ipv4 ip saddr 198.51.100.12 jump out-b # 
  oifname "skb100" meta nfproto ipv4 ip daddr 198.51.100.13 jump in-c # 
  oifname "skb100" meta nfproto ipv6 ip6 daddr 2001:db8::13 jump in-c # 
chain out-b 
  meta nfproto ipv6 icmpv6 type 133-137 return # nd
  counter drop # b/out/drop
chain in-c 
  meta nfproto ipv4 ip saddr @web-4 meta l4proto 6 th dport 80-90 counter return # c/in/0
  meta nfproto ipv6 ip6 saddr @web-6 meta l4proto 6 th dport 80-90 counter return # c/in/0
  meta nfproto ipv4 ip saddr 198.51.100.0/24 ip saddr != 198.51.100.11 counter return # c/in/1
  meta nfproto ipv6 icmpv6 type 133-137 return # nd
  counter drop # c/in/drop
`
	if got != want {
		t.Errorf("table:\n%s\nwant\n%s", got, want)
	}
	if n := len((Policy{Groups: pol.Groups}).Table().Chains); n != 0 {
		t.Errorf("no endpoint: %d chains, want none (the table is removed)", n)
	}
	// A group's members are set elements only: the rules stay.
	more := pol
	more.Groups = map[string][]netip.Addr{"web": {a("198.51.100.11"), a("198.51.100.12")}}
	if !reflect.DeepEqual(pol.Table().Chains, more.Table().Chains) {
		t.Error("a group's members changed the rules")
	}
}

// Counters are summed per endpoint, direction and compiled rule, the
// final drop as rule -1; rules without a counter tag are not counted.
func TestPolicyCounters(t *testing.T) {
	got := PolicyCounters([]nl.NftCounter{
		{Chain: "in-c", Tag: "c\x00in\x000", Packets: 3, Bytes: 300},
		{Chain: "in-c", Tag: "c\x00in\x000", Packets: 1, Bytes: 100},
		{Chain: "in-c", Tag: "c\x00in\x00drop", Packets: 2, Bytes: 120},
		{Chain: "out-b", Tag: "b\x00out\x00drop", Packets: 5, Bytes: 500},
		{Chain: "forward", Tag: "established", Packets: 9},
	})
	want := []datapath.PolicyCounter{
		{Endpoint: "b", Direction: datapath.Egress, Rule: -1, Packets: 5, Bytes: 500},
		{Endpoint: "c", Direction: datapath.Ingress, Rule: -1, Packets: 2, Bytes: 120},
		{Endpoint: "c", Direction: datapath.Ingress, Rule: 0, Packets: 4, Bytes: 400},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("counters %+v, want %+v", got, want)
	}
}
