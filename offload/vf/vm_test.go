package vf_test

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/offload/eswitch"
	"github.com/skiff-sdn/skiff/offload/vf"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

func logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestNetdevsimVFSettings sets VF settings through a real netdevsim PF and
// reads them back both through netlink and through iproute2.
func TestNetdevsimVFSettings(t *testing.T) {
	guest.Require(t)
	ns := guest.NewNetdevsim(t, 41, 1)
	pf := ns.Netdevs(t)[0]
	es := eswitch.New(eswitch.Options{Logger: logger()})
	if err := es.SetNumVFs(pf, 2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = es.SetNumVFs(pf, 0) })

	m := vf.NewManager(vf.Options{Netlink: testkit.Open(t, nl.Open, ""), Logger: logger()})
	mac, _ := net.ParseMAC("02:5a:00:00:00:07")
	s := vf.Settings{MAC: mac, VLAN: vf.Ptr(100), QoS: vf.Ptr(3), SpoofCheck: vf.Ptr(true), Trust: vf.Ptr(true),
		LinkState: vf.Ptr(vf.LinkDisable), MinTxRateMbps: vf.Ptr(uint32(10)), MaxTxRateMbps: vf.Ptr(uint32(500))}
	if err := m.Apply(pf, 1, s); err != nil {
		t.Fatal(err)
	}
	st, err := m.State(pf, 1)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mac.String() != mac.String() || st.Vlan != 100 || st.Qos != 3 || !st.Spoofchk || st.Trust != 1 ||
		st.LinkState != uint32(vf.LinkDisable) || st.MinTxRate != 10 || st.MaxTxRate != 500 {
		t.Errorf("vf 1 state = %+v", st)
	}
	out, err := exec.Command("/usr/sbin/ip", "link", "show", "dev", pf).CombinedOutput()
	if err != nil {
		t.Fatalf("ip link show: %v\n%s", err, out)
	}
	var line string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "vf 1 ") {
			line = l
		}
	}
	for _, want := range []string{"02:5a:00:00:00:07", "vlan 100", "qos 3", "spoof checking on", "link-state disable", "trust on", "max_tx_rate 500Mbps", "min_tx_rate 10Mbps"} {
		if !strings.Contains(line, want) {
			t.Errorf("ip link says %q; missing %q\n%s", line, want, out)
		}
	}
	if st0, _ := m.State(pf, 0); st0.Vlan != 0 || st0.Trust != 0 {
		t.Errorf("vf 0 changed: %+v", st0)
	}
	// Idempotent: nothing differs, nothing is set (the log would say).
	if err := m.Apply(pf, 1, s); err != nil {
		t.Fatal(err)
	}
	// In switchdev mode netdevsim refuses rates through the PF: the error
	// says which setting and why, and the other settings still apply.
	if err := es.SetMode(t.Context(), pf, eswitch.ModeSwitchdev); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = es.SetMode(t.Context(), pf, eswitch.ModeLegacy) })
	err = m.Apply(pf, 0, vf.Settings{MaxTxRateMbps: vf.Ptr(uint32(100))})
	if err == nil || !strings.Contains(err.Error(), "set rate") {
		t.Errorf("rate in switchdev mode: %v", err)
	}
	if err := m.Apply(pf, 7, vf.Settings{}); err == nil || !strings.Contains(err.Error(), "no vf 7") {
		t.Errorf("missing vf: %v", err)
	}
}

// TestVFIOBindAndRestore moves a real PCI function (the VM's virtio-rng)
// to vfio-pci and back, twice, through driver_override/unbind/drivers_probe.
func TestVFIOBindAndRestore(t *testing.T) {
	guest.Require(t)
	addr := guest.VirtioRNG(t)
	// vfio-pci needs an IOMMU group: the harness gives the VM an IOMMU.
	if _, err := os.Stat(fmt.Sprintf("/sys/bus/pci/devices/%s/iommu_group", addr)); err != nil {
		t.Fatalf("%s has no IOMMU group: %v", addr, err)
	}
	b := vf.NewBinder(vf.BinderOptions{Logger: logger()})
	orig, err := b.Driver(addr)
	if err != nil {
		t.Fatal(err)
	}
	if orig == "" {
		t.Fatalf("%s has no driver to start with", addr)
	}
	t.Logf("%s starts on %s", addr, orig)
	for round := range 2 {
		prev, err := b.BindVFIO(addr)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if prev != orig {
			t.Errorf("round %d: previous driver %q, want %q", round, prev, orig)
		}
		if prev2, err := b.BindVFIO(addr); err != nil || prev2 != vf.VFIODriver {
			t.Errorf("round %d: second bind: %q %v", round, prev2, err)
		}
		if d, _ := b.Driver(addr); d != vf.VFIODriver {
			t.Fatalf("round %d: on %q after bind", round, d)
		}
		ov, _ := os.ReadFile(fmt.Sprintf("/sys/bus/pci/devices/%s/driver_override", addr))
		if strings.TrimSpace(string(ov)) != vf.VFIODriver {
			t.Errorf("driver_override = %q", ov)
		}
		if err := b.Restore(addr, prev); err != nil {
			t.Fatalf("round %d: restore: %v", round, err)
		}
		if err := b.Restore(addr, prev); err != nil {
			t.Fatalf("round %d: second restore: %v", round, err)
		}
		if d, _ := b.Driver(addr); d != orig {
			t.Fatalf("round %d: on %q after restore, want %q", round, d, orig)
		}
		ov, _ = os.ReadFile(fmt.Sprintf("/sys/bus/pci/devices/%s/driver_override", addr))
		if strings.TrimSpace(string(ov)) != "(null)" {
			t.Errorf("driver_override after restore = %q", ov)
		}
	}
}
