package offload

import (
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/datapath/firewall"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestGatewayEgress runs on the host kernel (root, no flower needed) and in the kernel VM: the
// node's-stack half of egress on an offload node. The datapath makes the
// gateways of three networks (snat, none, routed) and their egress; each
// gateway's eswitch side (skh<VNI>), which the flower rules would link to
// the pods' representors, is moved into a pod namespace instead, so the
// pod sits right behind its gateway. An "inet" namespace on the node's
// uplink stands for the outside (no route back to pod addresses unless
// the test adds one). Real TCP connections show what the outside sees.
func TestGatewayEgress(t *testing.T) {
	testkit.Require(t)
	node, inet := "skgwnode", "skgwinet"
	guest.AddNetns(t, node)
	guest.AddNetns(t, inet)
	// A new namespace copies IPv4 settings from the root one: start
	// from a node that does not forward.
	guest.In(t, node, "/bin/sh", "-c", "echo 0 > /proc/sys/net/ipv4/ip_forward")
	const outside = "203.0.113.200"
	uplink(t, node, inet, "192.0.2.1/24", "192.0.2.254/24", outside+"/32")

	pods := map[string]string{}   // network -> pod namespace
	podIPs := map[string]string{} // network -> pod address
	nets := []gatewayNet{
		{"pods", plan.EgressSNAT, "198.51.100.0/25", "198.51.100.1", "198.51.100.10", 100},
		{"tenant", plan.EgressNone, "198.51.100.128/25", "198.51.100.129", "198.51.100.130", 200},
		{"flat", plan.EgressRouted, "203.0.113.0/25", "203.0.113.1", "203.0.113.10", 300},
	}
	for _, n := range nets {
		podIPs[n.name] = n.pod
	}
	p, reps := gatewayPlan(nets)
	dp, gws := gatewayDatapath(t, node, p, reps)
	defer dp.Close()
	if err := dp.egress(p, gws, nil); err != nil {
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
	if tables, err := dp.k.Tables(nl.NftInet); err != nil || !slices.Contains(tables, firewall.IsolationTable) {
		t.Errorf("the node has inet tables %v (%v), want %s", tables, err, firewall.IsolationTable)
	}
	reapplyWritesNothing(t, dp, p, gws)

	// Each pod right behind its gateway's eswitch side.
	for name, n := range p.Networks {
		pods[name] = behindGateway(t, node, "skgwpod", n.VNI, fmt.Sprintf("%s/%d", podIPs[name], n.Subnets[0].CIDR.Bits()), n.Subnets[0].Gateway.String())
	}

	// snat: out, seen as the node's address, with no route back.
	if seen, err := testkit.SourceSeen(pods["pods"], inet, outside); err != nil || seen != "192.0.2.1" {
		t.Errorf("snat pod to the outside: seen from %q (%v), want the node's 192.0.2.1", seen, err)
	}
	// none: nothing out even with a route back, nothing in; the snat
	// pod cannot reach the none pod through the node either.
	ipIn(t, inet, "route", "add", "198.51.100.128/25", "via", "192.0.2.1")
	if seen, err := testkit.SourceSeen(pods["tenant"], inet, outside); err == nil {
		t.Errorf("a pod of a network with egress none reached the outside (seen from %s)", seen)
	}
	if _, err := try(inet, "/bin/ping", "-c", "1", "-W", "1", podIPs["tenant"]); err == nil {
		t.Error("the outside reached a pod of a network with egress none")
	}
	if _, err := try(pods["pods"], "/bin/ping", "-c", "1", "-W", "1", podIPs["tenant"]); err == nil {
		t.Error("the snat pod reached the none network's pod through the node")
	}
	if _, err := try(pods["flat"], "/bin/ping", "-c", "1", "-W", "1", podIPs["pods"]); err == nil {
		t.Error("the routed pod reached the snat network's pod through the node")
	}
	// routed: its own address, answered once the outside routes back.
	if seen, err := testkit.SourceSeen(pods["flat"], inet, outside); err == nil {
		t.Errorf("a routed pod was answered by an outside with no route back (seen from %s): translated", seen)
	}
	ipIn(t, inet, "route", "add", "203.0.113.0/25", "via", "192.0.2.1")
	if seen, err := testkit.SourceSeen(pods["flat"], inet, outside); err != nil || seen != podIPs["flat"] {
		t.Errorf("routed pod to the outside: seen from %q (%v), want its own %s", seen, err, podIPs["flat"])
	}

	// snat becomes none: its gateway stops forwarding, its pod is cut off.
	n := p.Networks["pods"]
	n.Egress = plan.EgressNone
	p.Networks["pods"] = n
	if err := dp.egress(p, gws, nil); err != nil {
		t.Fatal(err)
	}
	if v := sysctl(t, node, "net/ipv4/conf/"+GatewayName(100)+"/forwarding"); v != "0" {
		t.Errorf("forwarding on %s after snat -> none: %s", GatewayName(100), v)
	}
	if seen, err := testkit.SourceSeen(pods["pods"], inet, outside); err == nil {
		t.Errorf("after snat -> none the pod still reached the outside (seen from %s)", seen)
	}
	// No gateway left: the table goes.
	if err := dp.egress(p, nil, nil); err != nil {
		t.Fatal(err)
	}
	if tables, err := dp.k.Tables(nl.NftInet); err != nil || slices.Contains(tables, firewall.IsolationTable) {
		t.Errorf("with no gateway the node keeps inet tables %v (%v)", tables, err)
	}
}

// gatewayNet is a network of the gateway tests, with one local
// endpoint (a veth pod at address pod).
type gatewayNet struct {
	name, egress, cidr, gw, pod string
	vni                         uint32
}

// gatewayPlan returns node n1's plan (underlay 192.0.2.1) holding the
// networks and their endpoints, and the representors gateways asks
// for (only which networks have a plumbed endpoint counts).
func gatewayPlan(nets []gatewayNet) (plan.Plan, map[string]string) {
	p := plan.New("n1")
	p.UnderlayIP = netip.MustParseAddr("192.0.2.1")
	reps := map[string]string{}
	for _, n := range nets {
		cidr := netip.MustParsePrefix(n.cidr)
		p.Networks[n.name] = plan.Network{Name: n.name, VNI: n.vni, MTU: 1450, Egress: n.egress,
			Subnets: []plan.Subnet{{Name: n.name + "-v4", Network: n.name, CIDR: cidr, Gateway: netip.MustParseAddr(n.gw)}}}
		ep := "ep-" + n.name
		p.Local[ep] = plan.Endpoint{Name: ep, Network: n.name, Kind: plan.KindVeth, VFIndex: -1,
			IPs: []netip.Prefix{netip.PrefixFrom(netip.MustParseAddr(n.pod), cidr.Bits())}}
		reps[ep] = "unused"
	}
	return p, reps
}

// gatewayDatapath opens the offload datapath of the named namespace
// and makes the plan's gateways, one per network (the caller closes
// it).
func gatewayDatapath(t *testing.T, node string, p plan.Plan, reps map[string]string) (*Datapath, map[string]flower.Gateway) {
	t.Helper()
	dp, err := New(Options{NetNS: testkit.Path(node)})
	if err != nil {
		t.Fatal(err)
	}
	byName, err := dp.links()
	if err != nil {
		dp.Close()
		t.Fatal(err)
	}
	gws, err := dp.gateways(p, reps, byName)
	if err != nil || len(gws) != len(p.Networks) {
		dp.Close()
		t.Fatalf("gateways: %v, %d made", err, len(gws))
	}
	return dp, gws
}

// The helpers work on the host and in the kernel VM (iproute2 by full
// path: the VM's busybox applets shadow PATH).
func sysctl(t *testing.T, ns, key string) string {
	t.Helper()
	return strings.TrimSpace(guest.In(t, ns, "/bin/cat", "/proc/sys/"+key))
}

// reapplyWritesNothing fails t if applying egress again for p writes a
// sysctl or nftables.
func reapplyWritesNothing(t *testing.T, dp *Datapath, p plan.Plan, gws map[string]flower.Gateway) {
	t.Helper()
	w0 := dp.Writes()
	if err := dp.egress(p, gws, nil); err != nil {
		t.Fatal(err)
	}
	if dp.Writes() != w0 {
		t.Errorf("re-applying egress wrote %d times (sysctls, nftables)", dp.Writes()-w0)
	}
}

// behindGateway moves the eswitch side of network vni's gateway from the
// node into a new pod namespace (prefix+vni), gives it addr (with its
// length; IPv6 without duplicate address detection) and a default route
// via gw, and returns the namespace.
func behindGateway(t *testing.T, node, prefix string, vni uint32, addr, gw string) string {
	t.Helper()
	pod := fmt.Sprintf("%s%d", prefix, vni)
	guest.AddNetns(t, pod)
	port := GatewayPortName(vni)
	ipIn(t, node, "link", "set", port, "netns", pod)
	family, dad := "-4", []string{}
	if strings.Contains(gw, ":") {
		family, dad = "-6", []string{"nodad"}
	}
	ipIn(t, pod, append([]string{"addr", "add", addr, "dev", port}, dad...)...)
	ipIn(t, pod, "link", "set", port, "up")
	ipIn(t, pod, family, "route", "add", "default", "via", gw)
	return pod
}

func ipIn(t *testing.T, ns string, args ...string) string {
	t.Helper()
	return guest.In(t, ns, append([]string{guest.IP}, args...)...)
}

func try(ns string, args ...string) (string, error) {
	out, err := exec.Command(guest.IP, append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	return string(out), err
}

// uplink links node (up0, at nodeAddr) to the outside namespace inet
// (eth0, at inetAddr), which holds the address outside on its loopback;
// the node routes outside through inet. No route leads back.
func uplink(t *testing.T, node, inet, nodeAddr, inetAddr, outside string) {
	t.Helper()
	ipIn(t, node, "link", "add", "up0", "type", "veth", "peer", "name", "eth0", "netns", inet)
	ipIn(t, node, "addr", "add", nodeAddr, "dev", "up0", "nodad")
	ipIn(t, node, "link", "set", "up0", "up")
	ipIn(t, inet, "addr", "add", inetAddr, "dev", "eth0", "nodad")
	ipIn(t, inet, "link", "set", "eth0", "up")
	ipIn(t, inet, "addr", "add", outside, "dev", "lo")
	via, _, _ := strings.Cut(inetAddr, "/")
	ipIn(t, node, "route", "add", outside, "via", via)
}
