package datapath

import (
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	agentdp "github.com/skiff-sdn/skiff/agent/datapath"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
)

// TestStandInPlumbedMidApply runs in the kernel VM. A pod's VF endpoint
// (its VF stood in for by a veth, netdevsim having no VF netdevs) is
// plumbed while an Apply of the plan that brought it runs: after that
// Apply listed the links, before it listed them again once the network's
// gateway was in place. This is the agent's order on a node (the plan
// reaches the node; the reconcile and the local API's Plumb both start
// from it), and the race that left the truth table's pod web2 without the
// stand-in's rule. The next Apply of the same plan must find the veth new
// and install its rule: the stand-in up, its traffic moved into the
// representor, the pod reaching its gateway.
func TestStandInPlumbedMidApply(t *testing.T) {
	guest.Require(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	node := newNS(t, "skdpsnode")
	pod := newNS(t, "skdpspod")
	pf := guest.SwitchdevEswitch(t, "skdpsnode", 73, 1)
	rep := guest.Representors(t, "skdpsnode")["pf0vf0"]
	if rep == "" {
		t.Fatal("no pf0vf0 representor")
	}

	n := plan.Network{Name: "blue", VNI: 100, MTU: 1450,
		Subnets: []plan.Subnet{{CIDR: netip.MustParsePrefix("198.51.100.0/24"), Gateway: netip.MustParseAddr("198.51.100.1")}}}
	w := plan.Endpoint{Name: "w", Network: "blue", Kind: plan.KindVF, PF: pf, VFIndex: 0, MAC: "02:00:00:00:00:14",
		IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.20/24")}}
	p := plan.New("n1")
	p.Revision = 7
	p.UnderlayIP = netip.MustParseAddr("192.0.2.1")
	p.Networks["blue"] = n
	p.Local["w"] = w

	host := agentdp.HostIfName("w")
	plumbNow := false
	reps := func(e plan.Endpoint) (Port, bool) {
		if plumbNow {
			// Apply has listed the links; the gateway and the second
			// listing come after this.
			plumbNow = false
			if _, err := agentdp.PlumbVeth(node, agentdp.PlumbRequest{Endpoint: w, Network: n, NetNS: pod, IfName: "eth0"}); err != nil {
				t.Errorf("plumbing w mid-Apply: %v", err)
			}
		}
		return Port{Rep: rep, Target: host}, true
	}
	dp, err := New(Options{Logger: log, NetNS: node, Representor: reps})
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Close()

	plumbNow = true
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	if plumbNow {
		t.Fatal("Apply did not look the endpoint's port up")
	}
	// The reconcile the local API asks for after Plumb: the same plan.
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}

	link := nsExec(t, "skdpsnode", "/usr/sbin/ip", "link", "show", host)
	if !strings.Contains(link, ",UP") {
		t.Errorf("the stand-in %s is not up:\n%s", host, link)
	}
	var mirred bool
	for _, f := range filters(t, "skdpsnode", host) {
		for _, a := range f.Options.Actions {
			mirred = mirred || a.Kind == "mirred"
		}
	}
	if !mirred {
		out, _ := tryIn("skdpsnode", "/usr/sbin/tc", "filter", "show", "dev", host, "ingress")
		t.Errorf("the stand-in %s has no rule moving its traffic into %s:\n%s", host, rep, out)
	}
	// Real packets: the pod's ARP and pings go through the stand-in's
	// rule into the representor and on to the gateway, and back.
	if out, err := tryIn("skdpspod", "/bin/ping", "-c", "2", "-W", "3", "198.51.100.1"); err != nil {
		t.Errorf("w cannot reach its gateway: %v\n%s", err, out)
	}
}

// tryIn runs a command in the named namespace and returns its combined
// output and error (a failure is the caller's to judge).
func tryIn(ns string, args ...string) (string, error) {
	out, err := exec.Command(guest.IP, append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	return string(out), err
}
