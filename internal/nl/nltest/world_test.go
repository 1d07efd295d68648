package nltest_test

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/nltest"
)

// open is a handle on path of w, failing t.
func open(t *testing.T, w *nltest.World, path string) nl.Kernel {
	t.Helper()
	k, err := w.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// index is the index of the link of that name, failing t.
func index(t *testing.T, k nl.Kernel, name string) int {
	t.Helper()
	l, err := k.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l.Index
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestWorld(t *testing.T) {
	w := nltest.New()
	host := open(t, w, "")
	ls, _ := host.Links()
	if len(ls) != 1 || ls[0].Name != "lo" || ls[0].Index != 1 || !ls[0].Up || ls[0].MAC != "" {
		t.Fatalf("a new world's host: %+v, want lo (1, up)", ls)
	}
	if _, err := w.Open("/run/netns/none"); !errors.Is(err, nl.ErrNoNetNS) {
		t.Errorf("open of a missing namespace: %v, want ErrNoNetNS", err)
	}
	pod := w.AddNS("/run/netns/pod")
	if pod.Path() != "/run/netns/pod" || w.NS("/run/netns/pod") != pod || w.NS("/x") != nil {
		t.Error("NS does not return what AddNS made")
	}
	k1, k2 := open(t, w, "/run/netns/pod"), open(t, w, "/run/netns/pod")
	must(t, k1.AddBridge(nl.Bridge{Name: "br0"}))
	if _, err := k2.LinkByName("br0"); err != nil {
		t.Errorf("a second handle of the namespace does not see the first's link: %v", err)
	}
	if k1.Writes() != 1 || k2.Writes() != 0 {
		t.Errorf("writes %d and %d, want 1 and 0: each handle counts its own", k1.Writes(), k2.Writes())
	}
	must(t, k1.Close())
	if _, err := k1.Links(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("a closed handle: %v, want net.ErrClosed", err)
	}
	if _, err := k2.Links(); err != nil {
		t.Errorf("the other handle after a close: %v", err)
	}
	if k1.Path() != "/run/netns/pod" {
		t.Errorf("path %q", k1.Path())
	}
}

// DeleteNS: veths go with their peers, devices go back to the host
// down without addresses (renamed when the host has their name), the
// rest goes; handles of it fail.
func TestDeleteNS(t *testing.T) {
	w := nltest.New()
	host := open(t, w, "")
	w.AddNS("/pod")
	pod := open(t, w, "/pod")
	must(t, host.AddVeth(nl.Veth{Name: "skh0", PeerName: "eth0"}, pod))
	w.AddDevice(nltest.Device{Name: "vf0", Up: true})
	w.AddDevice(nltest.Device{Name: "vf1", Up: true})
	must(t, host.MoveLink(index(t, host, "vf0"), pod))
	must(t, host.MoveLink(index(t, host, "vf1"), pod))
	w.AddDevice(nltest.Device{Name: "vf1"})
	vf0 := index(t, pod, "vf0")
	must(t, pod.SetUp(vf0))
	must(t, pod.AddAddr(vf0, netip.MustParsePrefix("10.0.0.2/24")))
	must(t, pod.AddBridge(nl.Bridge{Name: "br0"}))
	must(t, pod.SetMaster(vf0, index(t, pod, "br0")))

	w.DeleteNS("/pod")
	w.DeleteNS("/pod") // no error
	if w.NS("/pod") != nil {
		t.Error("the namespace is still there")
	}
	if _, err := pod.Links(); !errors.Is(err, nl.ErrNoNetNS) {
		t.Errorf("a handle of a deleted namespace: %v, want ErrNoNetNS", err)
	}
	ls, _ := host.Links()
	var names []string
	for _, l := range ls {
		names = append(names, l.Name)
	}
	if got := strings.Join(names, " "); got != "lo vf0 dev0 vf1" {
		t.Errorf("host links %q, want %q (the veth gone with its peer, the devices back at their indexes, vf1 renamed dev0)", got, "lo vf0 dev0 vf1")
	}
	l, _ := host.LinkByName("vf0")
	addrs, _ := host.Addrs(l.Index)
	if l.Up || l.Master != 0 || len(addrs) != 0 {
		t.Errorf("vf0 back in the host: %+v with %v, want down, no master, no addresses", l, addrs)
	}
	if _, err := w.Open("/pod"); !errors.Is(err, nl.ErrNoNetNS) {
		t.Errorf("open of a deleted namespace: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("deleting the host namespace did not panic")
		}
	}()
	w.DeleteNS("")
}

// A device removed (its driver let it go) leaves with what the kernel
// drops of it, reported by the link notifications; a device made again
// under its name is a new link; what is not a physical device is not
// removed (panic).
func TestRemoveDevice(t *testing.T) {
	w := nltest.New()
	w.AddNS("/pod")
	pod := open(t, w, "/pod")
	ns := w.NS("/pod")
	vf := ns.AddDevice(nltest.Device{Name: "eth0", MAC: "02:00:00:00:00:0a", Up: true})
	must(t, pod.AddAddr(vf.Index, netip.MustParsePrefix("10.0.0.2/24")))
	ch, err := pod.LinkChanges()
	must(t, err)
	ns.RemoveDevice("eth0")
	if _, err := pod.LinkByName("eth0"); !errors.Is(err, nl.ErrNoLink) {
		t.Errorf("eth0 after its removal: %v, want ErrNoLink", err)
	}
	if !ch.Any() {
		t.Error("no link notification of the removal")
	}
	must(t, ch.Close())
	if got := ns.State(); got != "link lo device mtu 65536 up\n" {
		t.Errorf("the namespace after the removal:\n%s", got)
	}
	if again := w.AddDevice(nltest.Device{Name: "eth0"}); again.Up || again.Index == 0 {
		t.Errorf("made again in the host: %+v", again)
	}
	defer func() {
		if recover() == nil {
			t.Error("removing lo did not panic")
		}
	}()
	ns.RemoveDevice("lo")
}

// A handle of another world, or no fake's, is refused as a peer.
func TestForeignHandle(t *testing.T) {
	w, other := nltest.New(), nltest.New()
	k, o := open(t, w, ""), open(t, other, "")
	if err := k.AddVeth(nl.Veth{Name: "a", PeerName: "b"}, o); err == nil {
		t.Error("AddVeth with a peer of another world worked")
	}
	if err := k.MoveLink(1, o); err == nil {
		t.Error("MoveLink to another world worked")
	}
	if err := k.AddVeth(nl.Veth{Name: "a", PeerName: "b"}, nil); err == nil {
		t.Error("AddVeth with a nil peer worked")
	}
}

// Everything is safe for concurrent use: handles of several namespaces
// write, read and watch at once (run with -race).
func TestConcurrent(t *testing.T) {
	w := nltest.New()
	host := open(t, w, "")
	must(t, host.AddBridge(nl.Bridge{Name: "br0"}))
	var wg sync.WaitGroup
	for i := range 8 {
		path := "/pod" + string(rune('a'+i))
		w.AddNS(path)
		wg.Add(1)
		go func() {
			defer wg.Done()
			pod := open(t, w, path)
			name := "skh" + string(rune('a'+i))
			if err := host.AddVeth(nl.Veth{Name: name, PeerName: "eth0"}, pod); err != nil {
				t.Error(err)
				return
			}
			l, _ := host.LinkByName(name)
			_ = host.SetMaster(l.Index, index(t, host, "br0"))
			c, _ := host.TC(1)
			_ = c.AddClsact(l.Index)
			_, _ = host.Links()
			_ = w.NS(path).State()
			w.DeleteNS(path)
		}()
	}
	wg.Wait()
	if ls, _ := host.Links(); len(ls) != 2 {
		t.Errorf("after the pods went: %d links, want lo and br0", len(ls))
	}
}

func errno(err error) unix.Errno {
	var e unix.Errno
	errors.As(err, &e)
	return e
}
