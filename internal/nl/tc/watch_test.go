package tc_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl/tc"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestWatch: a change made through an ignored socket is not reported,
// nor a chain's coming and going; a change made by another process is,
// on its device, once.
func TestWatch(t *testing.T) {
	ns := testkit.New(t)
	testkit.Run(t, ns, "ip", "link", "add", "skw0", "type", "veth", "peer", "name", "skw1")
	index := func(dev string) int {
		n, err := strconv.Atoi(strings.TrimSpace(testkit.Run(t, ns, "cat", "/sys/class/net/"+dev+"/ifindex")))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	w, err := tc.NewWatch(testkit.Path(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c, err := tc.Dial(testkit.Path(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := w.Ignore(c.PortIDs()...); err != nil {
		t.Fatal(err)
	}

	if err := c.AddClsact(index("skw0")); err != nil {
		t.Fatal(err)
	}
	if devs, lost := w.Changed(); len(devs) != 0 || lost {
		t.Errorf("after our own change: changed %v, lost %v", devs, lost)
	}
	// Not even read: the kernel dropped it before the watch's socket.
	if n := w.Notifications(); n != 0 {
		t.Errorf("after our own change: %d notifications read, want 0", n)
	}
	// A chain made and deleted changes no filter: the kernel's chain
	// notifications carry port id 0 whoever caused them (the agent's
	// own first filter in a chain as well), so they are not counted.
	testkit.Run(t, ns, "tc", "chain", "add", "dev", "skw0", "ingress", "chain", "7")
	testkit.Run(t, ns, "tc", "chain", "del", "dev", "skw0", "ingress", "chain", "7")
	if devs, lost := w.Changed(); len(devs) != 0 || lost {
		t.Errorf("after a chain made and deleted: changed %v, lost %v", devs, lost)
	}
	testkit.Run(t, ns, "tc", "qdisc", "add", "dev", "skw1", "clsact")
	testkit.Run(t, ns, "tc", "qdisc", "del", "dev", "skw0", "clsact")
	devs, lost := w.Changed()
	if lost || len(devs) != 2 || !devs[index("skw0")] || !devs[index("skw1")] {
		t.Errorf("after iproute2's changes: changed %v, lost %v; want skw0 and skw1", devs, lost)
	}
	if devs, _ := w.Changed(); len(devs) != 0 {
		t.Errorf("reported twice: %v", devs)
	}
	if w.Notifications() < 4 {
		t.Errorf("%d notifications read, want at least iproute2's 4", w.Notifications())
	}
}

// TestWatchFilters: someone else's filter changes are listed by place
// (chain, priority, protocol, handle), a deleted filter as such; a whole
// priority deleted, or a qdisc, makes the device Whole. In the kernel VM
// (the host's kernel may have no classifier).
func TestWatchFilters(t *testing.T) {
	guest.Require(t)
	const ns = "skwatchf"
	guest.AddNetns(t, ns)
	run := func(args ...string) string { return guest.In(t, ns, args...) }
	run(guest.IP, "link", "add", "skw0", "type", "veth", "peer", "name", "skw1")
	n, err := strconv.Atoi(strings.TrimSpace(run("/bin/cat", "/sys/class/net/skw0/ifindex")))
	if err != nil {
		t.Fatal(err)
	}
	run(guest.TC, "qdisc", "add", "dev", "skw0", "clsact")
	w, err := tc.NewWatch("/run/netns/" + ns)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// Flower refuses a second filter with the same keys in a priority
	// (EEXIST): each matches its own address.
	add := func(handle, dst string) {
		run(guest.TC, "filter", "add", "dev", "skw0", "ingress", "chain", "3", "prio", "5", "handle", handle, "protocol", "ip", "flower", "dst_ip", dst, "action", "pass")
	}
	add("0x7", "192.0.2.7")
	add("0x8", "192.0.2.8")
	run(guest.TC, "filter", "del", "dev", "skw0", "ingress", "chain", "3", "prio", "5", "handle", "0x7", "protocol", "ip", "flower")
	devs, lost := w.Changes()
	want := []tc.FilterChange{
		{Chain: 3, Prio: 5, Proto: 0x0800, Handle: 7},
		{Chain: 3, Prio: 5, Proto: 0x0800, Handle: 8},
		{Delete: true, Chain: 3, Prio: 5, Proto: 0x0800, Handle: 7},
	}
	if got := devs[n]; lost || len(devs) != 1 || got.Whole || !slices.Equal(got.Filters, want) {
		t.Fatalf("changes %+v, lost %v; want on %d only: %+v", devs, lost, n, want)
	}
	// The whole priority: no single filter named.
	run(guest.TC, "filter", "del", "dev", "skw0", "ingress", "chain", "3", "prio", "5")
	if devs, _ := w.Changes(); !devs[n].Whole {
		t.Errorf("after a priority deleted: %+v, want skw0 whole", devs)
	}
	if devs, _ := w.Changes(); len(devs) != 0 {
		t.Errorf("reported twice: %+v", devs)
	}
}
