package planner

import (
	"fmt"
	"testing"

	"github.com/skiff-sdn/skiff/internal/plan"
)

// The log keeps the newest deltas in order, within its bounds on deltas
// and items, across the ring's growth and wrapping.
func TestDeltaLogBounds(t *testing.T) {
	var l deltaLog
	d := func(rev int64, items int) plan.Delta {
		out := plan.Delta{Node: "n", From: rev - 1, Revision: rev}
		for i := range items {
			out.RemoveRemote = append(out.RemoveRemote, fmt.Sprint(i))
		}
		return out
	}
	revs := func() []int64 {
		var out []int64
		for _, x := range l.deltas() {
			out = append(out, x.Revision)
		}
		return out
	}
	for rev := int64(1); rev <= 13; rev++ {
		l.add(d(rev, 1), 5, 100)
		if want := min(rev, 5); int64(len(revs())) != want || revs()[len(revs())-1] != rev || revs()[0] != rev-want+1 {
			t.Fatalf("after %d: %v", rev, revs())
		}
	}
	if l.items != 5 || len(l.ring) != 5 {
		t.Fatalf("items %d, ring %d; want 5 and 5", l.items, len(l.ring))
	}
	l.add(d(14, 3), 5, 6) // the oldest for room, one more for the items
	if got := fmt.Sprint(revs()); got != "[11 12 13 14]" || l.items != 6 {
		t.Fatalf("bounded by items: %s, %d items", got, l.items)
	}
	l.add(d(15, 7), 5, 6) // more than the bound alone: nothing kept
	if l.n != 0 || l.items != 0 || l.deltas() != nil {
		t.Fatalf("a delta over the bound alone: %d deltas, %d items", l.n, l.items)
	}
	l.add(d(16, 1), 5, 6)
	if got := fmt.Sprint(revs()); got != "[16]" {
		t.Fatalf("after emptying: %s", got)
	}
}
