package offload

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
)

// TestRefusedNetworkVM runs in the kernel VM: a node with two pods on
// blue and two on red (veths whose host sides are their ports), and an
// underlay. red gets a remote endpoint behind an IPv6 VTEP, which the
// node's IPv4 tunnel cannot reach: the Apply succeeds, blue's pods keep pinging each other with blue's
// filters untouched (the same handles), red's pods are cut off (their
// filters removed) and not ready with the reason; without that
// endpoint, red's pods ping again.
func TestRefusedNetworkVM(t *testing.T) {
	guest.Require(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	node := newNS(t, "skrfnode")
	newNS(t, "skrfpeer")
	sh(t, "/usr/sbin/ip", "link", "add", "skrfu0", "netns", "skrfnode", "type", "veth", "peer", "name", "skrfu1", "netns", "skrfpeer")
	nsExec(t, "skrfnode", "/usr/sbin/ip", "addr", "add", "192.0.2.1/24", "dev", "skrfu0")
	nsExec(t, "skrfnode", "/usr/sbin/ip", "link", "set", "skrfu0", "up")
	nsExec(t, "skrfpeer", "/usr/sbin/ip", "addr", "add", "192.0.2.2/24", "dev", "skrfu1")
	nsExec(t, "skrfpeer", "/usr/sbin/ip", "link", "set", "skrfu1", "up")

	p := plan.New("n1")
	p.UnderlayIP = netip.MustParseAddr("192.0.2.1")
	vtep := []netip.Addr{netip.MustParseAddr("192.0.2.2")}
	p.Networks["blue"] = plan.Network{Name: "blue", VNI: 100, MTU: 1450, FloodVTEPs: vtep}
	p.Networks["red"] = plan.Network{Name: "red", VNI: 200, MTU: 1450, FloodVTEPs: vtep}
	pods := map[string]string{"a": "skrfpa", "b": "skrfpb", "c": "skrfpc", "d": "skrfpd"}
	ips := map[string]string{}
	for i, name := range []string{"a", "b", "c", "d"} {
		newNS(t, pods[name])
		network, subnet := "blue", "198.51.100"
		if name == "c" || name == "d" {
			network, subnet = "red", "203.0.113"
		}
		mac := fmt.Sprintf("02:00:00:00:00:%02x", 10+i)
		ips[name] = fmt.Sprintf("%s.%d", subnet, 10+i)
		host := datapath.HostIfName(name)
		sh(t, "/usr/sbin/ip", "link", "add", host, "netns", "skrfnode", "type", "veth", "peer", "name", "eth0", "netns", pods[name])
		nsExec(t, "skrfnode", "/usr/sbin/ip", "link", "set", host, "alias", datapath.HostIfAlias(name), "up")
		nsExec(t, pods[name], "/usr/sbin/ip", "link", "set", "eth0", "address", mac, "mtu", "1450", "up")
		nsExec(t, pods[name], "/usr/sbin/ip", "addr", "add", ips[name]+"/24", "dev", "eth0")
		p.Local[name] = plan.Endpoint{Name: name, Network: network, Kind: plan.KindVeth, MAC: mac,
			IPs: []netip.Prefix{netip.MustParsePrefix(ips[name] + "/24")}, VFIndex: -1}
	}
	reps := func(e plan.Endpoint) (Port, bool) { return Port{Rep: datapath.HostIfName(e.Name)}, true }
	dp, err := New(Options{Logger: log, NetNS: node, Representor: reps})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()
	ping := func(from, to string) bool {
		_, err := exec.Command("/usr/sbin/ip", "netns", "exec", pods[from], "/bin/ping", "-c", "1", "-W", "1", ips[to]).CombinedOutput()
		return err == nil
	}
	blueDevs := []string{datapath.HostIfName("a"), datapath.HostIfName("b")}
	redDevs := []string{datapath.HostIfName("c"), datapath.HostIfName("d")}

	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	for _, pair := range [][2]string{{"a", "b"}, {"b", "a"}, {"c", "d"}, {"d", "c"}} {
		if !ping(pair[0], pair[1]) {
			t.Fatalf("both networks programmed: %s cannot ping %s", pair[0], pair[1])
		}
	}
	blueBefore := handles(t, "skrfnode", blueDevs...)

	// A remote endpoint of red behind an IPv6 VTEP, which this node's
	// IPv4 tunnel cannot reach.
	big := p.Clone()
	big.Remote["rx"] = plan.Remote{Name: "rx", Network: "red", VTEP: netip.MustParseAddr("2001:db8::2"), MAC: "02:00:00:00:00:1c",
		IPs: []netip.Prefix{netip.MustParsePrefix("203.0.113.20/24")}}
	if err := dp.Apply(big); err != nil {
		t.Fatalf("a refused network failed the node's Apply: %v", err)
	}
	if after := handles(t, "skrfnode", blueDevs...); !slices.Equal(blueBefore, after) {
		t.Errorf("blue's filters changed when red was refused:\nbefore %v\nafter  %v", blueBefore, after)
	}
	if !ping("a", "b") || !ping("b", "a") {
		t.Errorf("blue stopped forwarding when red was refused")
	}
	if ping("c", "d") || ping("d", "c") {
		t.Errorf("red's pods still reach each other with red refused")
	}
	if got := handles(t, "skrfnode", redDevs...); len(got) != 0 {
		t.Errorf("red's devices keep filters: %v", got)
	}
	for _, ep := range []string{"c", "d"} {
		if ok, why := dp.Ready(ep); ok || !strings.Contains(why, "network red is not offloaded on this node") || !strings.Contains(why, "remote[rx].vtep") {
			t.Errorf("Ready(%s) = %v %q", ep, ok, why)
		}
	}
	if ok, why := dp.Ready("a"); !ok {
		t.Errorf("a not ready with red refused: %s", why)
	}

	// red without it.
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	if !ping("c", "d") || !ping("d", "c") {
		t.Errorf("red's pods do not reach each other once red fits again")
	}
	if got := dp.RefusedNetworks(); len(got) != 0 {
		t.Errorf("RefusedNetworks() = %v", got)
	}
}
