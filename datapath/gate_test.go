package datapath

import "testing"

func TestPlumbGate(t *testing.T) {
	var g PlumbGate
	if !g.Current("a") {
		t.Fatal("an endpoint never plumbed: the last apply's verdict holds")
	}
	// An apply begins, a plumb comes during it, the apply ends: its
	// verdict on a does not count; the next one's does.
	s1 := g.Begin()
	g.Plumbing("a")
	g.Done(s1)
	if g.Current("a") {
		t.Fatal("an apply that began before the plumb counted")
	}
	if !g.Current("b") {
		t.Fatal("b was not plumbed and should be current")
	}
	s2 := g.Begin()
	g.Done(s2)
	if !g.Current("a") {
		t.Fatal("an apply that began after the plumb did not count")
	}
	// Plumbed again (deleted and created under the same name): stale
	// again until the next apply begins and ends.
	s3 := g.Begin()
	g.Plumbing("a")
	s4 := g.Begin() // a later apply, begun after the plumb...
	g.Done(s3)      // ...while the earlier one ends first
	if g.Current("a") {
		t.Fatal("the earlier apply's verdict counted")
	}
	g.Done(s4)
	if !g.Current("a") {
		t.Fatal("the later apply's verdict did not count")
	}
	// An apply that begins while the plumb runs (before the interface
	// exists) does not count either; one that begins after it ended does.
	g.Plumbing("a")
	s5 := g.Begin()
	g.Plumbed("a")
	g.Done(s5)
	if g.Current("a") {
		t.Fatal("an apply that began during the plumb counted")
	}
	s6 := g.Begin()
	g.Done(s6)
	if !g.Current("a") {
		t.Fatal("an apply that began after the plumb ended did not count")
	}
	if len(g.plumbed) != 0 {
		t.Fatalf("plumbs seen by an apply are kept: %v", g.plumbed)
	}
}
