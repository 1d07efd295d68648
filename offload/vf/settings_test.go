package vf

import (
	"net"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/nltest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// pfRig is a host namespace of the kernel fake with PF pf0, whose SR-IOV
// reports two VFs (MAC zero, no VLAN, spoof check off, not trusted, link
// state auto, no rate limits); k is the Manager's handle.
func pfRig(t *testing.T) (*nltest.World, nl.Kernel, *Manager) {
	w := nltest.New()
	w.AddDevice(nltest.Device{Name: "pf0", VFs: 2, Up: true})
	k := testkit.Open(t, w.Open, "")
	return w, k, NewManager(Options{Netlink: k})
}

// vfLines is what the PFs report of their VFs, a line each.
func vfLines(w *nltest.World) string {
	var out []string
	for _, l := range strings.Split(w.NS("").State(), "\n") {
		if strings.HasPrefix(l, "vf ") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestApplyChangesOnlyWhatDiffers(t *testing.T) {
	w, k, m := pfRig(t)
	must(t, testkit.Open(t, w.Open, "").SetVFSpoofCheck("pf0", 1, true))
	mac, _ := net.ParseMAC("02:00:00:00:01:01")
	s := Settings{MAC: mac, VLAN: Ptr(100), QoS: Ptr(3), SpoofCheck: Ptr(true), Trust: Ptr(true),
		LinkState: Ptr(LinkEnable), MaxTxRateMbps: Ptr(uint32(1000))}
	if err := m.Apply("pf0", 1, s); err != nil {
		t.Fatal(err)
	}
	// MAC, VLAN and QoS (one call), trust, link state, rate: spoof
	// check was on already.
	if n := k.Writes(); n != 5 {
		t.Errorf("%d writes, want 5 (spoof check was already on)", n)
	}
	want := "vf pf0 0 mac 00:00:00:00:00:00 vlan 0 qos 0 spoofchk off trust off state auto rate 0-0\n" +
		"vf pf0 1 mac 02:00:00:00:01:01 vlan 100 qos 3 spoofchk on trust on state enable rate 0-1000"
	if got := vfLines(w); got != want {
		t.Errorf("VFs:\n%s\nwant:\n%s", got, want)
	}
	if err := m.Apply("pf0", 1, s); err != nil || k.Writes() != 5 {
		t.Errorf("second apply: %v, %d writes", err, k.Writes()-5)
	}
	// VLAN 0 clears the QoS too.
	if err := m.Apply("pf0", 1, Settings{VLAN: Ptr(0)}); err != nil {
		t.Fatal(err)
	}
	if v, _ := m.State("pf0", 1); v.Vlan != 0 || v.Qos != 0 {
		t.Errorf("vlan 0: %+v", v)
	}
}

func TestApplyErrors(t *testing.T) {
	w, _, m := pfRig(t)
	// The PF refuses a multicast MAC (EINVAL); the other settings still
	// apply.
	multicast, _ := net.ParseMAC("03:00:00:00:01:01")
	err := m.Apply("pf0", 0, Settings{MAC: multicast, SpoofCheck: Ptr(true)})
	if err == nil || !strings.Contains(err.Error(), "pf pf0 vf 0: set mac 00:00:00:00:00:00 -> 03:00:00:00:01:01: ") ||
		!strings.HasSuffix(err.Error(), "invalid argument") {
		t.Errorf("err = %v", err)
	}
	if !strings.Contains(vfLines(w), "vf pf0 0 mac 00:00:00:00:00:00 vlan 0 qos 0 spoofchk on") {
		t.Errorf("a failing setting stopped the others: %s", vfLines(w))
	}
	for _, tc := range []struct {
		pf   string
		vf   int
		s    Settings
		want string
	}{
		{"pf0", 5, Settings{}, "pf pf0 has no vf 5"},
		{"nope", 0, Settings{}, "pf nope"},
		{"pf0", 0, Settings{VLAN: Ptr(4095)}, "VLAN 4095"},
		{"pf0", 0, Settings{QoS: Ptr(8)}, "QoS 8"},
		{"pf0", 0, Settings{MAC: net.HardwareAddr{1, 2}}, "not 6 bytes"},
		{"pf0", 0, Settings{MinTxRateMbps: Ptr(uint32(500)), MaxTxRateMbps: Ptr(uint32(100))}, "min rate 500 above max rate 100"},
	} {
		if err := m.Apply(tc.pf, tc.vf, tc.s); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Apply(%s, %d, %+v) = %v, want %q", tc.pf, tc.vf, tc.s, err, tc.want)
		}
	}
}
