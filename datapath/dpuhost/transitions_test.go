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
// the host and of each pod after each step, the writes each Apply
// takes, and none by the same Apply again.
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
	blue := plan.Network{Name: "blue", VNI: 100, MTU: 1400, Subnets: []plan.Subnet{{Name: "s", Network: "blue",
		CIDR: netip.MustParsePrefix("198.51.100.0/24"), Gateway: netip.MustParseAddr("198.51.100.1")}}}
	a := plan.Endpoint{Name: "pod-a", Network: "blue", Kind: plan.KindVF, MAC: "02:00:00:00:00:0a",
		IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.10/24")}, PF: "0000:03:00.0", VFIndex: 0}
	b := a
	b.Name, b.MAC, b.IPs, b.VFIndex = "pod-b", "02:00:00:00:00:0b", []netip.Prefix{netip.MustParsePrefix("198.51.100.11/24")}, 1
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
	// A pod's routes (every protocol: State shows Skiff's alone): the
	// default route through the network's gateway, and the subnet's.
	podRoutes := "0.0.0.0/0 via 198.51.100.1 dev eth0; 198.51.100.0/24 dev eth0"
	steps := []hostStep{
		{name: "nothing plumbed: the VFs at home, nothing to write", do: apply(plan.New("h1")), apply: true,
			want: map[string]string{"": nltest.Expect(uplink, homeA, homeB), podA: nltest.Expect(empty), podB: nltest.Expect(empty)}},
		{name: "pod-a's VF plumbed into its pod", do: plumb(a, podA, 1300, datapath.Plumbed{HostIf: "ens1f0v0", MTU: 1300, Gateways: gw}),
			want:   map[string]string{"": nltest.Expect(uplink, homeB), podA: nltest.Expect(inA), podB: nltest.Expect(empty)},
			routes: map[string]string{podA: podRoutes}, writes: 5},
		{name: "applied: not ready until the DPU reports", do: apply(reported(false, "")), apply: true,
			want:  map[string]string{"": nltest.Expect(uplink, homeB), podA: nltest.Expect(inA), podB: nltest.Expect(empty)},
			ready: map[string]string{"pod-a": "DPU d1 has not reported it yet", "pod-b": "DPU d1 has not reported it yet"}},
		{name: "pod-b's VF plumbed into its pod", do: plumb(b, podB, 0, datapath.Plumbed{HostIf: "ens1f0v1", MTU: 1400, Gateways: gw}),
			want:   map[string]string{"": nltest.Expect(uplink), podA: nltest.Expect(inA), podB: nltest.Expect(inB)},
			routes: map[string]string{podB: podRoutes}, writes: 5},
		{name: "the DPU reports pod-a attached, pod-b refused", do: apply(reported(true, "no representor for VF 1")), apply: true,
			want:  map[string]string{"": nltest.Expect(uplink), podA: nltest.Expect(inA), podB: nltest.Expect(inB)},
			ready: map[string]string{"pod-a": "", "pod-b": "DPU d1: no representor for VF 1"}},
		{name: "pod-b's namespace destroyed: its VF, returned as dev0, given back by Apply", apply: true,
			before: func(t *testing.T) {
				w.DeleteNS(podB)
				returned := "link dev0 device mtu 1400 down mac 02:00:00:00:00:0b alias skiff:dpuvf ep=pod-b home=ens1f0v1"
				if m := nltest.Mismatch(nltest.Expect(uplink, returned), host.State()); m != "" {
					t.Fatalf("the kernel returned pod-b's VF otherwise: the host %s", m)
				}
			},
			do:     apply(reported(true, "")),
			want:   map[string]string{"": nltest.Expect(uplink, "link ens1f0v1 device mtu 1400 down mac 02:00:00:00:00:0b"), podA: nltest.Expect(inA)},
			writes: 2},
		{name: "a reset of the PF: pod-a's VF destroyed in the pod, made again in the host, moved back in by Apply", apply: true,
			before: func(t *testing.T) {
				w.NS(podA).RemoveDevice("eth0")
				host.AddDevice(nltest.Device{Name: "ens1f0v0", MAC: "02:00:00:00:f0:10"})
				if !d.WantsLink("ens1f0v0") {
					t.Fatal("ens1f0v0 appearing is not a VF to move back")
				}
			},
			do:     apply(reported(true, "")),
			want:   map[string]string{"": nltest.Expect(uplink, "link ens1f0v1 device mtu 1400 down mac 02:00:00:00:00:0b"), podA: nltest.Expect(inA)},
			routes: map[string]string{podA: podRoutes}, writes: 5},
		{name: "pod-a unplumbed: its VF home under its name, unmarked",
			do: func() error {
				return d.Unplumb(ctx, datapath.UnplumbRequest{Endpoint: a, NetNS: podA, IfName: "eth0"})
			},
			want: map[string]string{"": nltest.Expect(uplink, "link ens1f0v0 device mtu 1300 down mac 02:00:00:00:00:0a",
				"link ens1f0v1 device mtu 1400 down mac 02:00:00:00:00:0b"), podA: nltest.Expect(empty)},
			writes: 3},
		{name: "the pods leave the plan: nothing to write, pod-b's placement forgotten", do: apply(plan.New("h1")), apply: true,
			want: map[string]string{"": nltest.Expect(uplink, "link ens1f0v0 device mtu 1300 down mac 02:00:00:00:00:0a",
				"link ens1f0v1 device mtu 1400 down mac 02:00:00:00:00:0b"), podA: nltest.Expect(empty)}},
	}
	runHostSteps(t, w, d, steps)
	if st, err := loadPlacements(state); err != nil || len(st) != 0 {
		t.Errorf("the placements left: %v (%v), want none", st, err)
	}
}

// hostStep is a step of the dpu-host table: someone else's doing first
// (before, nil for none), then what the datapath does (an Apply when
// apply: it is done again and must write nothing), the state of
// each namespace after (by path; "" the host's), the routes of pods
// (every protocol), what Ready says of endpoints ("" for ready), and
// the writes it takes (0 when apply and not said: none).
type hostStep struct {
	name   string
	before func(t *testing.T)
	do     func() error
	apply  bool
	want   map[string]string
	routes map[string]string
	ready  map[string]string
	writes int
}

func runHostSteps(t *testing.T, w *nltest.World, d *Datapath, steps []hostStep) {
	t.Helper()
	for _, s := range steps {
		if s.before != nil {
			s.before(t)
		}
		n := d.Writes()
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		for path, want := range s.want {
			ns := w.NS(path)
			if ns == nil {
				t.Fatalf("%s: no namespace %q", s.name, path)
			}
			if m := nltest.Mismatch(want, ns.State()); m != "" {
				t.Fatalf("%s: the namespace %q %s", s.name, path, m)
			}
		}
		for path, want := range s.routes {
			if got := routes(t, w, path); got != want {
				t.Errorf("%s: the routes of %s: %s, want %s", s.name, path, got, want)
			}
		}
		for ep, want := range s.ready {
			if ok, why := d.Ready(ep); ok != (want == "") || why != want {
				t.Errorf("%s: %s ready %v (%q), want %q", s.name, ep, ok, why, want)
			}
		}
		if got := d.Writes() - n; got != s.writes {
			t.Fatalf("%s: %d writes, want %d", s.name, got, s.writes)
		}
		if s.apply {
			n = d.Writes()
			if err := s.do(); err != nil {
				t.Fatalf("%s: again: %v", s.name, err)
			}
			if got := d.Writes() - n; got != 0 {
				t.Fatalf("%s: the same Apply again made %d writes, want 0", s.name, got)
			}
		}
	}
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
