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

// fakeVFs records what a vfio port asks of the node, and fails the call
// named in fail.
type fakeVFs struct {
	calls []string
	fail  string
}

func (f *fakeVFs) call(c string) error {
	f.calls = append(f.calls, c)
	if f.fail != "" && strings.HasPrefix(c, f.fail) {
		return errors.New(f.fail + " refused")
	}
	return nil
}

func (f *fakeVFs) Apply(pf string, idx int, s vf.Settings) error {
	c := fmt.Sprintf("apply %s vf %d mac %s", pf, idx, s.MAC)
	if s.SpoofCheck != nil {
		c += fmt.Sprintf(" vlan %d spoofchk %v trust %v link %v", *s.VLAN, *s.SpoofCheck, *s.Trust, *s.LinkState)
	}
	return f.call(c)
}
func (f *fakeVFs) BindVFIO(pci string) (string, error) { return "mlx5_core", f.call("bind " + pci) }
func (f *fakeVFs) Release(pci string) error            { return f.call("release " + pci) }
func (f *fakeVFs) IOMMUGroup(pci string) (string, error) {
	return "/dev/vfio/17", f.call("group " + pci)
}

func vfioDatapath(f *fakeVFs) *Datapath {
	node := &eswitch.Node{PFs: []eswitch.PF{{
		Netdev: "ens1f0", Bus: "pci", Device: "0000:03:00.0", Mode: eswitch.ModeSwitchdev,
		VFs: []eswitch.VF{
			{Index: 0, PCIAddress: "0000:03:00.2", Representor: "eth1"},
			{Index: 1, PCIAddress: "", Representor: "eth2"},
			{Index: 2, PCIAddress: "0000:03:00.4"},
		},
	}}}
	return &Datapath{log: slog.New(slog.DiscardHandler), vfs: f, ports: &eswitchPorts{node: node, last: time.Now()}}
}

func vfioPort(idx int) plan.Endpoint {
	return plan.Endpoint{Name: "db1-0", Kind: plan.KindVFIO, PF: "ens1f0", VFIndex: idx, MAC: "02:00:00:00:00:07",
		IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.7/24")}}
}

func TestPlumbVFIO(t *testing.T) {
	f := &fakeVFs{}
	d := vfioDatapath(f)
	out, err := d.Plumb(t.Context(), datapath.PlumbRequest{Endpoint: vfioPort(0), Network: plan.Network{Name: "blue", VNI: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if out.HostIf != "eth1" || out.PCIAddress != "0000:03:00.2" || out.VFIOGroup != "/dev/vfio/17" {
		t.Errorf("plumbed %+v", out)
	}
	want := "apply ens1f0 vf 0 mac 02:00:00:00:00:07 vlan 0 spoofchk true trust false link auto; bind 0000:03:00.2; group 0000:03:00.2"
	if got := strings.Join(f.calls, "; "); got != want {
		t.Errorf("calls:\n%s\nwant:\n%s", got, want)
	}
	// By the PF's PCI address too.
	e := vfioPort(0)
	e.PF = "0000:03:00.0"
	if _, err := d.Plumb(t.Context(), datapath.PlumbRequest{Endpoint: e}); err != nil {
		t.Errorf("by PF PCI address: %v", err)
	}

	f.calls = nil
	if err := d.Unplumb(t.Context(), datapath.UnplumbRequest{Endpoint: vfioPort(0)}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.calls, "; "); got != "release 0000:03:00.2; apply ens1f0 vf 0 mac 00:00:00:00:00:00" {
		t.Errorf("unplumb calls: %s", got)
	}
	// A VF that is gone has nothing to give back.
	f.calls = nil
	if err := d.Unplumb(t.Context(), datapath.UnplumbRequest{Endpoint: vfioPort(7)}); err != nil || len(f.calls) != 0 {
		t.Errorf("unplumb of a gone VF: %v, calls %v", err, f.calls)
	}
}

// TestPlumbVFIOErrors: a VF that cannot serve is refused before anything
// is touched; a step that fails releases the VF again.
func TestPlumbVFIOErrors(t *testing.T) {
	for _, c := range []struct {
		name, fail string
		e          plan.Endpoint
		want       string
		calls      string
	}{
		{"unknown PF", "", func() plan.Endpoint { e := vfioPort(0); e.PF = "ens9"; return e }(), `no PF "ens9"`, ""},
		{"unknown VF", "", vfioPort(5), "PF ens1f0 has no VF 5", ""},
		{"no PCI function", "", vfioPort(1), "is not a PCI function", ""},
		{"no representor", "", vfioPort(2), "has no representor", ""},
		{"bad MAC", "", func() plan.Endpoint { e := vfioPort(0); e.MAC = "nope"; return e }(), `mac "nope"`, ""},
		{"settings refused", "apply ens1f0 vf 0 mac 02", vfioPort(0), "apply ens1f0 vf 0 mac 02", "release 0000:03:00.2; apply ens1f0 vf 0 mac 00:00:00:00:00:00"},
		{"bind refused", "bind", vfioPort(0), "bind refused", "bind 0000:03:00.2; release 0000:03:00.2; apply ens1f0 vf 0 mac 00:00:00:00:00:00"},
		{"no IOMMU group", "group", vfioPort(0), "group refused", "group 0000:03:00.2; release 0000:03:00.2; apply ens1f0 vf 0 mac 00:00:00:00:00:00"},
	} {
		f := &fakeVFs{fail: c.fail}
		d := vfioDatapath(f)
		_, err := d.Plumb(t.Context(), datapath.PlumbRequest{Endpoint: c.e})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "db1-0") {
			t.Errorf("%s: %v, want an error naming db1-0 with %q", c.name, err, c.want)
		}
		calls := strings.Join(f.calls, "; ")
		if (c.calls == "" && calls != "") || !strings.HasSuffix(calls, c.calls) {
			t.Errorf("%s: calls %q, want them to end with %q", c.name, calls, c.calls)
		}
	}
}
