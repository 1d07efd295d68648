package plan

import (
	"slices"
	"testing"
)

func TestFollowSince(t *testing.T) {
	p := New("n1")
	p.Revision = 5
	var ds []Delta
	for rev := int64(6); rev <= 5+MaxRecent+2; rev++ {
		d := Delta{Node: "n1", From: rev - 1, Revision: rev, UpsertRemote: []Remote{{Name: "r"}}}
		before := p.Clone()
		if err := p.Follow(d); err != nil {
			t.Fatal(err)
		}
		if len(before.Recent) == len(p.Recent) && len(p.Recent) > 0 && &before.Recent[0] == &p.Recent[0] {
			t.Fatal("Follow changed the Recent of a clone")
		}
		ds = append(ds, d)
	}
	if len(p.Recent) != MaxRecent {
		t.Fatalf("%d deltas kept, want %d", len(p.Recent), MaxRecent)
	}
	if got, ok := p.Since(p.Revision); !ok || len(got) != 0 {
		t.Errorf("Since(own revision) = %v, %v", got, ok)
	}
	if got, ok := p.Since(p.Revision - 3); !ok || !slices.EqualFunc(got, ds[len(ds)-3:], func(a, b Delta) bool { return a.From == b.From && a.Revision == b.Revision }) {
		t.Errorf("Since(rev-3) = %v, %v", got, ok)
	}
	if _, ok := p.Since(6); ok {
		t.Error("Since reached past the kept deltas")
	}
	if _, ok := p.Since(0); ok {
		t.Error("Since(0): a plan without revision")
	}
	if err := p.Follow(Delta{Node: "n1", From: 1, Revision: 99}); err == nil {
		t.Error("Follow of a delta from another revision")
	}
	// A delta that changes the plan at its own revision: the plans at
	// that revision are not one.
	same := p.Clone()
	if err := same.Follow(Delta{Node: "n1", From: same.Revision, Revision: same.Revision, UpsertRemote: []Remote{{Name: "x"}}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := same.Since(same.Revision); ok {
		t.Error("Since(own revision) after a delta that kept the revision")
	}
	q := New("n1")
	q.Revision = 7
	if _, ok := q.Since(6); ok {
		t.Error("a plan without deltas reached back")
	}
}
