package dpuhost

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/datapath/vftable"
	"github.com/skiff-sdn/skiff/internal/nl/nltest"
	"github.com/skiff-sdn/skiff/internal/plan"
)

// The dpu-host datapath's transitions on the kernel fake (no root): a
// host whose uplink is eth0 and whose VFs 0 and 1 of PF 0000:03:00.0
// are the netdevs ens1f0v0 and ens1f0v1 (a vftable.Table names them),
// two pod namespaces. In order: pod-a's VF plumbed (moved into the pod,
// renamed, marked, with the endpoint's MAC, MTU, address and default
// route), ready only once the plan carries the DPU's report, pod-b's VF
// plumbed and the DPU's error on it reported, pod-b's namespace
// destroyed (the kernel returns its VF to the host, renamed dev0: the
// host has an eth0) and given back by Apply, a reset of the PF (pod-a's
// VF destroyed in the pod, a new one made in the host) undone by Apply
// (the VF moved back in with the settings Plumb recorded), pod-a
// unplumbed (its VF home under its name, unmarked). The exact state of
// the host and of each pod after each step, the writes each takes, and
// none by the same Apply again.
func TestTransitionsFake(t *testing.T) {
	w := nltest.New()
	host := w.NS("")
	host.AddDevice(nltest.Device{Name: "eth0", MAC: "02:00:00:00:ee:01", Up: true})
	host.AddDevice(nltest.Device{Name: "ens1f0v0", MAC: "02:00:00:00:f0:00"})
	host.AddDevice(nltest.Device{Name: "ens1f0v1", MAC: "02:00:00:00:f0:01"})
	const podA, podB = "/run/netns/pod-a", "/run/netns/pod-b"
	w.AddNS(podA)
	w.AddNS(podB)
	tab := &vftable.Table{VFs: []vftable.Entry{{PF: "0000:03:00.0", Index: 0, Netdev: "ens1f0v0"}, {PF: "0000:03:00.0", Index: 1, Netdev: "ens1f0v1"}}}
	state := filepath.Join(t.TempDir(), "dpuhost-vfs.json")
	d := mustNew(t, Options{VFs: tab, Open: w.Open, StateFile: state})
	t.Cleanup(d.Close)
	blue, a, b := podNet, podVF("pod-a", 0), podVF("pod-b", 1)
	ctx := context.Background()
	// The plan with the DPU's reports: pod-a's and pod-b's as given.
	reported := func(aReady bool, bError string) plan.Plan {
		p := plan.New("h1")
		p.DPU = plan.DPUStatus{Node: "d1", Registered: true, Connected: true}
		p.Networks["blue"] = blue
		ea, eb := a, b
		ea.DPUReady, eb.DPUError = aReady, bError
		p.Local["pod-a"], p.Local["pod-b"] = ea, eb
		return p
	}
	apply := func(p plan.Plan) func() error { return func() error { return d.Apply(p) } }
	plumb := func(e plan.Endpoint, ns string, mtu int, want datapath.Plumbed) func() error {
		return func() error {
			out, err := d.Plumb(ctx, datapath.PlumbRequest{Endpoint: e, Network: blue, NetNS: ns, IfName: "eth0", MTU: mtu})
			if err == nil && (out.HostIf != want.HostIf || out.MTU != want.MTU || !slices.Equal(out.Gateways, want.Gateways)) {
				err = fmt.Errorf("plumbed %+v, want %+v", out, want)
			}
			return err
		}
	}
	gw := []netip.Addr{netip.MustParseAddr("198.51.100.1")}
	const (
		uplink = "link eth0 device mtu 1500 up mac 02:00:00:00:ee:01\nlink lo device mtu 65536 up"
		homeA  = "link ens1f0v0 device mtu 1500 down mac 02:00:00:00:f0:00"
		homeB  = "link ens1f0v1 device mtu 1500 down mac 02:00:00:00:f0:01"
		// In the pod: renamed, marked with the endpoint and its name at
		// home, the endpoint's MAC, MTU (pod-a's request lowers it) and
		// address, up.
		inA = `link eth0 device mtu 1300 up mac 02:00:00:00:00:0a alias skiff:dpuvf ep=pod-a home=ens1f0v0
link lo device mtu 65536 up
addr eth0 198.51.100.10/24`
		inB = `link eth0 device mtu 1400 up mac 02:00:00:00:00:0b alias skiff:dpuvf ep=pod-b home=ens1f0v1
link lo device mtu 65536 up
addr eth0 198.51.100.11/24`
		empty = "link lo device mtu 65536 up"
	)
	pa, pb := w.NS(podA), w.NS(podB)
	// Checks after a step: a pod's routes (every protocol: State shows
	// Skiff's alone), the default route through the network's gateway
	// and the subnet's; what Ready says of the endpoints ("" ready).
	routed := func(pod string) func(t *testing.T) {
		return func(t *testing.T) {
			t.Helper()
			if got, want := routes(t, w, pod), "0.0.0.0/0 via 198.51.100.1 dev eth0; 198.51.100.0/24 dev eth0"; got != want {
				t.Errorf("the routes of %s: %s, want %s", pod, got, want)
			}
		}
	}
	ready := func(a, b string) func(t *testing.T) {
		return func(t *testing.T) {
			t.Helper()
			for ep, want := range map[string]string{"pod-a": a, "pod-b": b} {
				if ok, why := d.Ready(ep); ok != (want == "") || why != want {
					t.Errorf("%s ready %v (%q), want %q", ep, ok, why, want)
				}
			}
		}
	}
	backA := "link ens1f0v0 device mtu 1300 down mac 02:00:00:00:00:0a"
	backB := "link ens1f0v1 device mtu 1400 down mac 02:00:00:00:00:0b"
	nltest.Table{NS: host, Writes: d.Writes}.Run(t, []nltest.Step{
		{Name: "nothing plumbed: the VFs at home, nothing to write", Apply: apply(plan.New("h1")),
			Want: nltest.Expect(uplink, homeA, homeB), Others: map[*nltest.NS]string{pa: nltest.Expect(empty), pb: nltest.Expect(empty)}},
		{Name: "pod-a's VF plumbed into its pod", Once: true, Apply: plumb(a, podA, 1300, datapath.Plumbed{HostIf: "ens1f0v0", MTU: 1300, Gateways: gw}),
			Want: nltest.Expect(uplink, homeB), Others: map[*nltest.NS]string{pa: nltest.Expect(inA), pb: nltest.Expect(empty)}, Writes: 5, After: routed(podA)},
		{Name: "applied: not ready until the DPU reports", Apply: apply(reported(false, "")),
			Want: nltest.Expect(uplink, homeB), Others: map[*nltest.NS]string{pa: nltest.Expect(inA), pb: nltest.Expect(empty)},
			After: ready("DPU d1 has not reported it yet", "DPU d1 has not reported it yet")},
		{Name: "pod-b's VF plumbed into its pod", Once: true, Apply: plumb(b, podB, 0, datapath.Plumbed{HostIf: "ens1f0v1", MTU: 1400, Gateways: gw}),
			Want: nltest.Expect(uplink), Others: map[*nltest.NS]string{pa: nltest.Expect(inA), pb: nltest.Expect(inB)}, Writes: 5, After: routed(podB)},
		{Name: "the DPU reports pod-a attached, pod-b refused", Apply: apply(reported(true, "no representor for VF 1")),
			Want: nltest.Expect(uplink), Others: map[*nltest.NS]string{pa: nltest.Expect(inA), pb: nltest.Expect(inB)},
			After: ready("", "DPU d1: no representor for VF 1")},
		{Name: "pod-b's namespace destroyed: its VF, returned as dev0, given back by Apply",
			Before: func(t *testing.T) {
				w.DeleteNS(podB)
				returned := "link dev0 device mtu 1400 down mac 02:00:00:00:00:0b alias skiff:dpuvf ep=pod-b home=ens1f0v1"
				if m := nltest.Mismatch(nltest.Expect(uplink, returned), host.State()); m != "" {
					t.Fatalf("the kernel returned pod-b's VF otherwise: the host %s", m)
				}
			},
			Apply: apply(reported(true, "")), Want: nltest.Expect(uplink, backB), Others: map[*nltest.NS]string{pa: nltest.Expect(inA)}, Writes: 2},
		{Name: "a reset of the PF: pod-a's VF destroyed in the pod, made again in the host, moved back in by Apply",
			Before: func(t *testing.T) {
				pa.RemoveDevice("eth0")
				host.AddDevice(nltest.Device{Name: "ens1f0v0", MAC: "02:00:00:00:f0:10"})
				if !d.WantsLink("ens1f0v0") {
					t.Fatal("ens1f0v0 appearing is not a VF to move back")
				}
			},
			Apply: apply(reported(true, "")), Want: nltest.Expect(uplink, backB), Others: map[*nltest.NS]string{pa: nltest.Expect(inA)}, Writes: 5,
			After: routed(podA)},
		{Name: "pod-a unplumbed: its VF home under its name, unmarked", Once: true,
			Apply: func() error { return d.Unplumb(ctx, datapath.UnplumbRequest{Endpoint: a, NetNS: podA, IfName: "eth0"}) },
			Want:  nltest.Expect(uplink, backA, backB), Others: map[*nltest.NS]string{pa: nltest.Expect(empty)}, Writes: 3},
		{Name: "the pods leave the plan: nothing to write, pod-b's placement forgotten", Apply: apply(plan.New("h1")),
			Want: nltest.Expect(uplink, backA, backB), Others: map[*nltest.NS]string{pa: nltest.Expect(empty)}},
	})
	if st, err := loadPlacements(state); err != nil || len(st) != 0 {
		t.Errorf("the placements left: %v (%v), want none", st, err)
	}
}

// podNet is the pods' network; podVF the endpoint of pod-a or pod-b
// (198.51.100.10 or .11, MAC :0a or :0b) on VF index of PF 0000:03:00.0.
var podNet = plan.Network{Name: "blue", VNI: 100, MTU: 1400, Subnets: []plan.Subnet{{Name: "s", Network: "blue",
	CIDR: netip.MustParsePrefix("198.51.100.0/24"), Gateway: netip.MustParseAddr("198.51.100.1")}}}

func podVF(name string, index int) plan.Endpoint {
	last := map[string]int{"pod-a": 10, "pod-b": 11}[name]
	return plan.Endpoint{Name: name, Network: "blue", Kind: plan.KindVF, MAC: fmt.Sprintf("02:00:00:00:00:%02x", last),
		IPs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(last)}), 24)}, PF: "0000:03:00.0", VFIndex: index}
}

// routes lists the routes through the links of the namespace at path,
// every protocol, as "DST [via GW] dev NAME", sorted, joined by "; ".
func routes(t *testing.T, w *nltest.World, path string) string {
	t.Helper()
	k, err := w.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	ls, err := k.Links()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range ls {
		rs, err := k.LinkRoutes(l.Index)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			s := r.Dst.String()
			if r.Gw.IsValid() {
				s += " via " + r.Gw.String()
			}
			out = append(out, s+" dev "+l.Name)
		}
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}
