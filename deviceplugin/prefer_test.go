package deviceplugin

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// layout: PF a (NUMA 0) VFs a0..a3, PF b (NUMA 0) b0..b1, PF c (NUMA 1)
// c0..c5, PF d (NUMA 1) d0..d2. IDs are the names (Preferred looks only
// at the map).
func layout() map[string]Device {
	devs := map[string]Device{}
	for _, pf := range []struct {
		name string
		numa int
		n    int
	}{{"a", 0, 4}, {"b", 0, 2}, {"c", 1, 6}, {"d", 1, 3}} {
		for i := range pf.n {
			id := fmt.Sprintf("%s%d", pf.name, i)
			devs[id] = Device{ID: id, PF: pf.name, NUMA: pf.numa, Healthy: true}
		}
	}
	return devs
}

func all(devs map[string]Device, except ...string) []string {
	var out []string
	for id := range devs {
		if !slices.Contains(except, id) {
			out = append(out, id)
		}
	}
	// The kubelet's order is not ours to rely on.
	slices.Sort(out)
	slices.Reverse(out)
	return out
}

func TestPreferred(t *testing.T) {
	devs := layout()
	for _, tc := range []struct {
		name      string
		available []string
		must      []string
		size      int
		want      string
	}{
		{"one: smallest PF that fits", all(devs), nil, 1, "b0"},
		{"two: b fits exactly", all(devs), nil, 2, "b0 b1"},
		{"three: d is the smallest that fits", all(devs), nil, 3, "d0 d1 d2"},
		{"four: a", all(devs), nil, 4, "a0 a1 a2 a3"},
		{"five: c", all(devs), nil, 5, "c0 c1 c2 c3 c4"},
		{"seven: no PF has 7; NUMA 0 has 6, NUMA 1 has 9: NUMA 1, largest PF first", all(devs), nil, 7, "c0 c1 c2 c3 c4 c5 d0"},
		{"must on c pulls the rest from c", all(devs), []string{"c3"}, 3, "c3 c0 c1"},
		{"must on c, c runs out: d (same NUMA) before a and b", all(devs), []string{"c0"}, 8, "c0 c1 c2 c3 c4 c5 d0 d1"},
		{"must split: the PF holding most wins", all(devs), []string{"a1", "d0", "d2"}, 4, "a1 d0 d2 d1"},
		{"must fills it", all(devs), []string{"a1", "c2"}, 2, "a1 c2"},
		{"b1 taken: b no longer fits 2, d is the smallest that does", all(devs, "b1"), nil, 2, "d0 d1"},
		{"more than there is", []string{"a0", "zz9"}, nil, 3, "a0 zz9"},
		{"unknown devices last", []string{"zz1", "a3", "zz0"}, nil, 2, "a3 zz0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(Preferred(devs, tc.available, tc.must, tc.size), " ")
			if got != tc.want {
				t.Errorf("Preferred(size %d, must %v) = %s, want %s", tc.size, tc.must, got, tc.want)
			}
		})
	}
}

// TestPreferredIsDeterministic: the same question gets the same answer
// whatever order the kubelet lists the devices in.
func TestPreferredIsDeterministic(t *testing.T) {
	devs := layout()
	ids := all(devs)
	first := strings.Join(Preferred(devs, ids, nil, 7), " ")
	for i := range 20 {
		shuffled := slices.Clone(ids)
		// A fixed permutation per round: rotate by i and swap pairs.
		shuffled = append(shuffled[i%len(shuffled):], shuffled[:i%len(shuffled)]...)
		for j := 0; j+1 < len(shuffled); j += 2 {
			if (i+j)%3 == 0 {
				shuffled[j], shuffled[j+1] = shuffled[j+1], shuffled[j]
			}
		}
		if got := strings.Join(Preferred(devs, shuffled, nil, 7), " "); got != first {
			t.Fatalf("round %d: %s, first %s", i, got, first)
		}
	}
}
