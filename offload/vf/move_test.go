package vf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/internal/nl"
)

// fakeLinks plays the kernel for VF moves: devices in namespaces (""
// is the host), the host's VF netdevs mirrored into a sysfs tree as the
// kernel's namespace-tagged sysfs shows them, and namespaces that can be
// destroyed (their devices come back to the host, named as they were or
// devN). fail makes one operation fail ("move", "rename@pod", ...).
type fakeLinks struct {
	t      *testing.T
	sys    string
	ns     map[string]map[string]*nl.Netdev
	pciOf  map[*nl.Netdev]string
	fail   map[string]error
	calls  []string
	nextDv int
}

func newFakeLinks(t *testing.T) *fakeLinks {
	return &fakeLinks{t: t, sys: t.TempDir(), ns: map[string]map[string]*nl.Netdev{"": {}}, pciOf: map[*nl.Netdev]string{}, fail: map[string]error{}}
}

// addVF adds a VF netdev in the host.
func (f *fakeLinks) addVF(pci, name string, mtu int) {
	d := &nl.Netdev{Index: len(f.pciOf) + 10, Name: name, MTU: mtu, MAC: "02:00:00:00:00:01"}
	f.ns[""][name] = d
	f.pciOf[d] = pci
	f.sync()
}

func (f *fakeLinks) addNS(ns string) { f.ns[ns] = map[string]*nl.Netdev{} }

// destroy removes a namespace; its VF netdevs return to the host.
func (f *fakeLinks) destroy(ns string) {
	for name, d := range f.ns[ns] {
		d.Up = false
		if _, taken := f.ns[""][name]; taken {
			d.Name = fmt.Sprintf("dev%d", f.nextDv)
			f.nextDv++
		}
		f.ns[""][d.Name] = d
	}
	delete(f.ns, ns)
	f.sync()
}

// sync writes bus/pci/devices/<pci>/net/<name> for VF netdevs in the host.
func (f *fakeLinks) sync() {
	for d, pci := range f.pciOf {
		dir := filepath.Join(f.sys, "bus/pci/devices", pci, "net")
		must(f.t, os.RemoveAll(dir))
		must(f.t, os.MkdirAll(dir, 0o755))
		if f.ns[""][d.Name] == d {
			must(f.t, os.MkdirAll(filepath.Join(dir, d.Name), 0o755))
		}
	}
}

func (f *fakeLinks) op(what, ns string) error {
	key := what
	if ns != "" {
		key += "@pod"
	}
	f.calls = append(f.calls, key)
	return f.fail[key]
}

func (f *fakeLinks) dev(ns, name string) (*nl.Netdev, error) {
	m, ok := f.ns[ns]
	if !ok {
		return nil, fmt.Errorf("namespace %s: %w", ns, nl.ErrNoNetNS)
	}
	d, ok := m[name]
	if !ok {
		return nil, fmt.Errorf("%s: %w", name, nl.ErrNoLink)
	}
	return d, nil
}

func (f *fakeLinks) Get(ns, name string) (nl.Netdev, error) {
	d, err := f.dev(ns, name)
	if err != nil {
		return nl.Netdev{}, err
	}
	return *d, nil
}

func (f *fakeLinks) List(ns string) ([]nl.Netdev, error) {
	m, ok := f.ns[ns]
	if !ok {
		return nil, nl.ErrNoNetNS
	}
	var out []nl.Netdev
	for _, d := range m {
		out = append(out, *d)
	}
	return out, nil
}

func (f *fakeLinks) change(what, ns, name string, fn func(d *nl.Netdev) error) error {
	if err := f.op(what, ns); err != nil {
		return err
	}
	d, err := f.dev(ns, name)
	if err != nil {
		return err
	}
	if err := fn(d); err != nil {
		return err
	}
	f.sync()
	return nil
}

func (f *fakeLinks) SetAlias(ns, name, alias string) error {
	return f.change("alias", ns, name, func(d *nl.Netdev) error { d.Alias = alias; return nil })
}
func (f *fakeLinks) SetDown(ns, name string) error {
	return f.change("down", ns, name, func(d *nl.Netdev) error { d.Up = false; return nil })
}
func (f *fakeLinks) SetMTU(ns, name string, mtu int) error {
	return f.change("mtu", ns, name, func(d *nl.Netdev) error { d.MTU = mtu; return nil })
}
func (f *fakeLinks) Rename(ns, name, newName string) error {
	return f.change("rename", ns, name, func(d *nl.Netdev) error {
		if _, taken := f.ns[ns][newName]; taken {
			return errors.New("file exists")
		}
		delete(f.ns[ns], name)
		d.Name, d.Up = newName, false
		f.ns[ns][newName] = d
		return nil
	})
}
func (f *fakeLinks) Move(from, name, to string) error {
	return f.change("move", from, name, func(d *nl.Netdev) error {
		if _, ok := f.ns[to]; !ok {
			return nl.ErrNoNetNS
		}
		if _, taken := f.ns[to][name]; taken {
			return errors.New("file exists")
		}
		delete(f.ns[from], name)
		d.Up = false
		f.ns[to][name] = d
		return nil
	})
}
func (f *fakeLinks) Configure(ns, name string, c nl.LinkConfig) error {
	return f.change("configure", ns, name, func(d *nl.Netdev) error {
		if c.MAC != "" {
			d.MAC = c.MAC
		}
		if c.MTU > 0 {
			d.MTU = c.MTU
		}
		d.Up = true
		return nil
	})
}

// state renders where every VF netdev is: ns:name/mtu/alias/up.
func (f *fakeLinks) state() string {
	var out []string
	for ns, m := range f.ns {
		for _, d := range m {
			out = append(out, fmt.Sprintf("%s:%s/%d/%q/%v", strings.TrimPrefix(ns, "/run/netns/"), d.Name, d.MTU, d.Alias, d.Up))
		}
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

const pod = "/run/netns/pod1"

type moveRig struct {
	links *fakeLinks
	pf    *fakeNL
	m     *Mover
	ref   Ref
	ifc   PodIface
	s     Settings
}

func newMoveRig(t *testing.T) *moveRig {
	l := newFakeLinks(t)
	l.addVF("0000:03:00.3", "ens1f0v1", 1500)
	l.addVF("0000:03:00.2", "ens1f0v0", 1500)
	l.addNS(pod)
	pf := &fakeNL{vfs: []nl.VF{{ID: 0, Mac: ZeroMAC}, {ID: 1, Mac: ZeroMAC, Spoofchk: false, LinkState: uint32(LinkEnable)}}}
	mac, _ := net.ParseMAC("02:5a:00:00:00:09")
	return &moveRig{
		links: l, pf: pf,
		m:   NewMover(MoverOptions{SysRoot: l.sys, Links: l, Netlink: pf, ReturnWait: 50 * time.Millisecond}),
		ref: Ref{PF: "pf0", Index: 1, PCI: "0000:03:00.3"},
		ifc: PodIface{Name: "eth0", MAC: mac, MTU: 1450, Addrs: []netip.Prefix{netip.MustParsePrefix("192.0.2.5/24")},
			Routes: []nl.LinkRoute{{Gw: netip.MustParseAddr("192.0.2.1")}}},
		s: PodSettings(mac),
	}
}

const homeState = `:ens1f0v0/1500/""/false :ens1f0v1/1500/""/false`

func TestAttachDetach(t *testing.T) {
	r := newMoveRig(t)
	if err := r.m.Attach(r.ref, r.s, pod, r.ifc); err != nil {
		t.Fatal(err)
	}
	want := `:ens1f0v0/1500/""/false pod1:eth0/1450/"skiff:vf pci=0000:03:00.3 home=ens1f0v1 mtu=1500"/true`
	if got := r.links.state(); got != want {
		t.Fatalf("after attach: %s\nwant %s", got, want)
	}
	if v := r.pf.vfs[1]; v.Mac.String() != "02:5a:00:00:00:09" || !v.Spoofchk || v.Trust != 0 || v.Vlan != 0 || v.LinkState != uint32(LinkAuto) {
		t.Errorf("PF side of vf 1 = %+v", v)
	}
	// Again: nothing moves, settings and configuration are made sure of.
	r.links.calls = nil
	if err := r.m.Attach(r.ref, r.s, pod, r.ifc); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.links.calls, " "); got != "configure@pod" {
		t.Errorf("repeated attach did %s", got)
	}
	if err := r.m.Detach(r.ref, pod, "eth0"); err != nil {
		t.Fatal(err)
	}
	if got := r.links.state(); got != homeState {
		t.Errorf("after detach: %s\nwant %s", got, homeState)
	}
	if v := r.pf.vfs[1]; v.Mac.String() != ZeroMAC.String() {
		t.Errorf("PF side MAC after detach = %s", v.Mac)
	}
	// Again: at home already; only the MAC is made sure of.
	r.links.calls = nil
	if err := r.m.Detach(r.ref, pod, "eth0"); err != nil {
		t.Fatal(err)
	}
	if len(r.links.calls) != 0 || r.links.state() != homeState {
		t.Errorf("second detach: calls %v, state %s", r.links.calls, r.links.state())
	}
}

// TestAttachUndo: whichever step fails, the VF ends where it started, its
// PF settings as they were.
func TestAttachUndo(t *testing.T) {
	for _, step := range []string{"alias", "move", "rename@pod", "configure@pod"} {
		t.Run(step, func(t *testing.T) {
			r := newMoveRig(t)
			before := r.pf.vfs[1]
			r.links.fail[step] = errors.New("injected")
			err := r.m.Attach(r.ref, r.s, pod, r.ifc)
			if err == nil || !strings.Contains(err.Error(), "injected") || !strings.Contains(err.Error(), "VF 1 of pf0 (0000:03:00.3)") {
				t.Fatalf("err = %v", err)
			}
			if got := r.links.state(); got != homeState {
				t.Errorf("state after failed %s: %s\nwant %s", step, got, homeState)
			}
			after := r.pf.vfs[1]
			if after.Mac.String() != before.Mac.String() || after.Spoofchk != before.Spoofchk || after.LinkState != before.LinkState {
				t.Errorf("PF settings not restored: %+v, were %+v", after, before)
			}
		})
	}
	t.Run("PF settings", func(t *testing.T) {
		r := newMoveRig(t)
		r.pf.fail = map[string]error{"spoofchk": errors.New("injected")}
		if err := r.m.Attach(r.ref, r.s, pod, r.ifc); err == nil {
			t.Fatal("attach succeeded")
		}
		if got := r.links.state(); got != homeState {
			t.Errorf("state: %s", got)
		}
	})
}

func TestAttachRefuses(t *testing.T) {
	r := newMoveRig(t)
	for _, tc := range []struct {
		name  string
		setup func(r *moveRig) (Ref, string, PodIface)
		want  string
	}{
		{"bad name", func(r *moveRig) (Ref, string, PodIface) { i := r.ifc; i.Name = "a/b"; return r.ref, pod, i }, `"a/b" is not an interface name`},
		{"long name", func(r *moveRig) (Ref, string, PodIface) {
			i := r.ifc
			i.Name = "abcdefghijklmnop"
			return r.ref, pod, i
		}, "not an interface name"},
		{"no namespace", func(r *moveRig) (Ref, string, PodIface) { return r.ref, "", r.ifc }, "no pod namespace"},
		{"pod has the name", func(r *moveRig) (Ref, string, PodIface) {
			r.links.ns[pod]["eth0"] = &nl.Netdev{Name: "eth0", Alias: "other"}
			return r.ref, pod, r.ifc
		}, `the pod already has an interface eth0 (alias "other")`},
		{"unknown PCI", func(r *moveRig) (Ref, string, PodIface) {
			return Ref{PF: "pf0", Index: 1, PCI: "0000:99:00.1"}, pod, r.ifc
		}, "PCI function 0000:99:00.1"},
		{"foreign alias", func(r *moveRig) (Ref, string, PodIface) {
			r.links.ns[""]["ens1f0v1"].Alias = "host uplink"
			return r.ref, pod, r.ifc
		}, `has alias "host uplink": not Skiff's to move`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r = newMoveRig(t)
			ref, ns, ifc := tc.setup(r)
			before := r.links.state()
			r.links.calls = nil
			err := r.m.Attach(ref, r.s, ns, ifc)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
			if r.links.state() != before || slices.ContainsFunc(r.links.calls, func(c string) bool { return c != "" }) {
				t.Errorf("changed something: calls %v, state %s", r.links.calls, r.links.state())
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
			if clash {
				r.links.ns[""]["eth0"] = &nl.Netdev{Name: "eth0"}
			}
			if err := r.m.Attach(r.ref, r.s, pod, r.ifc); err != nil {
				t.Fatal(err)
			}
			r.links.destroy(pod)
			stranded, err := r.m.Stranded([]Ref{{PF: "pf0", Index: 0, PCI: "0000:03:00.2"}, r.ref})
			if err != nil || len(stranded) != 1 || stranded[0] != r.ref {
				t.Errorf("Stranded = %v, %v", stranded, err)
			}
			if err := r.m.Detach(r.ref, pod, "eth0"); err != nil {
				t.Fatal(err)
			}
			want := homeState
			if clash {
				want = homeState + ` :eth0/0/""/false`
			}
			if got := r.links.state(); got != want {
				t.Errorf("state: %s\nwant %s", got, want)
			}
			if stranded, _ := r.m.Stranded([]Ref{r.ref}); len(stranded) != 0 {
				t.Errorf("still stranded: %v", stranded)
			}
		})
	}
}

func TestDetachAway(t *testing.T) {
	r := newMoveRig(t)
	if err := r.m.Attach(r.ref, r.s, pod, r.ifc); err != nil {
		t.Fatal(err)
	}
	// The namespace is gone but its devices are not back yet.
	vfdev := r.links.ns[pod]["eth0"]
	delete(r.links.ns, pod)
	err := r.m.Detach(r.ref, pod, "eth0")
	if !errors.Is(err, ErrVFAway) || !strings.Contains(err.Error(), "did not come back within") {
		t.Errorf("err = %v", err)
	}
	// The kernel finishes: the VF is stranded, and Detach without a
	// namespace brings it home.
	vfdev.Up = false
	r.links.ns[""]["eth0"] = vfdev
	r.links.sync()
	if s, _ := r.m.Stranded([]Ref{r.ref}); len(s) != 1 {
		t.Fatalf("stranded = %v", s)
	}
	if err := r.m.Detach(r.ref, "", ""); err != nil {
		t.Fatal(err)
	}
	if got := r.links.state(); got != homeState {
		t.Errorf("state: %s", got)
	}
}

// TestDetachMoveBackFails: a foreign device took the home name in the
// host; the VF stays in the pod as it was.
func TestDetachMoveBackFails(t *testing.T) {
	r := newMoveRig(t)
	if err := r.m.Attach(r.ref, r.s, pod, r.ifc); err != nil {
		t.Fatal(err)
	}
	r.links.ns[""]["ens1f0v1"] = &nl.Netdev{Name: "ens1f0v1", Alias: "squatter"}
	err := r.m.Detach(r.ref, pod, "eth0")
	if err == nil || !strings.Contains(err.Error(), "file exists") {
		t.Fatalf("err = %v", err)
	}
	if d := r.links.ns[pod]["eth0"]; d == nil || !strings.HasPrefix(d.Alias, "skiff:vf ") {
		t.Errorf("VF not left in the pod as eth0: %s", r.links.state())
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
