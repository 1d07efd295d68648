package offload

import (
	"net/netip"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestGatewayEgressIPv6 is TestGatewayEgress's IPv6 half (host kernel
// and kernel VM): two dual-stack networks, pods (snat) and tenant
// (none), each pod right behind its gateway's eswitch side. The node
// turns IPv6 forwarding on for the snat network's IPv6 subnet, and its
// gateway routes like a router while the none network's does not; the
// snat pod reaches an IPv6 outside masqueraded to the node's address,
// the none pod does not (even with a route back), and the snat pod
// cannot reach the none pod through the node.
func TestGatewayEgressIPv6(t *testing.T) {
	testkit.Require(t)
	node, inet := "skgw6node", "skgw6inet"
	guest.AddNetns(t, node)
	guest.AddNetns(t, inet)
	guest.In(t, node, "/bin/sh", "-c", "echo 0 > /proc/sys/net/ipv6/conf/all/forwarding")
	const outside = "2001:db8:ee::200"
	uplink(t, node, inet, "2001:db8:ff::1/64", "2001:db8:ff::fe/64", outside+"/128")

	nets := []gatewayNet{
		{"pods", plan.EgressSNAT, "198.51.100.0/25", "198.51.100.1", "198.51.100.10", 100},
		{"tenant", plan.EgressNone, "198.51.100.128/25", "198.51.100.129", "198.51.100.130", 200},
	}
	v6 := map[string][2]string{ // network -> gateway, pod
		"pods":   {"2001:db8:100::1", "2001:db8:100::10"},
		"tenant": {"2001:db8:200::1", "2001:db8:200::10"},
	}
	p, reps := gatewayPlan(nets)
	for name, a := range v6 {
		n := p.Networks[name]
		cidr := netip.PrefixFrom(netip.MustParseAddr(a[0]), 64).Masked()
		n.Subnets = append(n.Subnets, plan.Subnet{Name: name + "-v6", Network: name, CIDR: cidr, Gateway: netip.MustParseAddr(a[0])})
		p.Networks[name] = n
		ep := p.Local["ep-"+name]
		ep.IPs = append(ep.IPs, netip.PrefixFrom(netip.MustParseAddr(a[1]), 64))
		p.Local["ep-"+name] = ep
	}
	dp, gws := gatewayDatapath(t, node, p, reps)
	defer dp.Close()
	if err := dp.egress(p, gws, nil); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"all": "1", GatewayName(100): "1", GatewayName(200): "0",
	} {
		if v := sysctl(t, node, "net/ipv6/conf/"+key+"/forwarding"); v != want {
			t.Errorf("net.ipv6.conf.%s.forwarding = %s, want %s", key, v, want)
		}
	}
	reapplyWritesNothing(t, dp, p, gws)

	pods := map[string]string{}
	for name, n := range p.Networks {
		pods[name] = behindGateway(t, node, "skgw6pod", n.VNI, v6[name][1]+"/64", v6[name][0])
	}

	if seen, err := testkit.SourceSeen(pods["pods"], inet, outside); err != nil || seen != "2001:db8:ff::1" {
		t.Errorf("snat pod to the IPv6 outside: seen from %q (%v), want the node's 2001:db8:ff::1", seen, err)
	}
	ipIn(t, inet, "-6", "route", "add", "2001:db8:200::/64", "via", "2001:db8:ff::1")
	if seen, err := testkit.SourceSeen(pods["tenant"], inet, outside); err == nil {
		t.Errorf("a pod of a network with egress none reached the IPv6 outside (seen from %s)", seen)
	}
	if _, err := try(inet, "/bin/ping", "-6", "-c", "1", "-W", "1", v6["tenant"][1]); err == nil {
		t.Error("the IPv6 outside reached a pod of a network with egress none")
	}
	if _, err := try(pods["pods"], "/bin/ping", "-6", "-c", "1", "-W", "1", v6["tenant"][1]); err == nil {
		t.Error("the snat pod reached the none network's pod through the node over IPv6")
	}
}
