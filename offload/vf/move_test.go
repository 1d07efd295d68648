package vf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/nltest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// attached is the rig's state once VF 1 is in the pod as eth0.
const attached = `host:
link ens1f0np0 device mtu 1500 up
link ens1f0v0 device mtu 1500 down
link lo device mtu 65536 up
vf ens1f0np0 0 mac 00:00:00:00:00:00 vlan 0 qos 0 spoofchk off trust off state auto rate 0-0
vf ens1f0np0 1 mac 02:5a:00:00:00:09 vlan 0 qos 0 spoofchk on trust off state auto rate 0-0
pod1:
link eth0 device mtu 1450 up mac 02:5a:00:00:00:09 alias skiff:vf pci=0000:03:00.3 home=ens1f0v1 mtu=1500
link lo device mtu 65536 up
addr eth0 192.0.2.5/24
`

// detached is the rig's state once VF 1 is given back: home, down, its
// MTU and alias as they were, its MAC cleared through the PF (the
// netdev keeps the MAC it had in the pod) and its link state following
// the uplink.
const detached = `host:
link ens1f0np0 device mtu 1500 up
link ens1f0v0 device mtu 1500 down
link ens1f0v1 device mtu 1500 down mac 02:5a:00:00:00:09
link lo device mtu 65536 up
vf ens1f0np0 0 mac 00:00:00:00:00:00 vlan 0 qos 0 spoofchk off trust off state auto rate 0-0
vf ens1f0np0 1 mac 00:00:00:00:00:00 vlan 0 qos 0 spoofchk on trust off state auto rate 0-0
pod1:
link lo device mtu 65536 up
`

func TestAttachDetach(t *testing.T) {
	r := newMoveRig(t)
	if got := r.state(); got != homeState {
		t.Fatalf("the rig:\n%s\nwant:\n%s", got, homeState)
	}
	if err := r.attach(t, vf1, r.s, pod, r.ifc); err != nil {
		t.Fatal(err)
	}
	if got := r.state(); got != attached {
		t.Fatalf("after attach:\n%s\nwant:\n%s", got, attached)
	}
	pk := testkit.Open(t, r.w.Open, pod)
	if in, err := nl.Inspect(pk, "eth0"); err != nil || fmt.Sprint(in.Gateway) != "[192.0.2.1]" {
		t.Errorf("eth0 in the pod: %+v %v, want the default route via 192.0.2.1", in, err)
	}
	// Again (a repeated ADD): nothing moves and no PF setting is made
	// again (the host is not written); the configuration is made sure
	// of in the pod.
	hostWrites := r.host.Writes()
	if err := r.attach(t, vf1, r.s, pod, r.ifc); err != nil {
		t.Fatal(err)
	}
	if n := r.host.Writes() - hostWrites; n != 0 || r.state() != attached {
		t.Errorf("repeated attach: %d host writes, state:\n%s", n, r.state())
	}
	if err := r.detach(t, vf1, pod, "eth0"); err != nil {
		t.Fatal(err)
	}
	if got := r.state(); got != detached {
		t.Errorf("after detach:\n%s\nwant:\n%s", got, detached)
	}
	// Again: at home already; only the MAC is made sure of (it is
	// zero: nothing is written).
	writes := r.writes()
	if err := r.detach(t, vf1, pod, "eth0"); err != nil {
		t.Fatal(err)
	}
	if n := r.writes() - writes; n != 0 || r.state() != detached {
		t.Errorf("second detach: %d writes, state:\n%s", n, r.state())
	}
}

// TestAttachUndo: whichever step fails, the VF ends where it started,
// its PF settings as they were. Each failure is the kernel's answer to
// what happens in the world: a refused setting, a name taken, the pod's
// namespace deleted while Attach runs, an unreachable gateway.
func TestAttachUndo(t *testing.T) {
	multicast, _ := net.ParseMAC("03:5a:00:00:00:09")
	pf1 := "vf ens1f0np0 1 mac 00:00:00:00:00:00 vlan 0 qos 0 spoofchk off trust off state enable rate 0-0"
	for _, tc := range []struct {
		step string
		// stage readies the failure; it may change the Attach's
		// settings.
		stage func(r *moveRig, s *Settings, ifc *PodIface)
		want  error
		// home is the state the VF ends in: homeState but for what the
		// world did (a link made in the pod, the pod's namespace
		// deleted) and the pod's MAC the netdev keeps once Configure
		// has set it (the undo leaves a netdev's own MAC, as Detach
		// does).
		home string
	}{
		{"PF settings", func(r *moveRig, s *Settings, ifc *PodIface) {
			s.MAC = multicast // the PF refuses it; the other settings apply, then are undone
		}, unix.EINVAL, homeState},
		{"alias", func(r *moveRig, s *Settings, ifc *PodIface) {
			r.race("SetAlias", func() error { return enomem }, nil)
		}, unix.ENOMEM, homeState},
		{"move: the pod has a link of the VF's name", func(r *moveRig, s *Settings, ifc *PodIface) {
			r.w.NS(pod).AddDevice(nltest.Device{Name: "ens1f0v1"})
		}, unix.EEXIST, strings.Replace(homeState, "pod1:\n", "pod1:\nlink ens1f0v1 device mtu 1500 down\n", 1)},
		{"move: the pod's namespace is deleted", func(r *moveRig, s *Settings, ifc *PodIface) {
			r.race("MoveLink", func() error { r.w.DeleteNS(pod); return nil }, nil)
		}, nl.ErrNoNetNS, strings.TrimSuffix(homeState, "pod1:\nlink lo device mtu 65536 up\n")},
		{"rename: another link took the name in the pod", func(r *moveRig, s *Settings, ifc *PodIface) {
			r.race("MoveLink", nil, func() { r.w.NS(pod).AddDevice(nltest.Device{Name: "eth0"}) })
		}, unix.EEXIST, strings.Replace(homeState, "pod1:\n", "pod1:\nlink eth0 device mtu 1500 down\n", 1)},
		// The kernel gives the VF back to the host as the namespace
		// goes: the undo finds it there and clears its alias.
		{"rename: the pod's namespace is deleted", func(r *moveRig, s *Settings, ifc *PodIface) {
			r.race("MoveLink", nil, func() { r.w.DeleteNS(pod) })
		}, nl.ErrNoNetNS, strings.TrimSuffix(homeState, "pod1:\nlink lo device mtu 65536 up\n")},
		{"configure", func(r *moveRig, s *Settings, ifc *PodIface) {
			ifc.Routes = append(ifc.Routes, nl.LinkRoute{Dst: netip.MustParsePrefix("203.0.113.0/24"), Gw: netip.MustParseAddr("203.0.113.99")})
		}, unix.ENETUNREACH, strings.Replace(homeState, "ens1f0v1 device mtu 1500 down", "ens1f0v1 device mtu 1500 down mac 02:5a:00:00:00:09", 1)},
	} {
		t.Run(tc.step, func(t *testing.T) {
			r := newMoveRig(t)
			s, ifc := r.s, r.ifc
			tc.stage(r, &s, &ifc)
			err := r.attach(t, vf1, s, pod, ifc)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "vf: attach VF 1 of ens1f0np0 (0000:03:00.3)") {
				t.Fatalf("err = %v, want the attach of VF 1 failing with %v", err, tc.want)
			}
			t.Logf("refused: %v", err)
			if got := r.state(); got != tc.home {
				t.Errorf("state after the failure:\n%s\nwant:\n%s", got, tc.home)
			}
			if !strings.Contains(r.state(), pf1) {
				t.Errorf("PF settings of VF 1 not restored: want %s", pf1)
			}
		})
	}
}

func TestAttachRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, r *moveRig) (Ref, string, PodIface)
		want  string
	}{
		{"bad name", func(t *testing.T, r *moveRig) (Ref, string, PodIface) {
			i := r.ifc
			i.Name = "a/b"
			return vf1, pod, i
		}, `"a/b" is not an interface name`},
		{"long name", func(t *testing.T, r *moveRig) (Ref, string, PodIface) {
			i := r.ifc
			i.Name = "abcdefghijklmnop"
			return vf1, pod, i
		}, "not an interface name"},
		{"no namespace", func(t *testing.T, r *moveRig) (Ref, string, PodIface) { return vf1, "", r.ifc }, "no pod namespace"},
		{"pod has the name", func(t *testing.T, r *moveRig) (Ref, string, PodIface) {
			l := r.w.NS(pod).AddDevice(nltest.Device{Name: "eth0"})
			must(t, testkit.Open(t, r.w.Open, pod).SetAlias(l.Index, "other"))
			return vf1, pod, r.ifc
		}, `the pod already has an interface eth0 (alias "other")`},
		{"unknown PCI", func(t *testing.T, r *moveRig) (Ref, string, PodIface) {
			return Ref{PF: "ens1f0np0", Index: 1, PCI: "0000:99:00.1"}, pod, r.ifc
		}, "PCI function 0000:99:00.1"},
		{"foreign alias", func(t *testing.T, r *moveRig) (Ref, string, PodIface) {
			l, err := r.setup.LinkByName("ens1f0v1")
			must(t, err)
			must(t, r.setup.SetAlias(l.Index, "host uplink"))
			return vf1, pod, r.ifc
		}, `has alias "host uplink": not Skiff's to move`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newMoveRig(t)
			ref, ns, ifc := tc.setup(t, r)
			before := r.state()
			err := r.attach(t, ref, r.s, ns, ifc)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
			if n := r.writes(); n != 0 || r.state() != before {
				t.Errorf("changed something: %d writes, state:\n%s\nwas:\n%s", n, r.state(), before)
			}
		})
	}
}

// TestDetachDestroyedNamespace: the pod's namespace is gone; the kernel
// gave the VF back to the host (as eth0 when free, else devN): it is
// found by its PCI address and renamed home.
func TestDetachDestroyedNamespace(t *testing.T) {
	for _, clash := range []bool{false, true} {
		t.Run(fmt.Sprintf("host has eth0: %v", clash), func(t *testing.T) {
			r := newMoveRig(t)
			want := strings.TrimSuffix(detached, "pod1:\nlink lo device mtu 65536 up\n")
			if clash {
				r.w.AddDevice(nltest.Device{Name: "eth0"})
				want = strings.Replace(want, "link lo", "link eth0 device mtu 1500 down\nlink lo", 1)
			}
			if err := r.attach(t, vf1, r.s, pod, r.ifc); err != nil {
				t.Fatal(err)
			}
			r.w.DeleteNS(pod)
			back := "eth0"
			if clash {
				back = "dev0"
			}
			if l, ok := r.w.NS("").Link(back); !ok || !strings.HasPrefix(l.Alias, "skiff:vf ") {
				t.Fatalf("the VF is not back in the host as %s:\n%s", back, r.state())
			}
			vf0 := Ref{PF: "ens1f0np0", Index: 0, PCI: "0000:03:00.2"}
			if s := r.stranded(t, vf0, vf1); len(s) != 1 || s[0] != vf1 {
				t.Errorf("Stranded = %v, want VF 1", s)
			}
			if err := r.detach(t, vf1, pod, "eth0"); err != nil {
				t.Fatal(err)
			}
			if got := r.state(); got != want {
				t.Errorf("state:\n%s\nwant:\n%s", got, want)
			}
			if s := r.stranded(t, vf1); len(s) != 0 {
				t.Errorf("still stranded: %v", s)
			}
		})
	}
}

// TestDetachAway: the pod's namespace path is gone while the namespace
// is still being destroyed, with the VF in it (the kernel gives it back
// when that is done): Detach waits, then says so. Once the VF is back it
// is stranded, and Detach without a namespace brings it home.
func TestDetachAway(t *testing.T) {
	r := newMoveRig(t)
	if err := r.attach(t, vf1, r.s, pod, r.ifc); err != nil {
		t.Fatal(err)
	}
	// The dying namespace has no path anyone opens: the fake's stands
	// for it.
	const dying = "/dying"
	r.w.AddNS(dying)
	pk := testkit.Open(t, r.w.Open, pod)
	l, err := pk.LinkByName("eth0")
	must(t, err)
	must(t, pk.MoveLink(l.Index, testkit.Open(t, r.w.Open, dying)))
	r.w.DeleteNS(pod)
	err = r.detach(t, vf1, pod, "eth0")
	if !errors.Is(err, ErrVFAway) || !strings.Contains(err.Error(), "did not come back within") {
		t.Errorf("err = %v", err)
	}
	r.w.DeleteNS(dying)
	if s := r.stranded(t, vf1); len(s) != 1 {
		t.Fatalf("stranded = %v", s)
	}
	if err := r.detach(t, vf1, "", ""); err != nil {
		t.Fatal(err)
	}
	if got, want := r.state(), strings.TrimSuffix(detached, "pod1:\nlink lo device mtu 65536 up\n"); got != want {
		t.Errorf("state:\n%s\nwant:\n%s", got, want)
	}
}

// TestDetachMoveBackFails: a foreign device took the home name in the
// host; the VF stays in the pod as it was (down: Detach set it down
// first). Once the name is free again, Detach brings it home.
func TestDetachMoveBackFails(t *testing.T) {
	r := newMoveRig(t)
	if err := r.attach(t, vf1, r.s, pod, r.ifc); err != nil {
		t.Fatal(err)
	}
	sq := r.w.AddDevice(nltest.Device{Name: "ens1f0v1"})
	must(t, r.setup.SetAlias(sq.Index, "squatter"))
	err := r.detach(t, vf1, pod, "eth0")
	if !errors.Is(err, unix.EEXIST) || !strings.Contains(err.Error(), "file exists") {
		t.Fatalf("err = %v", err)
	}
	if l, ok := r.w.NS(pod).Link("eth0"); !ok || !strings.HasPrefix(l.Alias, "skiff:vf ") {
		t.Errorf("VF not left in the pod as eth0:\n%s", r.state())
	}
	must(t, r.setup.Rename(sq.Index, "squatter"))
	if err := r.detach(t, vf1, pod, "eth0"); err != nil {
		t.Fatal(err)
	}
	if got, want := r.state(), strings.Replace(detached, "link lo device mtu 65536 up\n", "link lo device mtu 65536 up\nlink squatter device mtu 1500 down alias squatter\n", 1); got != want {
		t.Errorf("state:\n%s\nwant:\n%s", got, want)
	}
}

func TestMarkRoundTrip(t *testing.T) {
	k := mark{pci: "0000:03:00.3", home: "ens1f0v1", mtu: 9000}
	got, ok := parseMark(k.String())
	if !ok || got != k {
		t.Errorf("parseMark(%q) = %+v %v", k.String(), got, ok)
	}
	for _, a := range []string{"", "skiff:vf", "skiff:vf pci=x", "skiff:port=1", "host uplink"} {
		if _, ok := parseMark(a); ok {
			t.Errorf("parseMark(%q) ok", a)
		}
	}
}
