package planner

import (
	"slices"
	"testing"
)

// TestTouchedKeys: reconcile's keys are eps and remote merged, sorted and
// each once, a key in both counted as eps (its local endpoints looked at).
func TestTouchedKeys(t *testing.T) {
	for _, c := range []struct {
		eps, remote []string
		keys        []string
		local       []bool
	}{
		{eps: []string{"b", "a", "b"}, keys: []string{"a", "b"}, local: []bool{true, true}},
		{remote: []string{"b", "a"}, keys: []string{"a", "b"}, local: []bool{false, false}},
		{eps: []string{"c", "a"}, remote: []string{"b", "c", "d", "b"}, keys: []string{"a", "b", "c", "d"}, local: []bool{true, false, true, false}},
		{eps: []string{"z"}, remote: []string{"a"}, keys: []string{"a", "z"}, local: []bool{false, true}},
	} {
		x := &touched{eps: slices.Clone(c.eps), remote: slices.Clone(c.remote)}
		keys, l, all := x.keys()
		local := make([]bool, len(keys)) // as reconcile reads them
		for i := range keys {
			local[i] = all || l != nil && l[i]
		}
		if !slices.Equal(keys, c.keys) || !slices.Equal(local, c.local) {
			t.Errorf("eps %v remote %v: keys %v local %v, want %v %v", c.eps, c.remote, keys, local, c.keys, c.local)
		}
	}
}
