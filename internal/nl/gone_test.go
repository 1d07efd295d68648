package nl_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestLinkGone: calls on a link deleted after it was listed fail with an
// error that says so (ErrLinkGone), and deleting it again succeeds.
func TestLinkGone(t *testing.T) {
	ns := testkit.New(t)
	k, err := nl.Open(testkit.Path(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if err := k.AddBridge(nl.Bridge{Name: "skbtest", MTU: 1450, Alias: "skiff:test"}); err != nil {
		t.Fatal(err)
	}
	testkit.Run(t, ns, "ip", "link", "add", "skptest", "type", "veth", "peer", "name", "skqtest")
	links, err := k.Links()
	if err != nil {
		t.Fatal(err)
	}
	idx := map[string]int{}
	for _, l := range links {
		idx[l.Name] = l.Index
	}
	testkit.Run(t, ns, "ip", "link", "del", "skptest") // behind the caller's back
	port, br := idx["skptest"], idx["skbtest"]
	for name, call := range map[string]func() error{
		"SetMaster":    func() error { return k.SetMaster(port, br) },
		"SetUp":        func() error { return k.SetUp(port) },
		"SetMTU":       func() error { return k.SetMTU(port, 1400) },
		"SetAlias":     func() error { return k.SetAlias(port, "skiff:x") },
		"PortFlags":    func() error { _, err := k.PortFlags(port); return err },
		"SetPortFlags": func() error { return k.SetPortFlags(port, nl.PortFlags{Learning: true}) },
		"Addrs":        func() error { _, err := k.Addrs(port); return err },
		"AddAddr":      func() error { return k.AddAddr(port, netip.MustParsePrefix("198.51.100.1/24")) },
		"SetMAC":       func() error { return k.SetMAC(port, "02:00:00:00:00:01") },
		"Rename":       func() error { return k.Rename(port, "skrtest") },
		"SetDown":      func() error { return k.SetDown(port) },
	} {
		if err := call(); !errors.Is(err, nl.ErrLinkGone) {
			t.Errorf("%s on a deleted link: %v, want ErrLinkGone", name, err)
		}
	}
	if err := k.DeleteLink(port); err != nil {
		t.Errorf("DeleteLink of a deleted link: %v", err)
	}
	// A link that exists fails for its own reasons, not as gone.
	if err := k.SetMaster(br, br); err == nil || errors.Is(err, nl.ErrLinkGone) {
		t.Errorf("enslaving a bridge to itself: %v, want an error that is not ErrLinkGone", err)
	}
}
