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
// blue and two on red (veths whose host sides are their ports), and a
// peer namespace whose plain VXLAN device (VNI 200) is a remote endpoint
// of red. red gets a remote endpoint behind an IPv6 VTEP, which the
// node's IPv4 tunnel cannot reach: the Apply succeeds, blue's pods keep
// pinging each other with blue's filters untouched (the same handles),
// red's filters are removed and its pods fall back to software: they
// ping each other and the peer through the node's bridge and are ready;
// with a NetworkPolicy isolating one of them they are cut off instead,
// not ready with the reason; without that endpoint, red is offloaded
// again.
func TestRefusedNetworkVM(t *testing.T) {
	guest.Require(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	node := peerNode(t, "skrfnode", "skrfpeer", "skrf", 200, "203.0.113.99/24")

	p := plan.New("n1")
	p.UnderlayIP = netip.MustParseAddr("192.0.2.1")
	vtep := []netip.Addr{netip.MustParseAddr("192.0.2.2")}
	p.Networks["blue"] = plan.Network{Name: "blue", VNI: 100, MTU: 1450, FloodVTEPs: vtep}
	p.Networks["red"] = plan.Network{Name: "red", VNI: 200, MTU: 1450, FloodVTEPs: vtep}
	p.Remote["rp"] = plan.Remote{Name: "rp", Network: "red", VTEP: vtep[0], MAC: peerMAC, IPs: []netip.Prefix{netip.MustParsePrefix("203.0.113.99/24")}}
	pods := map[string]string{"a": "skrfpa", "b": "skrfpb", "c": "skrfpc", "d": "skrfpd", "rp": "skrfpeer"}
	ips := map[string]string{"rp": "203.0.113.99"}
	for i, name := range []string{"a", "b", "c", "d"} {
		network, subnet := "blue", "198.51.100"
		if name == "c" || name == "d" {
			network, subnet = "red", "203.0.113"
		}
		ips[name] = fmt.Sprintf("%s.%d", subnet, 10+i)
		p.Local[name] = vethPod(t, "skrfnode", pods[name], name, network, fmt.Sprintf("02:00:00:00:00:%02x", 10+i), ips[name]+"/24")
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
	redPairs := [][2]string{{"c", "d"}, {"d", "c"}, {"c", "rp"}, {"rp", "d"}}
	for _, pair := range append([][2]string{{"a", "b"}, {"b", "a"}}, redPairs...) {
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
	if got := handles(t, "skrfnode", redDevs...); len(got) != 0 {
		t.Errorf("red's devices keep filters: %v", got)
	}
	for _, pair := range redPairs {
		if !ping(pair[0], pair[1]) {
			t.Errorf("red refused, forwarded in software: %s cannot ping %s", pair[0], pair[1])
		}
	}
	for _, ep := range []string{"a", "c", "d"} {
		if ok, why := dp.Ready(ep); !ok {
			t.Errorf("%s not ready with red refused (red in software): %s", ep, why)
		}
	}
	cs, err := dp.Counters(big)
	if err != nil {
		t.Fatal(err)
	}
	if rs := cs.Endpoints["c"].Rules; len(rs) != 1 || rs[0].Kind != RefusedKind || rs[0].State != "software" || !strings.Contains(rs[0].Reason, "remote[rx].vtep") {
		t.Errorf("c's rule states with red in software: %+v", rs)
	}

	// A NetworkPolicy isolating c: red cannot be forwarded in software.
	isolated := big.Clone()
	isolated.Policies["c"] = plan.EndpointPolicy{Endpoint: "c", IngressIsolated: true, EgressIsolated: true}
	if err := dp.Apply(isolated); err != nil {
		t.Fatal(err)
	}
	for _, pair := range redPairs {
		if ping(pair[0], pair[1]) {
			t.Errorf("red refused with c isolated by a policy: %s still pings %s", pair[0], pair[1])
		}
	}
	for _, ep := range []string{"c", "d"} {
		if ok, why := dp.Ready(ep); ok || !strings.Contains(why, "network red is not offloaded on this node") || !strings.Contains(why, "NetworkPolicy") {
			t.Errorf("Ready(%s) = %v %q", ep, ok, why)
		}
	}
	if !ping("a", "b") {
		t.Errorf("blue stopped forwarding with red cut off")
	}

	// red without it.
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	for _, pair := range redPairs {
		if !ping(pair[0], pair[1]) {
			t.Errorf("red offloaded again: %s cannot ping %s", pair[0], pair[1])
		}
	}
	if got := handles(t, "skrfnode", redDevs...); len(got) == 0 {
		t.Errorf("red's devices hold no filters once red fits again")
	}
	if got := dp.RefusedNetworks(); len(got) != 0 {
		t.Errorf("RefusedNetworks() = %v", got)
	}
}
