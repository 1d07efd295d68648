package api

import (
	"fmt"
	"net/netip"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/internal/planpb"
)

func remotePlan(node string, vtep string, names ...string) plan.Plan {
	p := plan.New(node)
	for i, n := range names {
		p.Remote[n] = plan.Remote{Name: n, Network: "blue", Node: "other", VTEP: netip.MustParseAddr(vtep),
			MAC: fmt.Sprintf("02:00:00:00:00:%02x", i), IPs: []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("198.51.100.%d/24", i+1))}}
	}
	return p
}

// A snapshot converted through the cache is the one planpb converts; a
// remote endpoint held by two snapshots is converted once; one that
// changed is converted again.
func TestRemoteCache(t *testing.T) {
	c := newRemoteCache(6)
	a, b := remotePlan("n1", "192.0.2.2", "x", "y"), remotePlan("n2", "192.0.2.2", "x", "y", "z")
	pa, pb := c.planPB(a), c.planPB(b)
	if !proto.Equal(pa, planpb.PlanPB(a)) || !proto.Equal(pb, planpb.PlanPB(b)) {
		t.Fatalf("cached conversion differs:\n%v\n%v", pa, pb)
	}
	if pa.RemoteEndpoints[0] != pb.RemoteEndpoints[0] {
		t.Fatal("x converted twice")
	}
	moved := remotePlan("n3", "192.0.2.9", "x")
	pm := c.planPB(moved)
	if !proto.Equal(pm, planpb.PlanPB(moved)) || pm.RemoteEndpoints[0].GetVtep() != "192.0.2.9" {
		t.Fatalf("changed remote: %v", pm)
	}
	if pa.RemoteEndpoints[0].GetVtep() != "192.0.2.2" {
		t.Fatal("an earlier snapshot's message changed")
	}
	// Past its size the cache starts over; conversions stay right.
	big := remotePlan("n4", "192.0.2.3", "p", "q", "r", "s", "t")
	if pbig := c.planPB(big); !proto.Equal(pbig, planpb.PlanPB(big)) || len(c.m) > 6 {
		t.Fatalf("past the size: %d entries, %v", len(c.m), pbig)
	}
}

// A delta converted through the cache is the one planpb converts; the same
// remote endpoint in the deltas of two nodes is converted once; a changed
// one is converted again, also when the cache is full.
func TestRemoteCacheDeltas(t *testing.T) {
	c := newRemoteCache(2)
	delta := func(node, vtep string, names ...string) plan.Delta {
		p := remotePlan(node, vtep, names...)
		d := plan.Diff(plan.New(node), p)
		d.From, d.Revision = 4, 5
		return d
	}
	a, b := delta("n1", "192.0.2.2", "x", "y"), delta("n2", "192.0.2.2", "x", "y")
	da, db := c.deltaPB(a), c.deltaPB(b)
	if !proto.Equal(da, planpb.DeltaPB(a)) || !proto.Equal(db, planpb.DeltaPB(b)) {
		t.Fatalf("cached conversion differs:\n%v\n%v", da, db)
	}
	if da.UpsertRemote[1] != db.UpsertRemote[1] || db.GetNode() != "n2" {
		t.Fatalf("y converted twice, or the node is wrong: %v", db)
	}
	moved := delta("n3", "192.0.2.9", "y")
	dm := c.deltaPB(moved)
	if !proto.Equal(dm, planpb.DeltaPB(moved)) || dm.UpsertRemote[0].GetVtep() != "192.0.2.9" || len(c.m) > 2 {
		t.Fatalf("changed remote in a full cache: %v (%d entries)", dm, len(c.m))
	}
	if again := c.deltaPB(delta("n4", "192.0.2.9", "y")); again.UpsertRemote[0] != dm.UpsertRemote[0] {
		t.Fatal("the changed remote was not kept")
	}
	if da.UpsertRemote[1].GetVtep() != "192.0.2.2" {
		t.Fatal("an earlier delta's message changed")
	}
}
