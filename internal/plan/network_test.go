package plan

import (
	"net/netip"
	"slices"
	"testing"
)

// TestNetworkOwn: lists holding the node's own VTEP (Own) read and compare
// as the lists without it.
func TestNetworkOwn(t *testing.T) {
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	all := []netip.Addr{a("192.0.2.1"), a("192.0.2.2"), a("192.0.2.3")}
	shared := Network{Name: "blue", VNI: 1, FloodVTEPs: all, HostPortVTEPs: all, Own: a("192.0.2.2")}
	own := Network{Name: "blue", VNI: 1, FloodVTEPs: []netip.Addr{a("192.0.2.1"), a("192.0.2.3")}, HostPortVTEPs: []netip.Addr{a("192.0.2.1"), a("192.0.2.3")}}
	if !shared.Equal(own) || !own.Equal(shared) || !shared.Equal(shared) {
		t.Fatal("a shared list and the same list without Own differ")
	}
	if got := shared.Flood(); !slices.Equal(got, own.FloodVTEPs) || &got[0] == &all[0] {
		t.Fatalf("Flood %v, want a copy of %v", got, own.FloodVTEPs)
	}
	if r := shared.Resolved(); r.Own.IsValid() || !slices.Equal(r.HostPortVTEPs, own.HostPortVTEPs) {
		t.Fatalf("Resolved %+v", r)
	}
	other := shared
	other.Own = a("192.0.2.3") // another node's view of the same list
	if other.Equal(shared) {
		t.Fatal("two nodes' views of one list compare equal")
	}
	short := own
	short.FloodVTEPs = own.FloodVTEPs[:1]
	if short.Equal(shared) || shared.Equal(short) {
		t.Fatal("a list one shorter compares equal")
	}
	if !slices.Equal(own.Flood(), own.FloodVTEPs) || &own.Flood()[0] != &own.FloodVTEPs[0] {
		t.Fatal("Flood of a list without Own is not the list")
	}
}
