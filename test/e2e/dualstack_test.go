package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/testns"
)

// dualPod is a pod made by the CNI plugin on a dual-stack network.
type dualPod struct {
	ns       string
	v4, v6   string // addresses
	res      cniResult
	resultJS string
}

// addDualPod runs the CNI's ADD for a new pod namespace on network at
// node and returns the pod with its IPv4 and IPv6 addresses; the result
// must list both, each with its family's gateway and default route.
func (c *cluster) addDualPod(t *testing.T, id, network, node, gw4, gw6 string) dualPod {
	t.Helper()
	p := dualPod{ns: testns.New(t)}
	out, err := cniRun("ADD", id, testns.Path(p.ns), "eth0", cniConf(network, c.nodes[node].socket, "1.1.0"))
	if err != nil {
		t.Fatalf("ADD %s: %v", id, err)
	}
	p.resultJS = out
	if err := json.Unmarshal([]byte(out), &p.res); err != nil {
		t.Fatalf("ADD %s printed %q: %v", id, out, err)
	}
	routes := map[string]string{}
	for _, r := range p.res.Routes {
		routes[r.Dst] = r.GW
	}
	for _, ip := range p.res.IPs {
		a := netip.MustParsePrefix(ip.Address)
		want, dflt := gw4, "0.0.0.0/0"
		if a.Addr().Is6() {
			want, dflt = gw6, "::/0"
			p.v6 = a.Addr().String()
		} else {
			p.v4 = a.Addr().String()
		}
		if ip.Gateway != want || ip.Interface == nil || *ip.Interface != 1 {
			t.Errorf("ADD %s: address %s has gateway %q (interface %v), want %s on the pod's interface", id, ip.Address, ip.Gateway, ip.Interface, want)
		}
		if routes[dflt] != want {
			t.Errorf("ADD %s: default route %s via %q, want %s", id, dflt, routes[dflt], want)
		}
	}
	if p.v4 == "" || p.v6 == "" || len(p.res.IPs) != 2 {
		t.Fatalf("ADD %s: want one IPv4 and one IPv6 address, got %s", id, out)
	}
	return p
}

// TestDualStack: a network with an IPv4 and an IPv6 subnet gives every
// pod both addresses (the CNI result lists both, with their gateways);
// IPv6 ping and TCP work between pods on two nodes over the VXLAN overlay
// and on one node, each pod's IPv6 gateway answers on its own node, and
// neither the pods' nor the gateway's addresses are left tentative or
// failed by duplicate address detection (every node holds the gateway).
func TestDualStack(t *testing.T) {
	c := newCluster(t, "n1", "n2")
	c.mustCtl("network", "create", "ds", "--vni", "100")
	c.mustCtl("subnet", "create", "ds-v4", "--network", "ds", "--cidr", "198.51.100.0/24")
	c.mustCtl("subnet", "create", "ds-v6", "--network", "ds", "--cidr", "2001:db8:100::/64")
	const gw4, gw6 = "198.51.100.1", "2001:db8:100::1"
	c.waitCNI(t, "ds")
	a := c.addDualPod(t, "pod-a", "ds", "n1", gw4, gw6)
	b := c.addDualPod(t, "pod-b", "ds", "n2", gw4, gw6)
	l := c.addDualPod(t, "pod-l", "ds", "n1", gw4, gw6)

	// The pod's interface: both addresses, a default route per family.
	if out := testns.Run(t, a.ns, "ip", "-6", "route", "show", "default"); !strings.Contains(out, "via "+gw6) {
		t.Errorf("pod a's IPv6 default route is not via the gateway %s: %q", gw6, out)
	}
	for _, p := range []dualPod{a, b, l} {
		// Across nodes (a-b), on one node (a-l), and the gateway.
		for _, dst := range []string{gw6, b.v6, l.v6, a.v6} {
			if dst == p.v6 {
				continue
			}
			testns.Run(t, p.ns, "ping", "-6", "-c", "1", "-W", "2", dst)
		}
		testns.Run(t, p.ns, "ping", "-c", "1", "-W", "2", gw4)
	}
	testns.Run(t, a.ns, "ping", "-c", "1", "-W", "2", b.v4)
	listenIn(t, b.ns, net.JoinHostPort(b.v6, "8080"))
	listenIn(t, l.ns, net.JoinHostPort(l.v6, "8080"))
	eventually(t, func() error {
		for _, dst := range []string{b.v6, l.v6} {
			if !connects(a.ns, dst, "8080") {
				return fmt.Errorf("pod a does not connect to [%s]:8080", dst)
			}
		}
		return nil
	})
	// Duplicate address detection: nothing tentative or failed, in the
	// pods and on the nodes' bridges.
	for _, ns := range []string{a.ns, b.ns, c.nodes["n1"].ns, c.nodes["n2"].ns} {
		if out := testns.Run(t, ns, "ip", "-6", "addr", "show"); strings.Contains(out, "tentative") || strings.Contains(out, "dadfailed") {
			t.Errorf("an IPv6 address is tentative or failed DAD:\n%s", out)
		}
	}
	// The gateway's IPv6 address is on each node's bridge, with the
	// network's gateway MAC answering for it.
	for _, n := range []string{"n1", "n2"} {
		if out := testns.Run(t, c.nodes[n].ns, "ip", "-6", "addr", "show", "dev", "skb100"); !strings.Contains(out, gw6+"/64") {
			t.Errorf("%s: the bridge lacks the IPv6 gateway %s/64:\n%s", n, gw6, out)
		}
	}
}
