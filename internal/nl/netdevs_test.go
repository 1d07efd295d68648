package nl_test

import (
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/testns"
)

// TestNetdevs moves a device (one end of a veth pair) between two
// throwaway namespaces, renames and configures it, and checks the errors
// that name a missing namespace, a missing device and a taken name.
func TestNetdevs(t *testing.T) {
	a, b := testns.New(t), testns.New(t)
	pa, pb := testns.Path(a), testns.Path(b)
	var n nl.Netdevs
	testns.Run(t, a, "ip", "link", "add", "skva", "type", "veth", "peer", "name", "skvb")

	if _, err := n.Get(pb, "skvb"); !errors.Is(err, nl.ErrNoLink) {
		t.Errorf("Get in the wrong namespace: %v", err)
	}
	if _, err := n.Get("/var/run/netns/skt-none", "skvb"); !errors.Is(err, nl.ErrNoNetNS) {
		t.Errorf("Get in a missing namespace: %v", err)
	}
	if err := n.Move(pa, "skvb", "/var/run/netns/skt-none"); !errors.Is(err, nl.ErrNoNetNS) {
		t.Errorf("Move to a missing namespace: %v", err)
	}
	if err := n.SetAlias(pa, "skvb", "skiff:test"); err != nil {
		t.Fatal(err)
	}
	if err := n.Move(pa, "skvb", pb); err != nil {
		t.Fatal(err)
	}
	d, err := n.Get(pb, "skvb")
	if err != nil || d.Alias != "skiff:test" || d.Up {
		t.Fatalf("moved device = %+v, %v", d, err)
	}
	if err := n.Rename(pb, "skvb", "net1"); err != nil {
		t.Fatal(err)
	}
	cfg := nl.LinkConfig{MAC: "02:5a:00:00:00:05", MTU: 1400,
		Addrs: []netip.Prefix{netip.MustParsePrefix("192.0.2.5/24"), netip.MustParsePrefix("2001:db8::5/64")},
		Routes: []nl.LinkRoute{{Gw: netip.MustParseAddr("192.0.2.1")},
			{Dst: netip.MustParsePrefix("198.51.100.0/24"), Gw: netip.MustParseAddr("192.0.2.2")},
			{Dst: netip.MustParsePrefix("203.0.113.0/24")}}}
	for range 2 { // idempotent
		if err := n.Configure(pb, "net1", cfg); err != nil {
			t.Fatal(err)
		}
	}
	d, err = n.Get(pb, "net1")
	if err != nil || d.MAC != "02:5a:00:00:00:05" || d.MTU != 1400 || !d.Up {
		t.Fatalf("configured device = %+v, %v", d, err)
	}
	addrs := testns.Run(t, b, "ip", "-o", "addr", "show", "dev", "net1")
	routes := testns.Run(t, b, "ip", "route", "show", "dev", "net1")
	for _, want := range []string{"192.0.2.5/24", "2001:db8::5/64"} {
		if !strings.Contains(addrs, want) {
			t.Errorf("addresses lack %s:\n%s", want, addrs)
		}
	}
	for _, want := range []string{"default via 192.0.2.1", "198.51.100.0/24 via 192.0.2.2", "203.0.113.0/24 scope link"} {
		if !strings.Contains(routes, want) {
			t.Errorf("routes lack %q:\n%s", want, routes)
		}
	}
	if err := n.Configure(pb, "net1", nl.LinkConfig{Routes: []nl.LinkRoute{{}}}); err == nil {
		t.Error("a route with neither destination nor gateway was accepted")
	}

	// A taken name in the target: EEXIST, and the device stays.
	testns.Run(t, a, "ip", "link", "add", "net1", "type", "veth", "peer", "name", "skvc")
	err = n.Move(pb, "net1", pa)
	if !errors.Is(err, syscall.EEXIST) {
		t.Errorf("Move onto a taken name: %v", err)
	}
	if _, err := n.Get(pb, "net1"); err != nil {
		t.Errorf("device left its namespace on a failed move: %v", err)
	}
	// Renamed back, it goes home; the move drops its addresses.
	if err := n.Rename(pb, "net1", "skvb"); err != nil {
		t.Fatal(err)
	}
	if err := n.Move(pb, "skvb", pa); err != nil {
		t.Fatal(err)
	}
	if out := testns.Run(t, a, "ip", "-o", "addr", "show", "dev", "skvb"); strings.Contains(out, "192.0.2.5") {
		t.Errorf("addresses survived the move: %s", out)
	}
	all, err := n.List(pa)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range all {
		names = append(names, d.Name)
	}
	if got := strings.Join(names, " "); !strings.Contains(got, "skva") || !strings.Contains(got, "skvb") {
		t.Errorf("List = %s", got)
	}
	if err := n.SetMTU(pa, "skvb", 1500); err != nil {
		t.Error(err)
	}
	if err := n.SetDown(pa, "nope0"); !errors.Is(err, nl.ErrNoLink) {
		t.Errorf("SetDown of a missing device: %v", err)
	}
}
