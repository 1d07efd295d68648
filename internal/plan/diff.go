package plan

import (
	"maps"
	"slices"
)

// Diff returns the delta that turns old into cur. Item lists are sorted by
// name so that the result is deterministic. A group both hold changes by
// its members (ChangeGroups) when that is smaller than the whole group.
func Diff(old, cur Plan) Delta {
	d := Delta{Node: cur.Node, From: old.Revision, Revision: cur.Revision}
	if old.UnderlayIP != cur.UnderlayIP {
		ip := cur.UnderlayIP
		d.UnderlayIP = &ip
	}
	if !old.DPU.Equal(cur.DPU) {
		st := cur.DPU
		d.DPU = &st
	}
	d.UpsertNetworks, d.RemoveNetworks = DiffByName(old.Networks, cur.Networks, Network.Equal)
	d.UpsertLocal, d.RemoveLocal = DiffByName(old.Local, cur.Local, Endpoint.Equal)
	d.UpsertRemote, d.RemoveRemote = DiffByName(old.Remote, cur.Remote, Remote.Equal)
	d.UpsertPolicies, d.RemovePolicies = DiffByName(old.Policies, cur.Policies, EndpointPolicy.Equal)
	d.UpsertGroups, d.RemoveGroups = DiffByName(old.Groups, cur.Groups, AddressGroup.Equal)
	d.UpsertGroups, d.ChangeGroups = SplitGroups(old.Groups, d.UpsertGroups)
	return d
}

// DiffByName compares two maps of items keyed by name, as a plan holds
// them: up is the items of cur that old lacks or holds otherwise (by eq),
// rm the names old holds and cur does not, each sorted by name (nil when
// none): a delta's Upsert and Remove lists.
func DiffByName[V any](old, cur map[string]V, eq func(V, V) bool) (up []V, rm []string) {
	for _, k := range slices.Sorted(maps.Keys(cur)) {
		if o, ok := old[k]; !ok || !eq(o, cur[k]) {
			up = append(up, cur[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(old)) {
		if _, ok := cur[k]; !ok {
			rm = append(rm, k)
		}
	}
	return up, rm
}
