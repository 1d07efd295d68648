package offload

import (
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/nl"
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
	plumbNow := false
	rig := newStandInRig(t, "skdpsnode", "skdpspod", 73, func(plumb func()) {
		if plumbNow {
			// Apply has listed the links; the gateway and the second
			// listing come after this.
			plumbNow = false
			plumb()
		}
	})
	plumbNow = true
	if err := rig.dp.Apply(rig.p); err != nil {
		t.Fatal(err)
	}
	if plumbNow {
		t.Fatal("Apply did not look the endpoint's port up")
	}
	// The reconcile the local API asks for after Plumb: the same plan.
	if err := rig.dp.Apply(rig.p); err != nil {
		t.Fatal(err)
	}
	rig.check(t)
}

// TestStandInPlumbedBetweenApplies runs in the kernel VM. An unchanged
// Apply does not list the links while no link notification came since
// the last listing; the stand-in veth plumbed after such an Apply (a
// link notification) must make the next one list them again and install
// the stand-in's rule.
func TestStandInPlumbedBetweenApplies(t *testing.T) {
	guest.Require(t)
	rig := newStandInRig(t, "skdpbnode", "skdpbpod", 74, func(func()) {})
	for range 2 { // a whole Apply, then an unchanged one
		if err := rig.dp.Apply(rig.p); err != nil {
			t.Fatal(err)
		}
	}
	l0 := rig.dp.listings
	if err := rig.dp.Apply(rig.p); err != nil {
		t.Fatal(err)
	}
	if n := rig.dp.listings - l0; n != 0 {
		t.Errorf("an unchanged Apply with no link change listed the links %d times", n)
	}
	rig.plumb()
	l0 = rig.dp.listings
	if err := rig.dp.Apply(rig.p); err != nil {
		t.Fatal(err)
	}
	if rig.dp.listings == l0 {
		t.Error("the Apply after the stand-in was plumbed did not list the links")
	}
	rig.check(t)
}

// standInRig is a node with a switchdev eswitch (netdevsim id) whose VF
// 0 is endpoint w, stood in for by a veth that plumb makes; Representor
// calls hook first (with plumb) at every look-up.
type standInRig struct {
	dp        *Datapath
	p         plan.Plan
	node, pod string
	rep, host string
	plumb     func()
}

func newStandInRig(t *testing.T, nodeName, podName string, id int, hook func(plumb func())) *standInRig {
	t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	node := newNS(t, nodeName)
	pod := newNS(t, podName)
	pf := guest.SwitchdevEswitch(t, nodeName, id, 1)
	rep := guest.Representors(t, nodeName)["pf0vf0"]
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

	rig := &standInRig{p: p, node: nodeName, pod: podName, rep: rep, host: datapath.HostIfName("w")}
	rig.plumb = func() {
		if _, err := datapath.PlumbVeth(nl.Open, node, datapath.PlumbRequest{Endpoint: w, Network: n, NetNS: pod, IfName: "eth0"}); err != nil {
			t.Errorf("plumbing w: %v", err)
		}
	}
	reps := func(e plan.Endpoint) (Port, bool) {
		hook(rig.plumb)
		return Port{Rep: rep, Target: rig.host}, true
	}
	dp, err := New(Options{Logger: log, NetNS: node, Representor: reps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dp.Close)
	rig.dp = dp
	return rig
}

// check: the stand-in is up with its rule into the representor, and the
// pod reaches its gateway through them.
func (rig *standInRig) check(t *testing.T) {
	t.Helper()
	link := nsExec(t, rig.node, "/usr/sbin/ip", "link", "show", rig.host)
	if !strings.Contains(link, ",UP") {
		t.Errorf("the stand-in %s is not up:\n%s", rig.host, link)
	}
	var mirred bool
	for _, f := range filters(t, rig.node, rig.host) {
		for _, a := range f.Options.Actions {
			mirred = mirred || a.Kind == "mirred"
		}
	}
	if !mirred {
		out, _ := tryIn(rig.node, "/usr/sbin/tc", "filter", "show", "dev", rig.host, "ingress")
		t.Errorf("the stand-in %s has no rule moving its traffic into %s:\n%s", rig.host, rig.rep, out)
	}
	// Real packets: the pod's ARP and pings go through the stand-in's
	// rule into the representor and on to the gateway, and back.
	if out, err := tryIn(rig.pod, "/bin/ping", "-c", "2", "-W", "3", "198.51.100.1"); err != nil {
		t.Errorf("w cannot reach its gateway: %v\n%s", err, out)
	}
}

// tryIn runs a command in the named namespace and returns its combined
// output and error (a failure is the caller's to judge).
func tryIn(ns string, args ...string) (string, error) {
	out, err := exec.Command(guest.IP, append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	return string(out), err
}
