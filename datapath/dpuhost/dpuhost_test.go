package dpuhost

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/datapath/vftable"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// A VF (a veth end standing in, in a throwaway "host" namespace) moves
// into a pod with the endpoint's settings, is plumbed again without
// change, and comes home on Unplumb; a VF the table does not know, a
// pod interface name taken, and a non-VF kind are refused with nothing
// changed. Ready follows the DPU's report in the plan.
func TestPlumbUnplumb(t *testing.T) {
	testkit.Require(t)
	host, pod := testkit.New(t), testkit.New(t)
	testkit.Run(t, host, "ip", "link", "add", "vf0", "type", "veth", "peer", "name", "rep0")
	tab := &vftable.Table{VFs: []vftable.Entry{{PF: "0000:03:00.0", Index: 0, Netdev: "vf0"}}}
	d := mustNew(t, Options{VFs: tab, HostNS: testkit.Path(host)})
	ep, netw := podVF("pod-a", 0), podNet
	req := datapath.PlumbRequest{Endpoint: ep, Network: netw, NetNS: testkit.Path(pod), IfName: "eth0"}
	ctx := context.Background()
	for range 2 { // idempotent
		out, err := d.Plumb(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if out.HostIf != "vf0" || out.MTU != 1400 || len(out.Gateways) != 1 {
			t.Fatalf("plumbed %+v", out)
		}
	}
	got := testkit.Run(t, pod, "ip", "-o", "addr", "show", "dev", "eth0") + testkit.Run(t, pod, "ip", "-o", "link", "show", "eth0") +
		testkit.Run(t, pod, "ip", "route", "show", "default")
	for _, want := range []string{"198.51.100.10/24", "02:00:00:00:00:0a", "mtu 1400", "skiff:dpuvf ep=pod-a home=vf0", "default via 198.51.100.1"} {
		if !strings.Contains(got, want) {
			t.Errorf("the pod's interface lacks %q:\n%s", want, got)
		}
	}
	if _, err := testkit.Try(host, "ip", "link", "show", "vf0"); err == nil {
		t.Error("vf0 is still in the host")
	}
	// Refusals change nothing.
	other := req
	other.Endpoint.Name, other.Endpoint.VFIndex, other.IfName = "pod-b", 7, "net1"
	if _, err := d.Plumb(ctx, other); err == nil || !strings.Contains(err.Error(), "no VF 7 of PF 0000:03:00.0") {
		t.Errorf("unknown VF: %v", err)
	}
	taken := req
	taken.Endpoint.Name = "pod-c"
	if _, err := d.Plumb(ctx, taken); err == nil || !strings.Contains(err.Error(), "already has an interface eth0") {
		t.Errorf("taken name: %v", err)
	}
	veth := req
	veth.Endpoint.Kind = plan.KindVeth
	if _, err := d.Plumb(ctx, veth); !errors.Is(err, datapath.ErrKind) {
		t.Errorf("veth: %v", err)
	}
	// Readiness is the DPU's word, as of the last Apply.
	p := plan.New("h1")
	p.DPU = plan.DPUStatus{Node: "d1", Registered: true, Connected: true}
	p.Local["pod-a"] = ep
	if err := d.Apply(p); err != nil {
		t.Fatal(err)
	}
	if ok, why := d.Ready("pod-a"); ok || !strings.Contains(why, "DPU d1 has not reported it yet") {
		t.Errorf("before the report: %v %q", ok, why)
	}
	ep.DPUReady = true
	p.Local["pod-a"] = ep
	_ = d.Apply(p)
	if ok, _ := d.Ready("pod-a"); !ok {
		t.Error("not ready after the DPU's report")
	}
	// Home again, under its name, unmarked.
	for range 2 {
		if err := d.Unplumb(ctx, datapath.UnplumbRequest{Endpoint: ep, NetNS: testkit.Path(pod), IfName: "eth0"}); err != nil {
			t.Fatal(err)
		}
	}
	if out := testkit.Run(t, host, "ip", "-o", "link", "show", "vf0"); strings.Contains(out, "skiff:") {
		t.Errorf("vf0 still marked: %s", out)
	}
}

// A VF the kernel returned to the host from a destroyed pod namespace
// (marked, under the pod's interface name) is given back by Apply under
// its name, unmarked; nothing else in the host is touched.
func TestApplyGivesBackStrandedVFs(t *testing.T) {
	testkit.Require(t)
	host := testkit.New(t)
	testkit.Run(t, host, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "other")
	testkit.Run(t, host, "ip", "link", "set", "eth0", "alias", "skiff:dpuvf ep=pod-a home=vf3")
	testkit.Run(t, host, "ip", "link", "set", "other", "alias", "not skiff's")
	d := mustNew(t, Options{VFs: &vftable.Table{}, HostNS: testkit.Path(host)})
	for range 2 {
		if err := d.Apply(plan.New("h1")); err != nil {
			t.Fatal(err)
		}
	}
	if out := testkit.Run(t, host, "ip", "-o", "link", "show", "vf3"); strings.Contains(out, "skiff:") {
		t.Errorf("vf3 still marked: %s", out)
	}
	if out := testkit.Run(t, host, "ip", "-o", "link", "show", "other"); !strings.Contains(out, "not skiff's") {
		t.Errorf("a link that is not Skiff's was touched: %s", out)
	}
}

func mustNew(t *testing.T, o Options) *Datapath {
	t.Helper()
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
