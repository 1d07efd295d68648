package rtnl_test

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/rtnl"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// TestChanges: a link added, set up or deleted by another process (and
// acknowledged to it) is seen by the next Any, and only once; an address
// change is not a link change.
func TestChanges(t *testing.T) {
	ns := testkit.New(t)
	s, err := rtnl.Subscribe(testkit.Path(ns), unix.RTNLGRP_LINK)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Any() {
		t.Fatal("changes before any was made")
	}
	for _, step := range [][]string{
		{"ip", "link", "add", "skc0", "type", "veth", "peer", "name", "skc1"},
		{"ip", "link", "set", "skc0", "up"},
		{"ip", "link", "del", "skc0"},
	} {
		testkit.Run(t, ns, step...)
		if !s.Any() {
			t.Fatalf("%v: not seen", step)
		}
		if s.Any() {
			t.Fatalf("%v: seen twice", step)
		}
	}
	testkit.Run(t, ns, "ip", "link", "add", "skc2", "type", "veth", "peer", "name", "skc3")
	s.Any()
	testkit.Run(t, ns, "ip", "addr", "add", "192.0.2.1/24", "dev", "skc2")
	if s.Any() {
		t.Fatal("an address change counted as a link change")
	}
}
