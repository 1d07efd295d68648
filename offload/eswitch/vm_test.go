package eswitch_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/offload/eswitch"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
)

// TestNetdevsimSwitchdev runs in the kernel VM against a real netdevsim
// device: Skiff's own code creates VFs, switches the eswitch to switchdev
// over devlink netlink, and discovery must find the uplink and one
// representor per VF with the right index; VF count changes (which go
// through 0, as the kernel requires) and the way back to legacy are seen.
func TestNetdevsimSwitchdev(t *testing.T) {
	guest.Require(t)
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	d := eswitch.New(eswitch.Options{Logger: log})
	ns := guest.NewNetdevsim(t, 31, 1)
	t.Cleanup(func() {
		// Leave legacy mode and no VFs behind even when the test fails
		// half-way, so the device can be deleted cleanly.
		if devs := ns.Netdevs(t); len(devs) > 0 {
			for _, n := range devs {
				_ = d.SetMode(ctx, n, eswitch.ModeLegacy)
				_ = d.SetNumVFs(n, 0)
				break
			}
		}
	})

	pfName := ns.Netdevs(t)[0]
	node, err := d.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(node.Problems) != 0 {
		t.Fatalf("problems: %v", node.Problems)
	}
	pf, err := node.PF(pfName)
	if err != nil {
		t.Fatalf("%v (PFs: %+v)", err, node.PFs)
	}
	t.Logf("netdevsim PF %s: bus %s device %s port %q switch %s mode %s vfs %d/%d", pf.Netdev, pf.Bus, pf.Device, pf.PortName, pf.SwitchID, pf.Mode, pf.NumVFs, pf.TotalVFs)
	if pf.DevlinkHandle() != ns.Handle() || pf.Mode != eswitch.ModeLegacy || pf.NumVFs != 0 || pf.SwitchID == "" || pf.Number != 0 || pf.TotalVFs != -1 {
		t.Fatalf("PF before: %+v", pf)
	}
	if node.Kind != eswitch.NodeNone {
		t.Errorf("kind before switchdev = %s", node.Kind)
	}

	if err := d.SetNumVFs(pfName, 2); err != nil {
		t.Fatal(err)
	}
	if err := d.SetMode(ctx, pfName, eswitch.ModeSwitchdev); err != nil {
		t.Fatal(err)
	}
	if m, err := d.Mode(ctx, pfName); err != nil || m != eswitch.ModeSwitchdev {
		t.Fatalf("mode after set = %q, %v", m, err)
	}
	check := func(wantVFs int) {
		t.Helper()
		node, err := d.Discover(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(node.Problems) != 0 {
			t.Fatalf("problems: %v", node.Problems)
		}
		pf, err := node.PF(pfName)
		if err != nil {
			t.Fatalf("%v (PFs: %+v)", err, node.PFs)
		}
		if node.Kind != eswitch.NodeEswitch {
			t.Errorf("kind = %s, want eswitch", node.Kind)
		}
		if pf.Mode != eswitch.ModeSwitchdev || pf.NumVFs != wantVFs {
			t.Errorf("PF mode %s, %d VFs; want switchdev, %d", pf.Mode, pf.NumVFs, wantVFs)
		}
		if pf.Uplink == nil || pf.Uplink.Netdev != pfName || pf.Uplink.Port.Kind != eswitch.PortUplink {
			t.Errorf("uplink = %+v, want %s", pf.Uplink, pfName)
		}
		var got []string
		for _, r := range pf.Representors {
			if r.Port.Kind != eswitch.PortVF || r.Port.External {
				t.Errorf("unexpected representor %s %+v", r.Netdev, r.Port)
				continue
			}
			// The kernel's own view of the port must agree with ours.
			b, err := os.ReadFile("/sys/class/net/" + r.Netdev + "/phys_port_name")
			if err != nil || strings.TrimSpace(string(b)) != fmt.Sprintf("pf0vf%d", r.Port.VF) {
				t.Errorf("representor %s: phys_port_name %q (%v), parsed vf %d", r.Netdev, b, err, r.Port.VF)
			}
			got = append(got, fmt.Sprint(r.Port.VF))
		}
		var want []string
		for i := range wantVFs {
			want = append(want, fmt.Sprint(i))
			r, err := pf.RepresentorForVF(i)
			if err != nil {
				t.Errorf("vf %d: %v", i, err)
				continue
			}
			if !slices.Contains(ns.Netdevs(t), r.Netdev) {
				t.Errorf("vf %d representor %s is not a netdev of %s", i, r.Netdev, ns.Handle())
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("representor VF indexes = %v, want %v", got, want)
		}
		if _, err := pf.RepresentorForVF(wantVFs); err == nil {
			t.Errorf("representor for vf %d found with %d VFs", wantVFs, wantVFs)
		}
	}
	check(2)

	// 2 -> 4: the kernel refuses nonzero to nonzero; SetNumVFs goes
	// through 0, and switchdev recreates the representors.
	if err := d.SetNumVFs(pfName, 4); err != nil {
		t.Fatal(err)
	}
	if num, _, err := d.NumVFs(pfName); err != nil || num != 4 {
		t.Fatalf("NumVFs = %d, %v", num, err)
	}
	check(4)

	// Asking for more than the device has is refused by the kernel (and
	// netdevsim gives no sriov_totalvfs to check first): the error names
	// the attribute and the previous VFs and mode are restored.
	if err := d.SetNumVFs(pfName, 1000); err == nil || !strings.Contains(err.Error(), "sriov_numvfs") || !strings.Contains(err.Error(), "restored") {
		t.Errorf("1000 VFs: %v", err)
	}
	check(4)

	if err := d.SetMode(ctx, pfName, eswitch.ModeLegacy); err != nil {
		t.Fatal(err)
	}
	node, err = d.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pf, err = node.PF(pfName); err != nil {
		t.Fatal(err)
	}
	if pf.Mode != eswitch.ModeLegacy || len(pf.Representors) != 0 || node.Kind != eswitch.NodeNone {
		t.Errorf("after legacy: kind %s mode %s representors %+v", node.Kind, pf.Mode, pf.Representors)
	}
	if err := d.SetNumVFs(pfName, 0); err != nil {
		t.Fatal(err)
	}
}

// TestDevlinkNoEswitch: a devlink handle that does not exist is an error
// that says so.
func TestDevlinkNoEswitch(t *testing.T) {
	guest.Require(t)
	_, err := eswitch.NetlinkDevlink{}.EswitchMode(context.Background(), "netdevsim/netdevsim999")
	if err == nil {
		t.Fatal("mode of a missing device")
	}
	t.Logf("missing device: %v", err)
}

// TestNetdevsimTwoPorts: a device with two physical ports (p1, p2) on one
// switch is one PF (its first port) owning all VF representors.
func TestNetdevsimTwoPorts(t *testing.T) {
	guest.Require(t)
	ctx := context.Background()
	d := eswitch.New(eswitch.Options{})
	ns := guest.NewNetdevsim(t, 32, 2)
	devs := ns.Netdevs(t)
	t.Cleanup(func() {
		for _, n := range devs {
			_ = d.SetMode(ctx, n, eswitch.ModeLegacy)
			_ = d.SetNumVFs(n, 0)
			return
		}
	})
	if err := d.SetNumVFs(devs[0], 3); err != nil {
		t.Fatal(err)
	}
	if err := d.SetMode(ctx, devs[0], eswitch.ModeSwitchdev); err != nil {
		t.Fatal(err)
	}
	node, err := d.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(node.Problems) != 0 {
		t.Fatalf("problems: %v", node.Problems)
	}
	var pfs []eswitch.PF
	for _, pf := range node.PFs {
		if pf.DevlinkHandle() == ns.Handle() {
			pfs = append(pfs, pf)
		}
	}
	if len(pfs) != 1 {
		t.Fatalf("%d PFs for %s, want 1: %+v", len(pfs), ns.Handle(), pfs)
	}
	pf := pfs[0]
	if pf.Uplink == nil || pf.PortName != "p1" {
		t.Errorf("PF %s port %q uplink %+v, want the p1 port", pf.Netdev, pf.PortName, pf.Uplink)
	}
	for i := range 3 {
		if _, err := pf.RepresentorForVF(i); err != nil {
			t.Error(err)
		}
	}
	if len(pf.Representors) != 3 {
		t.Errorf("representors = %+v", pf.Representors)
	}
}
