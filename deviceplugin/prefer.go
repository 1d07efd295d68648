package deviceplugin

import (
	"cmp"
	"slices"
)

// group is the available VFs of one PF.
type group struct {
	pf   string
	numa int
	ids  []string
}

// Preferred picks size devices out of available, must included, keeping
// them on as few PFs and NUMA nodes as it can:
//
//   - with devices that must be included, the rest comes first from the
//     PF that holds most of them, then from that PF's NUMA node, then
//     from anywhere;
//   - otherwise from one PF when one has enough (the one with the
//     fewest to spare, so that larger PFs stay whole for larger
//     requests), else from one NUMA node when one has enough (the
//     smallest that does), taking its PFs largest first.
//
// Devices the pool does not know come last. The answer is deterministic:
// ties go to the lower PF name, NUMA node and PCI address.
func Preferred(devs map[string]Device, available, must []string, size int) []string {
	out := make([]string, 0, size)
	taken := map[string]bool{}
	for _, id := range must {
		if len(out) < size && !taken[id] {
			out = append(out, id)
			taken[id] = true
		}
	}
	need := size - len(out)
	if need <= 0 {
		return out
	}
	byPF := map[string]*group{}
	var unknown []string
	for _, id := range available {
		if taken[id] {
			continue
		}
		taken[id] = true
		d, ok := devs[id]
		if !ok {
			unknown = append(unknown, id)
			continue
		}
		g := byPF[d.PF]
		if g == nil {
			g = &group{pf: d.PF, numa: d.NUMA}
			byPF[d.PF] = g
		}
		g.ids = append(g.ids, id)
	}
	groups := make([]*group, 0, len(byPF))
	numaTotal := map[int]int{}
	for _, g := range byPF {
		slices.Sort(g.ids)
		groups = append(groups, g)
		numaTotal[g.numa] += len(g.ids)
	}
	// Largest first, then by name.
	slices.SortFunc(groups, func(a, b *group) int {
		return cmp.Or(cmp.Compare(len(b.ids), len(a.ids)), cmp.Compare(a.numa, b.numa), cmp.Compare(a.pf, b.pf))
	})

	rank := map[*group]int{} // lower goes first
	if len(out) > 0 {
		// Anchor on the PF holding most of the devices already chosen.
		count := map[string]int{}
		anchor, anchorNUMA := "", -2
		for _, id := range out {
			d, ok := devs[id]
			if !ok {
				continue
			}
			count[d.PF]++
			if c := count[d.PF]; anchor == "" || c > count[anchor] || (c == count[anchor] && d.PF < anchor) {
				anchor, anchorNUMA = d.PF, d.NUMA
			}
		}
		for _, g := range groups {
			switch {
			case g.pf == anchor:
				rank[g] = 0
			case g.numa == anchorNUMA:
				rank[g] = 1
			default:
				rank[g] = 2
			}
		}
	} else {
		var fit *group
		for _, g := range groups {
			if len(g.ids) >= need && (fit == nil || len(g.ids) < len(fit.ids) ||
				(len(g.ids) == len(fit.ids) && (g.numa < fit.numa || (g.numa == fit.numa && g.pf < fit.pf)))) {
				fit = g
			}
		}
		numa, found := 0, false
		for n, total := range numaTotal {
			better := !found ||
				(total >= need && (numaTotal[numa] < need || total < numaTotal[numa] || (total == numaTotal[numa] && n < numa))) ||
				(total < need && numaTotal[numa] < need && (total > numaTotal[numa] || (total == numaTotal[numa] && n < numa)))
			if better {
				numa, found = n, true
			}
		}
		for _, g := range groups {
			switch {
			case g == fit:
				rank[g] = 0
			case g.numa == numa:
				rank[g] = 1
			default:
				rank[g] = 2
			}
		}
	}
	slices.SortStableFunc(groups, func(a, b *group) int { return cmp.Compare(rank[a], rank[b]) })
	for _, g := range groups {
		for _, id := range g.ids {
			if len(out) == size {
				return out
			}
			out = append(out, id)
		}
	}
	slices.Sort(unknown)
	for _, id := range unknown {
		if len(out) == size {
			break
		}
		out = append(out, id)
	}
	return out
}
