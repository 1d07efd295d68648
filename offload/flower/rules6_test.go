package flower

import (
	"net/netip"
	"testing"
)

// A dual-stack network: IPv6 unicast rides the dst_mac rules (every
// protocol); IPv6 multicast (neighbour solicitations to solicited-node
// groups, DAD, MLD) is flooded as broadcast is: from an endpoint to the
// other local endpoints, the gateway and the remote VTEPs; from the tunnel
// and from the gateway to the local endpoints. ARP rules stay IPv4 only;
// the gateway's IPv6 address is solicited through the flood.
func TestCompileDualStack(t *testing.T) {
	p, reps := dualBase()
	n := p.Networks["blue"]
	n.Subnets[0].Gateway, n.Subnets[1].Gateway = netip.MustParseAddr("198.51.100.254"), netip.MustParseAddr("2001:db8:100::fe")
	p.Networks["blue"] = n
	in := Input{Reps: reps, VXLAN: "skvx", Gateways: map[string]Gateway{
		"blue": {Port: "skh100", MAC: "02:73:6b:00:00:64", IPs: vteps("198.51.100.254", "2001:db8:100::fe")}}}
	const m6 = "dst_mac 33:33:00:00:00:00/ff:ff:00:00:00:00"
	expect(t, "dual stack", in, p, sorted(baseRules, []string{
		"repa ARP tip 198.51.100.254 action redirect:skh100 [gateway a]",
		"repa UNI dst_mac 02:73:6b:00:00:64 action redirect:skh100 [gateway a]",
		"repb ARP tip 198.51.100.254 action redirect:skh100 [gateway b]",
		"repb UNI dst_mac 02:73:6b:00:00:64 action redirect:skh100 [gateway b]",
		"skh100 ARP tip 198.51.100.10 action redirect:repa [gateway a]",
		"skh100 ARP tip 198.51.100.11 action redirect:repb [gateway b]",
		"skh100 UNI dst_mac 02:00:00:00:00:0a action redirect:repa [gateway a]",
		"skh100 UNI dst_mac 02:00:00:00:00:0b action redirect:repb [gateway b]",
	}))
}
