package vf

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// fakeNL keeps VF state like a PF driver would and records calls.
type fakeNL struct {
	vfs   []nl.VF
	calls []string
	fail  map[string]error
}

func (f *fakeNL) VFs(pf string) ([]nl.VF, error) {
	if pf != "pf0" {
		return nil, errors.New("Link not found")
	}
	return append([]nl.VF(nil), f.vfs...), nil
}

func (f *fakeNL) do(what string, vf int, set func(*nl.VF)) error {
	f.calls = append(f.calls, what)
	if err := f.fail[what]; err != nil {
		return err
	}
	set(&f.vfs[vf])
	return nil
}

func (f *fakeNL) SetVFMAC(_ string, vf int, hw net.HardwareAddr) error {
	return f.do("mac", vf, func(v *nl.VF) { v.Mac = hw })
}
func (f *fakeNL) SetVFVlanQos(_ string, vf, vlan, qos int) error {
	return f.do("vlan", vf, func(v *nl.VF) { v.Vlan, v.Qos = vlan, qos })
}
func (f *fakeNL) SetVFSpoofCheck(_ string, vf int, c bool) error {
	return f.do("spoofchk", vf, func(v *nl.VF) { v.Spoofchk = c })
}
func (f *fakeNL) SetVFTrust(_ string, vf int, tr bool) error {
	return f.do("trust", vf, func(v *nl.VF) {
		v.Trust = 0
		if tr {
			v.Trust = 1
		}
	})
}
func (f *fakeNL) SetVFLinkState(_ string, vf int, s uint32) error {
	return f.do("state", vf, func(v *nl.VF) { v.LinkState = s })
}
func (f *fakeNL) SetVFRate(_ string, vf, lo, hi int) error {
	return f.do("rate", vf, func(v *nl.VF) { v.MinTxRate, v.MaxTxRate = uint32(lo), uint32(hi) })
}

func TestApplyChangesOnlyWhatDiffers(t *testing.T) {
	f := &fakeNL{vfs: []nl.VF{{ID: 0}, {ID: 1, Spoofchk: true}}}
	m := NewManager(Options{Netlink: f})
	mac, _ := net.ParseMAC("02:00:00:00:01:01")
	s := Settings{MAC: mac, VLAN: Ptr(100), QoS: Ptr(3), SpoofCheck: Ptr(true), Trust: Ptr(true),
		LinkState: Ptr(LinkEnable), MaxTxRateMbps: Ptr(uint32(1000))}
	if err := m.Apply("pf0", 1, s); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.calls, ","); got != "mac,vlan,trust,state,rate" {
		t.Errorf("calls = %s (spoofchk was already on)", got)
	}
	v := f.vfs[1]
	if v.Mac.String() != mac.String() || v.Vlan != 100 || v.Qos != 3 || v.Trust != 1 || v.LinkState != uint32(LinkEnable) || v.MaxTxRate != 1000 {
		t.Errorf("vf 1 = %+v", v)
	}
	if f.vfs[0].Vlan != 0 {
		t.Error("vf 0 touched")
	}
	f.calls = nil
	if err := m.Apply("pf0", 1, s); err != nil || len(f.calls) != 0 {
		t.Errorf("second apply: %v, calls %v", err, f.calls)
	}
	// VLAN 0 clears the QoS too.
	if err := m.Apply("pf0", 1, Settings{VLAN: Ptr(0)}); err != nil || f.vfs[1].Vlan != 0 || f.vfs[1].Qos != 0 {
		t.Errorf("vlan 0: %v %+v", err, f.vfs[1])
	}
}

func TestApplyErrors(t *testing.T) {
	f := &fakeNL{vfs: []nl.VF{{ID: 0}}, fail: map[string]error{"trust": errors.New("operation not supported")}}
	m := NewManager(Options{Netlink: f})
	err := m.Apply("pf0", 0, Settings{Trust: Ptr(true), SpoofCheck: Ptr(true)})
	if err == nil || !strings.Contains(err.Error(), "pf pf0 vf 0: set trust false -> true: operation not supported") {
		t.Errorf("err = %v", err)
	}
	if !f.vfs[0].Spoofchk {
		t.Error("a failing setting stopped the others")
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
