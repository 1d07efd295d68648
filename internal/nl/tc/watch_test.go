package tc_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl/tc"
	"github.com/skiff-sdn/skiff/internal/testns"
)

// TestWatch: a change made through an ignored socket is not reported,
// nor a chain's coming and going; a change made by another process is,
// on its device, once.
func TestWatch(t *testing.T) {
	ns := testns.New(t)
	testns.Run(t, ns, "ip", "link", "add", "skw0", "type", "veth", "peer", "name", "skw1")
	index := func(dev string) int {
		n, err := strconv.Atoi(strings.TrimSpace(testns.Run(t, ns, "cat", "/sys/class/net/"+dev+"/ifindex")))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	w, err := tc.NewWatch(testns.Path(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c, err := tc.Dial(testns.Path(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w.Ignore(c.PortID())

	if err := c.AddClsact(index("skw0")); err != nil {
		t.Fatal(err)
	}
	if devs, lost := w.Changed(); len(devs) != 0 || lost {
		t.Errorf("after our own change: changed %v, lost %v", devs, lost)
	}
	// A chain made and deleted changes no filter: the kernel's chain
	// notifications carry port id 0 whoever caused them (the agent's
	// own first filter in a chain as well), so they are not counted.
	testns.Run(t, ns, "tc", "chain", "add", "dev", "skw0", "ingress", "chain", "7")
	testns.Run(t, ns, "tc", "chain", "del", "dev", "skw0", "ingress", "chain", "7")
	if devs, lost := w.Changed(); len(devs) != 0 || lost {
		t.Errorf("after a chain made and deleted: changed %v, lost %v", devs, lost)
	}
	testns.Run(t, ns, "tc", "qdisc", "add", "dev", "skw1", "clsact")
	testns.Run(t, ns, "tc", "qdisc", "del", "dev", "skw0", "clsact")
	devs, lost := w.Changed()
	if lost || len(devs) != 2 || !devs[index("skw0")] || !devs[index("skw1")] {
		t.Errorf("after iproute2's changes: changed %v, lost %v; want skw0 and skw1", devs, lost)
	}
	if devs, _ := w.Changed(); len(devs) != 0 {
		t.Errorf("reported twice: %v", devs)
	}
	if w.Notifications() < 5 {
		t.Errorf("%d notifications read, want 5", w.Notifications())
	}
}

// TestWatchLinks: a link's change is reported by LinksChanged, whoever
// made it; a qdisc's is not. (After a veth is made the kernel may still
// announce its state later, from its link watch: only reports are
// asserted from there on.)
func TestWatchLinks(t *testing.T) {
	ns := testns.New(t)
	w, err := tc.NewWatch(testns.Path(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if !w.LinksChanged() {
		t.Error("the first call: no listing can be current yet")
	}
	if w.LinksChanged() {
		t.Error("nothing changed, reported")
	}
	testns.Run(t, ns, "tc", "qdisc", "add", "dev", "lo", "clsact")
	if w.LinksChanged() {
		t.Error("a qdisc added, reported as a link change")
	}
	testns.Run(t, ns, "ip", "link", "add", "skw0", "type", "veth", "peer", "name", "skw1")
	if !w.LinksChanged() {
		t.Error("a link added, not reported")
	}
	testns.Run(t, ns, "ip", "link", "set", "skw0", "mtu", "1400")
	if !w.LinksChanged() {
		t.Error("a link's MTU set, not reported")
	}
	testns.Run(t, ns, "ip", "link", "del", "skw0")
	if !w.LinksChanged() {
		t.Error("a link deleted, not reported")
	}
}
