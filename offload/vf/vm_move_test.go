package vf_test

// VF moves in the kernel VM.
//
// What is real: the PF is a netdevsim device in switchdev mode, with its
// VFs, their representors (pf0vfN) and the VF settings the PF holds
// (MAC, VLAN, spoof check, trust, link state: set and cleared through
// it); network namespaces, moves between them, renames, addresses,
// routes, and the kernel giving a destroyed namespace's devices back to
// the init namespace.
//
// What is stood in (package vftest): netdevsim has no VF netdevs. Each
// VF's netdev is the port of a netdevsim device of its own: a device
// netdev, which the kernel moves between namespaces and returns to the
// init namespace when its namespace is destroyed, as it does a real VF (a
// veth or dummy would be deleted with the namespace instead). The VFs' PCI
// functions are directories of a sysfs overlay tree at 0000:7f:00.N whose
// net/ is a link to the stand-in device's real net/ directory in /sys, so
// the names sysfs shows (and hides, while the netdev is in a pod) are the
// kernel's.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/offload/vf"
	"github.com/skiff-sdn/skiff/offload/vf/vftest"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

const vfCount = 4

type vfRig struct {
	pf    string
	homes []string
	refs  []vf.Ref
	reps  []string
	sys   string
	mover *vf.Mover
	mgr   *vf.Manager
	host  nl.Kernel // the VM's root namespace: the host's
}

// newVFRig makes the PF (netdevsim 51, switchdev, 4 VFs) and one stand-in
// netdev per VF (netdevsim 61..64, renamed skvf0..3) with the overlay
// tree (package vftest).
func newVFRig(t *testing.T) *vfRig {
	s := vftest.New(t, 51, vfCount, 61, "skvf", logger())
	k := testkit.Open(t, nl.Open, "")
	return &vfRig{pf: s.PF, homes: s.Homes, refs: s.Refs, reps: s.Reps, sys: s.Root, host: k,
		mover: vf.NewMover(vf.MoverOptions{SysRoot: s.Root, Host: k, Logger: logger(), ReturnWait: 10 * time.Second}),
		mgr:   vf.NewManager(vf.Options{Netlink: k, Logger: logger()})}
}

// link reads the link of that name in the namespace at path ("": the
// host's).
func (r *vfRig) link(t *testing.T, path, name string) (nl.Link, error) {
	t.Helper()
	if path == "" {
		return r.host.LinkByName(name)
	}
	k, err := nl.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	return k.LinkByName(name)
}

func podMAC(i, round int) net.HardwareAddr {
	return net.HardwareAddr{0x02, 0x5a, 0x00, byte(round >> 8), byte(round), byte(i)}
}

func podIface(i, round int) vf.PodIface {
	return vf.PodIface{Name: "net1", MAC: podMAC(i, round), MTU: 1400,
		Addrs:  []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("192.0.2.%d/24", 10+i)), netip.MustParsePrefix(fmt.Sprintf("2001:db8::%d/64", 10+i))},
		Routes: []nl.LinkRoute{{Gw: netip.MustParseAddr("192.0.2.1")}, {Dst: netip.MustParsePrefix("198.51.100.0/24"), Gw: netip.MustParseAddr("192.0.2.2")}}}
}

// checkInPod checks VF i inside the pod namespace as Attach left it.
func (r *vfRig) checkInPod(t *testing.T, i int, ns string, round int) {
	t.Helper()
	d, err := r.link(t, ns, "net1")
	if err != nil {
		t.Fatalf("round %d: VF %d not in %s as net1: %v", round, i, ns, err)
	}
	if d.MTU != 1400 || !d.Up || d.MAC != podMAC(i, round).String() || !strings.Contains(d.Alias, "pci="+r.refs[i].PCI) {
		t.Fatalf("round %d: VF %d in pod = %+v", round, i, d)
	}
	k, err := nl.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	in, err := nl.Inspect(k, "net1")
	k.Close()
	want := fmt.Sprintf("[192.0.2.%d/24 2001:db8::%d/64] [192.0.2.1]", 10+i, 10+i)
	if got := fmt.Sprint(in.Addrs, in.Gateway); err != nil || got != want {
		t.Fatalf("round %d: VF %d in pod: addresses and gateways %s, %v; want %s", round, i, got, err, want)
	}
	if round%10 == 0 {
		// The other route, through iproute2 (every tenth round: a
		// process per check is slow under emulation).
		routes := guest.In(t, filepath.Base(ns), guest.IP, "route", "show", "dev", "net1")
		if !strings.Contains(routes, "198.51.100.0/24 via 192.0.2.2") {
			t.Fatalf("round %d: VF %d routes in pod:\n%s", round, i, routes)
		}
	}
	st, err := r.mgr.State(r.pf, i)
	if err != nil || st.Mac.String() != podMAC(i, round).String() || !st.Spoofchk || st.Trust != 0 || st.Vlan != 0 || st.LinkState != uint32(vf.LinkAuto) {
		t.Fatalf("round %d: PF side of VF %d = %+v %v", round, i, st, err)
	}
}

// checkHome checks that every VF is back in the host under its name,
// clean, and its MAC cleared through the PF.
func (r *vfRig) checkHome(t *testing.T, round int) {
	t.Helper()
	for i, home := range r.homes {
		d, err := r.link(t, "", home)
		if err != nil {
			t.Fatalf("round %d: VF %d not home as %s: %v", round, i, home, err)
		}
		if d.Alias != "" || d.MTU != 1500 || d.Up {
			t.Fatalf("round %d: VF %d at home = %+v", round, i, d)
		}
		in, err := nl.Inspect(r.host, home)
		if err != nil || len(in.Addrs) != 0 || len(in.Gateway) != 0 {
			t.Fatalf("round %d: %s at home kept addresses or routes: %+v %v", round, home, in, err)
		}
		st, err := r.mgr.State(r.pf, i)
		if err != nil || st.Mac.String() != vf.ZeroMAC.String() {
			t.Fatalf("round %d: PF side MAC of VF %d = %v %v", round, i, st.Mac, err)
		}
	}
}

func pods(t *testing.T) []string {
	var out []string
	for i := range vfCount {
		name := fmt.Sprintf("skvfpod%d", i)
		guest.AddNetns(t, name)
		out = append(out, "/run/netns/"+name)
	}
	return out
}

// TestVFMoveCycles moves every VF into a pod of its own and back, 100
// times, checking both ends each time: every VF ends home with its name.
func TestVFMoveCycles(t *testing.T) {
	r := newVFRig(t)
	ns := pods(t)
	start := time.Now()
	var inMover time.Duration
	const rounds = 100
	for round := range rounds {
		for i, ref := range r.refs {
			t0 := time.Now()
			err := r.mover.Attach(ref, vf.PodSettings(podMAC(i, round)), ns[i], podIface(i, round))
			inMover += time.Since(t0)
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		for i := range r.refs {
			r.checkInPod(t, i, ns[i], round)
		}
		// Attach again (a repeated ADD): nothing moves.
		if err := r.mover.Attach(r.refs[0], vf.PodSettings(podMAC(0, round)), ns[0], podIface(0, round)); err != nil {
			t.Fatalf("round %d: repeated attach: %v", round, err)
		}
		for i, ref := range r.refs {
			t0 := time.Now()
			err := r.mover.Detach(ref, ns[i], "net1")
			inMover += time.Since(t0)
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		r.checkHome(t, round)
	}
	t.Logf("%d rounds of %d attach+detach in %v with the checks; in Attach and Detach %v (%v per VF round trip, emulated CPU)", rounds, vfCount,
		time.Since(start).Round(time.Millisecond), inMover.Round(time.Millisecond), (inMover / (rounds * vfCount)).Round(time.Microsecond))
}

// TestVFBackFromDestroyedNamespace: the pod's namespace is deleted with
// the VF inside; the kernel returns it to the init namespace (as net1, or
// devN when net1 is taken); Stranded finds it and Detach brings it home,
// by the namespace path that no longer exists or without one.
func TestVFBackFromDestroyedNamespace(t *testing.T) {
	r := newVFRig(t)
	ns := pods(t)
	// A device called net1 in the host makes the kernel name VF 1 devN.
	guest.Run(t, guest.IP, "link", "add", "net1", "type", "dummy")
	t.Cleanup(func() { _ = exec.Command(guest.IP, "link", "del", "net1").Run() })
	for i := range 2 {
		if err := r.mover.Attach(r.refs[i], vf.PodSettings(podMAC(i, 0)), ns[i], podIface(i, 0)); err != nil {
			t.Fatal(err)
		}
		guest.Run(t, guest.IP, "netns", "del", filepath.Base(ns[i]))
	}
	var stranded []vf.Ref
	testkit.Eventually(t, "both VFs back in the init namespace", 20*time.Second, func() (bool, string) {
		var err error
		stranded, err = r.mover.Stranded(r.refs)
		return err == nil && len(stranded) == 2, fmt.Sprintf("%v %v", stranded, err)
	})
	if stranded[0] != r.refs[0] || stranded[1] != r.refs[1] {
		t.Errorf("stranded = %v", stranded)
	}
	links := guest.Run(t, guest.IP, "-o", "link", "show")
	t.Logf("host links with VFs back:\n%s", links)
	for _, i := range []int{0, 1} {
		if strings.Contains(links, " "+r.homes[i]+":") {
			t.Errorf("%s is home before Detach", r.homes[i])
		}
	}
	// Both came back as devN (net1 is taken in the host). VF 0 is given
	// back by the gone namespace's path, VF 1 without one.
	if err := r.mover.Detach(r.refs[0], ns[0], "net1"); err != nil {
		t.Fatal(err)
	}
	if err := r.mover.Detach(r.refs[1], "", ""); err != nil {
		t.Fatal(err)
	}
	if s, err := r.mover.Stranded(r.refs); err != nil || len(s) != 0 {
		t.Errorf("still stranded: %v %v", s, err)
	}
	r.checkHome(t, 0)
}

// TestVFAttachUndoneOnFailure: Attach fails at its last step (a route
// whose gateway is not reachable from the pod's addresses); the VF is
// back home with its PF settings as they were.
func TestVFAttachUndoneOnFailure(t *testing.T) {
	r := newVFRig(t)
	ns := pods(t)
	before, err := r.mgr.State(r.pf, 2)
	if err != nil {
		t.Fatal(err)
	}
	ifc := podIface(2, 0)
	ifc.Routes = append(ifc.Routes, nl.LinkRoute{Dst: netip.MustParsePrefix("203.0.113.0/24"), Gw: netip.MustParseAddr("203.0.113.99")})
	err = r.mover.Attach(r.refs[2], vf.PodSettings(podMAC(2, 0)), ns[2], ifc)
	if err == nil || !strings.Contains(err.Error(), "203.0.113.99") {
		t.Fatalf("err = %v", err)
	}
	t.Logf("refused: %v", err)
	if _, err := r.link(t, ns[2], "net1"); !errors.Is(err, nl.ErrNoLink) {
		t.Errorf("net1 left in the pod: %v", err)
	}
	r.checkHome(t, 0)
	after, _ := r.mgr.State(r.pf, 2)
	if after.Mac.String() != before.Mac.String() || after.Spoofchk != before.Spoofchk || after.Trust != before.Trust || after.LinkState != before.LinkState {
		t.Errorf("PF settings %+v, were %+v", after, before)
	}
	// A pod that already has the name is refused before anything moves.
	guest.In(t, filepath.Base(ns[3]), guest.IP, "link", "add", "net1", "type", "dummy")
	err = r.mover.Attach(r.refs[3], vf.PodSettings(podMAC(3, 0)), ns[3], podIface(3, 0))
	if err == nil || !strings.Contains(err.Error(), "already has an interface net1") {
		t.Errorf("err = %v", err)
	}
	r.checkHome(t, 0)
}

// TestVFDetachHomeTaken: a foreign device took the VF's home name while it
// was in the pod: Detach fails and leaves the VF in the pod as it was;
// once the name is free Detach brings it home.
func TestVFDetachHomeTaken(t *testing.T) {
	r := newVFRig(t)
	ns := pods(t)
	if err := r.mover.Attach(r.refs[1], vf.PodSettings(podMAC(1, 0)), ns[1], podIface(1, 0)); err != nil {
		t.Fatal(err)
	}
	guest.Run(t, guest.IP, "link", "add", "skvf1", "type", "dummy")
	err := r.mover.Detach(r.refs[1], ns[1], "net1")
	if err == nil {
		t.Fatal("detach onto a taken name succeeded")
	}
	t.Logf("refused: %v", err)
	if d, err := r.link(t, ns[1], "net1"); err != nil || !strings.HasPrefix(d.Alias, "skiff:vf ") {
		t.Fatalf("VF not left in the pod: %+v %v", d, err)
	}
	guest.Run(t, guest.IP, "link", "del", "skvf1")
	if err := r.mover.Detach(r.refs[1], ns[1], "net1"); err != nil {
		t.Fatal(err)
	}
	r.checkHome(t, 0)
}
