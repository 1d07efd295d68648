package datapath

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/internal/testns"
)

// TestGatewayEgress runs on the host kernel (root, no flower needed): the
// node's-stack half of egress on an offload node. The datapath makes the
// gateways of three networks (snat, none, routed) and their egress; each
// gateway's eswitch side (skh<VNI>), which the flower rules would link to
// the pods' representors, is moved into a pod namespace instead, so the
// pod sits right behind its gateway. An "inet" namespace on the node's
// uplink stands for the outside (no route back to pod addresses unless
// the test adds one). Real TCP connections show what the outside sees.
func TestGatewayEgress(t *testing.T) {
	node, inet := testns.New(t), testns.New(t)
	testns.Run(t, node, "ip", "link", "add", "up0", "type", "veth", "peer", "name", "eth0", "netns", inet)
	testns.Run(t, node, "ip", "addr", "add", "192.0.2.1/24", "dev", "up0")
	testns.Run(t, node, "ip", "link", "set", "up0", "up")
	testns.Run(t, inet, "ip", "addr", "add", "192.0.2.254/24", "dev", "eth0")
	testns.Run(t, inet, "ip", "link", "set", "eth0", "up")
	const outside = "203.0.113.200"
	testns.Run(t, inet, "ip", "addr", "add", outside+"/32", "dev", "lo")
	testns.Run(t, node, "ip", "route", "add", outside+"/32", "via", "192.0.2.254")

	p := plan.New("n1")
	p.UnderlayIP = netip.MustParseAddr("192.0.2.1")
	reps := map[string]string{}
	pods := map[string]string{}   // network -> pod namespace
	podIPs := map[string]string{} // network -> pod address
	for _, n := range []struct {
		name, egress, cidr, gw, pod string
		vni                         uint32
	}{
		{"pods", plan.EgressSNAT, "198.51.100.0/25", "198.51.100.1", "198.51.100.10", 100},
		{"tenant", plan.EgressNone, "198.51.100.128/25", "198.51.100.129", "198.51.100.130", 200},
		{"flat", plan.EgressRouted, "203.0.113.0/25", "203.0.113.1", "203.0.113.10", 300},
	} {
		cidr := netip.MustParsePrefix(n.cidr)
		p.Networks[n.name] = plan.Network{Name: n.name, VNI: n.vni, MTU: 1450, Egress: n.egress,
			Subnets: []plan.Subnet{{Name: n.name + "-v4", Network: n.name, CIDR: cidr, Gateway: netip.MustParseAddr(n.gw)}}}
		ep := "ep-" + n.name
		p.Local[ep] = plan.Endpoint{Name: ep, Network: n.name, Kind: plan.KindVeth, VFIndex: -1,
			IPs: []netip.Prefix{netip.PrefixFrom(netip.MustParseAddr(n.pod), cidr.Bits())}}
		reps[ep] = "unused" // gateways only asks which networks have a plumbed endpoint
		podIPs[n.name] = n.pod
	}
	dp, err := New(Options{NetNS: testns.Path(node)})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	byName, err := dp.links()
	if err != nil {
		t.Fatal(err)
	}
	gws, err := dp.gateways(p, reps, byName)
	if err != nil || len(gws) != 3 {
		t.Fatalf("gateways: %v, %d made", err, len(gws))
	}
	if v := sysctl(t, node, "net/ipv4/ip_forward"); v != "0" {
		t.Fatalf("a new namespace forwards already (ip_forward %s): the test shows nothing", v)
	}
	if err := dp.egress(p, gws); err != nil {
		t.Fatal(err)
	}
	for gw, want := range map[string]string{"ip_forward": "1", GatewayName(100): "1", GatewayName(200): "0", GatewayName(300): "1"} {
		key := "net/ipv4/conf/" + gw + "/forwarding"
		if gw == "ip_forward" {
			key = "net/ipv4/ip_forward"
		}
		if v := sysctl(t, node, key); v != want {
			t.Errorf("%s = %s, want %s", key, v, want)
		}
	}
	table := testns.Run(t, node, "nft", "list", "table", "inet", nl.NftTable)
	for _, want := range []string{`iifname "skg100" oifname != "skb*" oifname != "skn*" oifname != "skg*" masquerade`,
		`iifname "skg200" oifname != "skb*" oifname != "skn*" oifname != "skg*" drop`,
		`iifname "skg100" oifname "skg*" oifname != "skg100" drop`} {
		if !strings.Contains(table, want) {
			t.Errorf("table inet %s lacks %q:\n%s", nl.NftTable, want, table)
		}
	}
	// Re-applying writes nothing.
	w0, f0 := dp.Writes(), dp.fw.Writes()
	if err := dp.egress(p, gws); err != nil {
		t.Fatal(err)
	}
	if dp.Writes() != w0 || dp.fw.Writes() != f0 {
		t.Errorf("re-applying egress wrote: %d sysctl, %d nftables", dp.Writes()-w0, dp.fw.Writes()-f0)
	}

	// Each pod right behind its gateway's eswitch side.
	for name, n := range p.Networks {
		pod := testns.New(t)
		pods[name] = pod
		port := GatewayPortName(n.VNI)
		testns.Run(t, node, "ip", "link", "set", port, "netns", pod)
		testns.Run(t, pod, "ip", "addr", "add", fmt.Sprintf("%s/%d", podIPs[name], n.Subnets[0].CIDR.Bits()), "dev", port)
		testns.Run(t, pod, "ip", "link", "set", port, "up")
		testns.Run(t, pod, "ip", "route", "add", "default", "via", n.Subnets[0].Gateway.String())
	}

	// snat: out, seen as the node's address, with no route back.
	if seen, err := seenFrom(pods["pods"], inet, outside); err != nil || seen != "192.0.2.1" {
		t.Errorf("snat pod to the outside: seen from %q (%v), want the node's 192.0.2.1", seen, err)
	}
	// none: nothing out even with a route back, nothing in; the snat
	// pod cannot reach the none pod through the node either.
	testns.Run(t, inet, "ip", "route", "add", "198.51.100.128/25", "via", "192.0.2.1")
	if seen, err := seenFrom(pods["tenant"], inet, outside); err == nil {
		t.Errorf("a pod of a network with egress none reached the outside (seen from %s)", seen)
	}
	if _, err := testns.Try(inet, "ping", "-c", "1", "-W", "1", podIPs["tenant"]); err == nil {
		t.Error("the outside reached a pod of a network with egress none")
	}
	if _, err := testns.Try(pods["pods"], "ping", "-c", "1", "-W", "1", podIPs["tenant"]); err == nil {
		t.Error("the snat pod reached the none network's pod through the node")
	}
	if _, err := testns.Try(pods["flat"], "ping", "-c", "1", "-W", "1", podIPs["pods"]); err == nil {
		t.Error("the routed pod reached the snat network's pod through the node")
	}
	// routed: its own address, answered once the outside routes back.
	if seen, err := seenFrom(pods["flat"], inet, outside); err == nil {
		t.Errorf("a routed pod was answered by an outside with no route back (seen from %s): translated", seen)
	}
	testns.Run(t, inet, "ip", "route", "add", "203.0.113.0/25", "via", "192.0.2.1")
	if seen, err := seenFrom(pods["flat"], inet, outside); err != nil || seen != podIPs["flat"] {
		t.Errorf("routed pod to the outside: seen from %q (%v), want its own %s", seen, err, podIPs["flat"])
	}

	// snat becomes none: its gateway stops forwarding, its pod is cut off.
	n := p.Networks["pods"]
	n.Egress = plan.EgressNone
	p.Networks["pods"] = n
	if err := dp.egress(p, gws); err != nil {
		t.Fatal(err)
	}
	if v := sysctl(t, node, "net/ipv4/conf/"+GatewayName(100)+"/forwarding"); v != "0" {
		t.Errorf("forwarding on %s after snat -> none: %s", GatewayName(100), v)
	}
	if seen, err := seenFrom(pods["pods"], inet, outside); err == nil {
		t.Errorf("after snat -> none the pod still reached the outside (seen from %s)", seen)
	}
	// No gateway left: the table goes.
	if err := dp.egress(p, nil); err != nil {
		t.Fatal(err)
	}
	if tables, err := nl.InetTables(testns.Path(node)); err != nil || strings.Contains(strings.Join(tables, " "), nl.NftTable) {
		t.Errorf("with no gateway the node keeps inet tables %v (%v)", tables, err)
	}
}

func sysctl(t *testing.T, ns, key string) string {
	t.Helper()
	return strings.TrimSpace(testns.Run(t, ns, "cat", "/proc/sys/"+key))
}

// seenFrom connects over TCP from namespace from to addr:8080, served in
// namespace to, and returns the source address the server saw.
func seenFrom(from, to, addr string) (string, error) {
	var l net.Listener
	if err := nl.InNetNS(testns.Path(to), func() (err error) {
		l, err = net.Listen("tcp", net.JoinHostPort(addr, "8080"))
		return err
	}); err != nil {
		return "", err
	}
	defer l.Close()
	seen := make(chan string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			seen <- ""
			return
		}
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		c.Close()
		seen <- host
	}()
	var c net.Conn
	if err := nl.InNetNS(testns.Path(from), func() (err error) {
		c, err = net.DialTimeout("tcp", net.JoinHostPort(addr, "8080"), 2*time.Second)
		return err
	}); err != nil {
		return "", err
	}
	c.Close()
	return <-seen, nil
}
