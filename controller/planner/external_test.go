package planner

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestExternalRoutesReachMembersOnly(t *testing.T) {
	p := newPlanner()
	p.Load(10, base())
	vtep := netip.MustParseAddr("203.0.113.5")
	host := netip.MustParsePrefix("198.51.100.200/32")
	ext := []External{
		{VNI: 100, VTEP: vtep, MAC: "02:AA:00:00:00:01", IPs: []netip.Prefix{host}},
		{VNI: 100, VTEP: vtep},
		{VNI: 999, VTEP: vtep, MAC: "02:aa:00:00:00:09"}, // no such network
	}
	ds := p.SetExternal(ext)
	var nodes []string
	for _, d := range ds {
		nodes = append(nodes, d.Node)
		if d.From != 10 || d.Revision != 10 {
			t.Errorf("delta of %s: %d->%d, want 10->10", d.Node, d.From, d.Revision)
		}
	}
	if !slices.Equal(nodes, []string{"n1", "n2"}) {
		t.Fatalf("deltas for %v, want n1 and n2 (blue members)", nodes)
	}
	want := map[string]string{
		"n1": "ul=192.0.2.1 nets=[blue[192.0.2.2 203.0.113.5]] local=[b1] remote=[b2@192.0.2.2 bgp:100:02:aa:00:00:00:01@203.0.113.5]",
		"n2": "ul=192.0.2.2 nets=[blue[192.0.2.1 203.0.113.5] red[192.0.2.3]] local=[b2 r2] remote=[b1@192.0.2.1 bgp:100:02:aa:00:00:00:01@203.0.113.5 r3@192.0.2.3]",
		"n3": "ul=192.0.2.3 nets=[red[192.0.2.2]] local=[r3] remote=[r2@192.0.2.2]",
	}
	check := func(when string) {
		t.Helper()
		for n, w := range want {
			if got := summary(p.Plan(n)); got != w {
				t.Errorf("%s: %s:\n got %s\nwant %s", when, n, got, w)
			}
		}
	}
	check("after SetExternal")
	r := p.Plan("n1").Remote["bgp:100:02:aa:00:00:00:01"]
	if r.Network != "blue" || !slices.Equal(r.IPs, []netip.Prefix{host}) || r.MAC != "02:aa:00:00:00:01" {
		t.Fatalf("external remote: %+v", r)
	}
	// The incremental plans equal a full rebuild.
	for n := range want {
		inc := p.Plan(n)
		q := newPlanner()
		q.SetExternal(ext)
		q.Load(10, base())
		if full := q.Plan(n); summary(full) != summary(inc) {
			t.Errorf("%s: rebuild %s, incremental %s", n, summary(full), summary(inc))
		}
	}
	// The same set again changes nothing.
	if ds := p.SetExternal(ext); len(ds) != 0 {
		t.Fatalf("unchanged set gave %d deltas", len(ds))
	}
	// n3 joins blue: it gets the external remote and flood VTEP.
	p.Update(11, []Change{{Endpoint: ptr(ep("b3", "blue", "n3", 9))}})
	want["n3"] = "ul=192.0.2.3 nets=[blue[192.0.2.1 192.0.2.2 203.0.113.5] red[192.0.2.2]] local=[b3 r3] remote=[b1@192.0.2.1 b2@192.0.2.2 bgp:100:02:aa:00:00:00:01@203.0.113.5 r2@192.0.2.2]"
	want["n1"] = "ul=192.0.2.1 nets=[blue[192.0.2.2 192.0.2.3 203.0.113.5]] local=[b1] remote=[b2@192.0.2.2 b3@192.0.2.3 bgp:100:02:aa:00:00:00:01@203.0.113.5]"
	want["n2"] = "ul=192.0.2.2 nets=[blue[192.0.2.1 192.0.2.3 203.0.113.5] red[192.0.2.3]] local=[b2 r2] remote=[b1@192.0.2.1 b3@192.0.2.3 bgp:100:02:aa:00:00:00:01@203.0.113.5 r3@192.0.2.3]"
	check("after n3 joined blue")
	// n1 leaves blue: its plan drops the external state too.
	p.Update(12, []Change{{Delete: true, Endpoint: ptr(ep("b1", "blue", "n1", 1))}})
	if got := summary(p.Plan("n1")); got != "ul=192.0.2.1 nets=[] local=[] remote=[]" {
		t.Fatalf("n1 after leaving blue: %s", got)
	}
	// Withdrawn: gone everywhere.
	ds = p.SetExternal(nil)
	if len(ds) != 2 {
		t.Fatalf("withdrawal gave %d deltas, want 2 (n2, n3)", len(ds))
	}
	for _, n := range []string{"n2", "n3"} {
		pl := p.Plan(n)
		for name := range pl.Remote {
			if strings.HasPrefix(name, externalPrefix) {
				t.Errorf("%s still has %s", n, name)
			}
		}
		if slices.Contains(pl.Networks["blue"].FloodVTEPs, netip.MustParseAddr("203.0.113.5")) {
			t.Errorf("%s still floods to the external VTEP", n)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestStagedExternalRidesTheNextRevision(t *testing.T) {
	p := newPlanner()
	p.Load(10, base())
	vtep := netip.MustParseAddr("203.0.113.5")
	p.StageExternal([]External{{VNI: 100, VTEP: vtep, MAC: "02:aa:00:00:00:01"}, {VNI: 100, VTEP: vtep}})
	if got := summary(p.Plan("n1")); strings.Contains(got, "203.0.113.5") {
		t.Fatalf("staged set applied before the next update: %s", got)
	}
	ds := p.Update(11, nil)
	if len(ds) != 2 {
		t.Fatalf("%d deltas, want 2", len(ds))
	}
	for _, d := range ds {
		if d.From != 10 || d.Revision != 11 || len(d.UpsertRemote) != 1 || len(d.UpsertNetworks) != 1 {
			t.Errorf("delta %+v", d)
		}
	}
	// A consumer that held revision 10 resumes from the log.
	sub, err := p.Subscribe(t.Context(), "n1", 10)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	u, err := sub.Next(t.Context())
	if err != nil || u.Delta == nil || u.Delta.From != 10 || len(u.Delta.UpsertRemote) != 1 {
		t.Fatalf("resume from 10: %+v %v", u, err)
	}
	if got := summary(p.Plan("n1")); !strings.Contains(got, "bgp:100:02:aa:00:00:00:01@203.0.113.5") {
		t.Fatalf("n1: %s", got)
	}
}
