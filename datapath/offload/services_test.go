package offload

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestGatewayServiceDNAT runs on the host kernel (root, no flower
// needed) and in the kernel VM: the node's-stack half of a Service on an
// offload node. The datapath makes the gateways of a snat network (with
// a host port) and a none network; a bridge in a namespace of its own
// stands for the eswitch's switching between the snat gateway's eswitch
// side (skh100) and two pods, c and a; the none network's pod sits
// right behind its gateway. The test writes kube-proxy's DNAT (a
// ClusterIP to a, another to the none pod) in the node's namespace. c's
// connection to the ClusterIP reaches a with c's own address, not
// masqueraded (counted in a's namespace: SYNs from c, none from the
// gateway); the reply's reverse translation is the flower rules' (act_ct
// nat on the rule delivering to c, which the bridge here does not do:
// test/kernelvm/egressvm TestOffloadServices shows the whole path). The
// ClusterIP of the none network's pod takes c nowhere.
func TestGatewayServiceDNAT(t *testing.T) {
	testkit.Require(t)
	if _, err := os.Stat(guest.NFT); err != nil {
		t.Fatalf("no %s (Debian's nftables: hack/deps.sh installs it on the host, the kernel VM's image carries it): %v", guest.NFT, err)
	}
	node, sw := "sksvcnode", "sksvcsw"
	guest.AddNetns(t, node)
	guest.AddNetns(t, sw)
	guest.In(t, node, "/bin/sh", "-c", "echo 0 > /proc/sys/net/ipv4/ip_forward")

	p, reps := gatewayPlan([]gatewayNet{
		{"pods", plan.EgressSNAT, "198.51.100.0/25", "198.51.100.1", "198.51.100.10", 100},
		{"tenant", plan.EgressNone, "198.51.100.128/25", "198.51.100.129", "198.51.100.130", 200},
	})
	dp, gws := gatewayDatapath(t, node, p, reps)
	defer dp.Close()
	// The network pods has a host port (only its name counts here).
	if err := dp.egress(p, gws, map[string]flower.HostPort{"pods": {}}); err != nil {
		t.Fatal(err)
	}

	// The eswitch's switching for network pods: a bridge with skh100
	// and the pods c and a.
	ipIn(t, node, "link", "set", GatewayPortName(100), "netns", sw)
	ipIn(t, sw, "link", "add", "br0", "type", "bridge")
	ipIn(t, sw, "link", "set", GatewayPortName(100), "master", "br0", "up")
	ipIn(t, sw, "link", "set", "br0", "up")
	for name, ip := range map[string]string{"c": "198.51.100.10", "a": "198.51.100.11"} {
		pod := "sksvcp" + name
		guest.AddNetns(t, pod)
		ipIn(t, sw, "link", "add", "v"+name, "type", "veth", "peer", "name", "eth0", "netns", pod)
		ipIn(t, sw, "link", "set", "v"+name, "master", "br0", "up")
		ipIn(t, pod, "addr", "add", ip+"/25", "dev", "eth0")
		ipIn(t, pod, "link", "set", "eth0", "up")
		ipIn(t, pod, "route", "add", "default", "via", "198.51.100.1")
		testkit.Serve(t, pod, ":8080", name)
	}
	tenant := "sksvcpt"
	guest.AddNetns(t, tenant)
	ipIn(t, node, "link", "set", GatewayPortName(200), "netns", tenant)
	ipIn(t, tenant, "addr", "add", "198.51.100.130/25", "dev", GatewayPortName(200))
	ipIn(t, tenant, "link", "set", GatewayPortName(200), "up")
	ipIn(t, tenant, "route", "add", "default", "via", "198.51.100.129")
	testkit.Serve(t, tenant, ":8080", "t")

	rules := filepath.Join(t.TempDir(), "kube-proxy.nft")
	if err := os.WriteFile(rules, []byte(`table ip skiff-test-kube-proxy {
	chain nat-prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr 203.0.113.10 tcp dport 80 dnat to 198.51.100.11:8080
		ip daddr 203.0.113.12 tcp dport 80 dnat to 198.51.100.130:8080
	}
}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	guest.In(t, node, guest.NFT, "-f", rules)

	if server, seen, err := testkit.Ask("sksvcpc", net.JoinHostPort("198.51.100.11", "8080"), 3*time.Second); err != nil || server != "a" {
		t.Fatalf("c -> a directly: %q, %v", server, err)
	} else if seen != "198.51.100.10" {
		t.Errorf("c -> a directly: seen from %s, want c's own address", seen)
	}
	// SYNs arriving at a, from c and from the gateway.
	counts := filepath.Join(t.TempDir(), "count.nft")
	if err := os.WriteFile(counts, []byte(`table ip skiff-test-count {
	chain input {
		type filter hook input priority 0; policy accept;
		ip saddr 198.51.100.10 tcp dport 8080 tcp flags syn counter
		ip saddr 198.51.100.1 tcp dport 8080 tcp flags syn counter
	}
}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	guest.In(t, "sksvcpa", guest.NFT, "-f", counts)
	syns := func() (fromC, fromGW int) {
		out := guest.In(t, "sksvcpa", guest.NFT, "list", "chain", "ip", "skiff-test-count", "input")
		for _, line := range strings.Split(out, "\n") {
			var n int
			if i := strings.Index(line, "packets "); i >= 0 {
				fmt.Sscan(line[i+len("packets "):], &n)
			}
			switch {
			case strings.Contains(line, "ip saddr 198.51.100.10 "):
				fromC = n
			case strings.Contains(line, "ip saddr 198.51.100.1 "):
				fromGW = n
			}
		}
		return fromC, fromGW
	}
	// Through the bridge, a's answer goes to c from a's own address,
	// which c refuses: the connection does not complete here.
	_, _, _ = testkit.Ask("sksvcpc", net.JoinHostPort("203.0.113.10", "80"), 3*time.Second)
	if fromC, fromGW := syns(); fromC == 0 || fromGW != 0 {
		t.Errorf("c -> ClusterIP -> a: a got %d SYNs from c and %d from the gateway, want some from c (not masqueraded) and none from the gateway\n%s",
			fromC, fromGW, guest.In(t, node, guest.NFT, "list", "ruleset"))
	}
	if server, _, err := testkit.Ask("sksvcpc", net.JoinHostPort("203.0.113.12", "80"), 3*time.Second); err == nil {
		t.Errorf("c reached %s of the none network through a ClusterIP", server)
	}
	if server, _, err := testkit.Ask(node, net.JoinHostPort("198.51.100.130", "8080"), 3*time.Second); err != nil || server != "t" {
		t.Errorf("the node does not reach the none network's pod (its server): %q, %v", server, err)
	}
}
