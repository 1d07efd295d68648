package offload

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/datapath"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/eswitch"
	"github.com/skiff-sdn/skiff/offload/vf"
)

// fakeMover records what pods' VFs ask of the node; detach answers
// detachErr, and stranded is what Stranded finds.
type fakeMover struct {
	calls     []string
	attachErr error
	detachErr error
	stranded  []vf.Ref
}

func (f *fakeMover) Attach(ref vf.Ref, s vf.Settings, podNS string, ifc vf.PodIface) error {
	f.calls = append(f.calls, fmt.Sprintf("attach %s mac %s vlan %d spoofchk %v trust %v link %v -> %s %s mac %s mtu %d addrs %v routes %v",
		ref, s.MAC, *s.VLAN, *s.SpoofCheck, *s.Trust, *s.LinkState, podNS, ifc.Name, ifc.MAC, ifc.MTU, ifc.Addrs, ifc.Routes))
	return f.attachErr
}

func (f *fakeMover) Detach(ref vf.Ref, podNS, podIf string) error {
	f.calls = append(f.calls, fmt.Sprintf("detach %s from %q %q", ref, podNS, podIf))
	return f.detachErr
}

func (f *fakeMover) Stranded(refs []vf.Ref) ([]vf.Ref, error) {
	f.calls = append(f.calls, fmt.Sprintf("stranded? %d", len(refs)))
	return f.stranded, nil
}

func podVFDatapath(m *fakeMover, mode eswitch.Mode) *Datapath {
	node := &eswitch.Node{PFs: []eswitch.PF{{
		Netdev: "ens1f0", Bus: "pci", Device: "0000:03:00.0", Mode: mode,
		VFs: []eswitch.VF{
			{Index: 0, PCIAddress: "0000:03:00.2", Netdev: "ens1f0v0", Representor: "eth1"},
			{Index: 1, PCIAddress: "", Representor: "eth2"},
			{Index: 2, PCIAddress: "0000:03:00.4", Netdev: "ens1f0v2"},
		},
	}}}
	return &Datapath{log: slog.New(slog.DiscardHandler), mover: m, ports: &eswitchPorts{node: node, last: time.Now()}}
}

func podVF(idx int) plan.Endpoint {
	return plan.Endpoint{Name: "cni-1", Kind: plan.KindVF, PF: "ens1f0", VFIndex: idx, MAC: "02:00:00:00:00:09",
		IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.9/24")}}
}

var blue = plan.Network{Name: "blue", VNI: 100, MTU: 1450,
	Subnets: []plan.Subnet{{CIDR: netip.MustParsePrefix("198.51.100.0/24"), Gateway: netip.MustParseAddr("198.51.100.1")}}}

func TestPlumbPodVF(t *testing.T) {
	m := &fakeMover{}
	d := podVFDatapath(m, eswitch.ModeSwitchdev)
	req := datapath.PlumbRequest{Endpoint: podVF(0), Network: blue, NetNS: "/run/netns/pod", IfName: "eth0"}
	out, err := d.Plumb(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if out.HostIf != "eth1" || out.MTU != 1450 || out.PCIAddress != "0000:03:00.2" {
		t.Errorf("plumbed %+v", out)
	}
	want := "attach VF 0 of ens1f0 (0000:03:00.2) mac 02:00:00:00:00:09 vlan 0 spoofchk true trust false link auto -> /run/netns/pod eth0 " +
		"mac 02:00:00:00:00:09 mtu 1450 addrs [198.51.100.9/24] routes [{0.0.0.0/0 198.51.100.1}]"
	if got := strings.Join(m.calls, "; "); got != want {
		t.Errorf("calls:\n%s\nwant:\n%s", got, want)
	}
	// Unplumb without a namespace looks where Plumb put it.
	m.calls = nil
	if err := d.Unplumb(t.Context(), datapath.UnplumbRequest{Endpoint: podVF(0)}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(m.calls, "; "); got != `detach VF 0 of ens1f0 (0000:03:00.2) from "/run/netns/pod" "eth0"` {
		t.Errorf("unplumb calls: %s", got)
	}
	// A VF in no namespace in reach: not an error (reconcile gives it
	// back when the kernel returns it).
	m.calls, m.detachErr = nil, fmt.Errorf("vf: detach: %w", vf.ErrVFAway)
	if err := d.Unplumb(t.Context(), datapath.UnplumbRequest{Endpoint: podVF(0), NetNS: "/run/netns/gone", IfName: "eth0"}); err != nil {
		t.Errorf("unplumb of a VF away: %v", err)
	}
	m.detachErr = fmt.Errorf("rename refused")
	if err := d.Unplumb(t.Context(), datapath.UnplumbRequest{Endpoint: podVF(0), NetNS: "/run/netns/pod", IfName: "eth0"}); err == nil || !strings.Contains(err.Error(), "cni-1") {
		t.Errorf("a failed detach: %v, want an error naming the endpoint", err)
	}
}

// TestPlumbPodVFRefused: a VF that cannot serve a pod is refused before
// anything is touched.
func TestPlumbPodVFRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		mode eswitch.Mode
		e    plan.Endpoint
		ns   string
		want string
	}{
		{"legacy PF", eswitch.ModeLegacy, podVF(0), "/run/netns/pod", "PF ens1f0's eswitch is in legacy mode: a pod's VF needs switchdev"},
		{"unknown PF", eswitch.ModeSwitchdev, func() plan.Endpoint { e := podVF(0); e.PF = "ens9"; return e }(), "/run/netns/pod", `pf: no PF "ens9"`},
		{"unknown VF", eswitch.ModeSwitchdev, podVF(5), "/run/netns/pod", "PF ens1f0 has no VF 5"},
		{"no representor", eswitch.ModeSwitchdev, podVF(2), "/run/netns/pod", "VF 2 of ens1f0 has no representor"},
		{"not a PCI function", eswitch.ModeSwitchdev, podVF(1), "/run/netns/pod", "is not a PCI function"},
		{"no namespace", eswitch.ModeSwitchdev, podVF(0), "", "netns: a pod's VF needs the pod's namespace"},
		{"bad MAC", eswitch.ModeSwitchdev, func() plan.Endpoint { e := podVF(0); e.MAC = "nope"; return e }(), "/run/netns/pod", `mac "nope"`},
	} {
		m := &fakeMover{}
		d := podVFDatapath(m, c.mode)
		_, err := d.Plumb(t.Context(), datapath.PlumbRequest{Endpoint: c.e, Network: blue, NetNS: c.ns, IfName: "eth0"})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "cni-1") {
			t.Errorf("%s: %v, want an error naming cni-1 with %q", c.name, err, c.want)
		}
		if len(m.calls) != 0 {
			t.Errorf("%s: the VF was touched: %v", c.name, m.calls)
		}
	}
}

func TestReturnStranded(t *testing.T) {
	ref := vf.Ref{PF: "ens1f0", Index: 2, PCI: "0000:03:00.4"}
	m := &fakeMover{stranded: []vf.Ref{ref}}
	d := podVFDatapath(m, eswitch.ModeSwitchdev)
	n, err := d.returnStranded()
	if err != nil || n != 1 {
		t.Fatalf("returnStranded = %d, %v", n, err)
	}
	if got := strings.Join(m.calls, "; "); got != `stranded? 2; detach VF 2 of ens1f0 (0000:03:00.4) from "" ""` {
		t.Errorf("calls: %s", got)
	}
}

// TestSweepStrandedByListing: with a mover that looks in the datapath's
// namespace, stranded VFs are looked for after each new link listing
// only (a VF coming back is a link change), and again after a sweep
// that failed.
func TestSweepStrandedByListing(t *testing.T) {
	m := &fakeMover{}
	d := podVFDatapath(m, eswitch.ModeSwitchdev)
	d.strandedByLinks = true
	d.listings = 1
	sweeps := func() int { return strings.Count(strings.Join(m.calls, ";"), "stranded?") }
	for i, step := range []struct {
		listed bool // a link listing since the step before
		want   int  // sweeps so far
	}{{false, 1}, {false, 1}, {true, 2}, {false, 2}} {
		if step.listed {
			d.listings++
		}
		if errs := d.sweep(plan.Plan{}, false); len(errs) != 0 {
			t.Fatal(errs)
		}
		if got := sweeps(); got != step.want {
			t.Errorf("step %d: %d sweeps, want %d", i, got, step.want)
		}
	}
	// A VF found and not given back: looked for again without a listing.
	m.stranded, m.detachErr = []vf.Ref{{PF: "ens1f0", Index: 2, PCI: "0000:03:00.4"}}, errors.New("busy")
	d.listings++
	if errs := d.sweep(plan.Plan{}, false); len(errs) != 1 {
		t.Fatalf("a failed detach: %v, want its error", errs)
	}
	m.stranded, m.detachErr = nil, nil
	d.sweep(plan.Plan{}, false)
	d.sweep(plan.Plan{}, false)
	if got := sweeps(); got != 4 {
		t.Errorf("after a failed sweep: %d sweeps, want 4 (one more, then none)", got)
	}
	d.strandedByLinks = false // an injected mover: every time
	d.sweep(plan.Plan{}, false)
	if got := sweeps(); got != 5 {
		t.Errorf("injected mover: %d sweeps, want 5", got)
	}
}
