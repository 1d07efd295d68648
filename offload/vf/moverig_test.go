package vf

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/nltest"
	"github.com/skiff-sdn/skiff/offload/eswitch/sysfstest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// The Mover's tests run on the kernel fake (nltest): the host namespace
// holds PF ens1f0np0, whose SR-IOV reports two VFs, and the VFs'
// netdevs ens1f0v0 and ens1f0v1 (devices, which the kernel moves
// between namespaces and gives back to the host when their namespace is
// destroyed); the pod's namespace is pod1. The sysfs tree (sysfstest)
// has the PF's PCI device with the VFs' functions 0000:03:00.2 and
// 0000:03:00.3, whose net/ shows their netdev's name while it is in the
// host namespace, as the host's sysfs does.

const pod = "/run/netns/pod1"

// vf1 is the VF the tests move.
var vf1 = Ref{PF: "ens1f0np0", Index: 1, PCI: "0000:03:00.3"}

type moveRig struct {
	w  *nltest.World
	tr *sysfstest.Tree
	// setup is the test's handle on the host namespace: what others do
	// there (staging, other processes).
	setup nl.Kernel
	// host and the namespaces the Mover opened are the Mover's handles:
	// their writes are its writes.
	host   nl.Kernel
	opened []nl.Kernel
	// netdev is each VF's netdev by PCI address: its ifindex, which the
	// kernel keeps when the netdev moves to a namespace where the index
	// is free (in these tests it always is).
	netdev map[string]int
	m      *Mover
	ifc    PodIface
	s      Settings
}

func newMoveRig(t *testing.T) *moveRig {
	w := nltest.New()
	r := &moveRig{w: w, tr: sysfstest.New(t), netdev: map[string]int{}}
	r.setup, r.host = testkit.Open(t, w.Open, ""), testkit.Open(t, w.Open, "")
	w.AddDevice(nltest.Device{Name: "ens1f0np0", VFs: 2, Up: true})
	pf := r.tr.PF("0000:03:00.0", 8, 2, "03", "mlx5_core", func(i int) string { return fmt.Sprintf("ens1f0v%d", i) })
	r.tr.Netdev(pf, "ens1f0np0", "", "")
	for i := range 2 {
		l := w.AddDevice(nltest.Device{Name: fmt.Sprintf("ens1f0v%d", i)})
		r.netdev[sysfstest.VFAddr("03", i)] = l.Index
	}
	// VF 1's link state was set by hand: Attach changes it, and its undo
	// gives it back.
	must(t, r.setup.SetVFLinkState("ens1f0np0", 1, uint32(LinkEnable)))
	w.AddNS(pod)
	r.m = NewMover(MoverOptions{SysRoot: r.tr.Root, Host: r.host, Open: r.open, ReturnWait: 50 * time.Millisecond})
	mac, _ := net.ParseMAC("02:5a:00:00:00:09")
	r.s = PodSettings(mac)
	r.ifc = PodIface{Name: "eth0", MAC: mac, MTU: 1450, Addrs: []netip.Prefix{netip.MustParsePrefix("192.0.2.5/24")},
		Routes: []nl.LinkRoute{{Gw: netip.MustParseAddr("192.0.2.1")}}}
	return r
}

// open is the Mover's OpenFunc: the fake's, keeping the handles.
func (r *moveRig) open(path string) (nl.Kernel, error) {
	k, err := r.w.Open(path)
	if err == nil {
		r.opened = append(r.opened, k)
	}
	return k, err
}

// writes is how many changing calls the Mover made.
func (r *moveRig) writes() int {
	n := r.host.Writes()
	for _, k := range r.opened {
		n += k.Writes()
	}
	return n
}

// sysfs makes the tree show the host namespace as it is now: a VF
// function's net/ holds its netdev's name while the netdev is in the
// host, nothing while it is elsewhere.
func (r *moveRig) sysfs(t *testing.T) {
	t.Helper()
	links, err := r.setup.Links()
	must(t, err)
	for pci, index := range r.netdev {
		fn := sysfstest.PCIParent + "/" + pci
		ents, _ := os.ReadDir(filepath.Join(r.tr.Root, fn, "net"))
		for _, e := range ents {
			r.tr.Remove(fn, e.Name())
		}
		for _, l := range links {
			if l.Index == index && l.Kind == "device" {
				r.tr.Netdev(fn, l.Name, "", "")
			}
		}
	}
}

// attach, detach and stranded call the Mover on the world as it is now
// (sysfs brought up to date first).
func (r *moveRig) attach(t *testing.T, ref Ref, s Settings, ns string, ifc PodIface) error {
	r.sysfs(t)
	return r.m.Attach(ref, s, ns, ifc)
}

func (r *moveRig) detach(t *testing.T, ref Ref, ns, ifname string) error {
	r.sysfs(t)
	return r.m.Detach(ref, ns, ifname)
}

func (r *moveRig) stranded(t *testing.T, refs ...Ref) []Ref {
	t.Helper()
	r.sysfs(t)
	out, err := r.m.Stranded(refs)
	must(t, err)
	return out
}

// state is the host's and the pod's namespace (when it is there) as
// the fake prints them.
func (r *moveRig) state() string {
	s := "host:\n" + r.w.NS("").State()
	if p := r.w.NS(pod); p != nil {
		s += "pod1:\n" + p.State()
	}
	return s
}

// homeState is the rig's state before anything moved.
const homeState = `host:
link ens1f0np0 device mtu 1500 up
link ens1f0v0 device mtu 1500 down
link ens1f0v1 device mtu 1500 down
link lo device mtu 65536 up
vf ens1f0np0 0 mac 00:00:00:00:00:00 vlan 0 qos 0 spoofchk off trust off state auto rate 0-0
vf ens1f0np0 1 mac 00:00:00:00:00:00 vlan 0 qos 0 spoofchk off trust off state enable rate 0-0
pod1:
link lo device mtu 65536 up
`

// racingHost is the Mover's host handle with the world acting once, at
// one of its calls (SetAlias or MoveLink): before runs ahead of the call
// (an error it returns is the kernel's answer to it), after once
// MoveLink has moved the link. Then the Mover has its plain handle back:
// the fake moves links only to its own handles, so a wrapper cannot be
// the target of the undo's move back.
type racingHost struct {
	nl.Kernel
	call   string
	before func() error
	after  func()
	done   func()
}

func (h *racingHost) fire(call string, after bool) error {
	if call != h.call || (after && h.after == nil) || (!after && h.before == nil) {
		return nil
	}
	h.done()
	if after {
		h.after()
		return nil
	}
	return h.before()
}

func (h *racingHost) SetAlias(index int, alias string) error {
	if err := h.fire("SetAlias", false); err != nil {
		return err
	}
	return h.Kernel.SetAlias(index, alias)
}

func (h *racingHost) MoveLink(index int, to nl.Kernel) error {
	if err := h.fire("MoveLink", false); err != nil {
		return err
	}
	if err := h.Kernel.MoveLink(index, to); err != nil {
		return err
	}
	return h.fire("MoveLink", true)
}

// race makes the world act at the Mover's next host call named call
// (see racingHost).
func (r *moveRig) race(call string, before func() error, after func()) {
	r.m.host = &racingHost{Kernel: r.host, call: call, before: before, after: after, done: func() { r.m.host = r.host }}
}

// enomem is the kernel's refusal of a request for want of memory: any
// request can get it.
var enomem = fmt.Errorf("nl: %w", unix.ENOMEM)
