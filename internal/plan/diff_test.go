package plan

import (
	"slices"
	"testing"
)

// DiffByName lists, each by name, the items cur adds or holds otherwise
// and the names it drops; nothing when the maps hold the same.
func TestDiffByName(t *testing.T) {
	eq := func(a, b int) bool { return a == b }
	old := map[string]int{"a": 1, "b": 2, "c": 3, "e": 5}
	cur := map[string]int{"e": 5, "d": 4, "b": 20, "a": 1}
	up, rm := DiffByName(old, cur, eq)
	if !slices.Equal(up, []int{20, 4}) || !slices.Equal(rm, []string{"c"}) {
		t.Errorf("DiffByName = %v, %v; want [20 4], [c]", up, rm)
	}
	if up, rm := DiffByName(cur, cur, eq); up != nil || rm != nil {
		t.Errorf("DiffByName of equal maps = %v, %v; want nil, nil", up, rm)
	}
	if up, rm := DiffByName(nil, map[string]int{"z": 1, "y": 2}, eq); !slices.Equal(up, []int{2, 1}) || rm != nil {
		t.Errorf("DiffByName from nothing = %v, %v; want [2 1], nil", up, rm)
	}
}
