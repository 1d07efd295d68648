package planner

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/skiff-sdn/skiff/controller/policy"
	"github.com/skiff-sdn/skiff/internal/plan"
)

func mustPolicies(t *testing.T, y string) []policy.Policy {
	t.Helper()
	ps, err := policy.ParseYAML([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func policySummary(p plan.Plan) string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(p.Policies)) {
		e := p.Policies[name]
		out = append(out, fmt.Sprintf("%s in=%v out=%v rules=%d", name, e.IngressIsolated, e.EgressIsolated, len(e.Ingress)+len(e.Egress)))
	}
	for _, name := range slices.Sorted(maps.Keys(p.Groups)) {
		out = append(out, fmt.Sprintf("group %v", p.Groups[name].Members))
	}
	return fmt.Sprint(out)
}

func TestPolicyInPlans(t *testing.T) {
	s := base()
	for i := range s.Endpoints {
		s.Endpoints[i].Namespace = "shop"
		s.Endpoints[i].Labels = map[string]string{"app": s.Endpoints[i].Name[:1]} // b or r or g
	}
	s.Policies = mustPolicies(t, `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: r-from-b, namespace: shop}
spec:
  podSelector: {matchLabels: {app: r}}
  ingress: [{from: [{podSelector: {matchExpressions: [{key: app, operator: In, values: [b, g]}]}}], ports: [{port: 80}]}]
`)
	p := newPlanner()
	p.Load(1, s)
	// r2 is on n2, r3 on n3, both on red: isolated, with the group of b
	// and g endpoints narrowed to red, where only g4 (198.51.100.5) is.
	// b1 and b2 are on blue: networks may reuse addresses, and no packet
	// of theirs reaches red's bridge.
	want := map[string]string{
		"n1": "[]",
		"n2": "[r2 in=true out=false rules=1 group [198.51.100.5]]",
		"n3": "[r3 in=true out=false rules=1 group [198.51.100.5]]",
	}
	for n, w := range want {
		if got := policySummary(p.Plan(n)); got != w {
			t.Errorf("%s: %s, want %s", n, got, w)
		}
	}
	// A new g endpoint on red changes the group: the nodes holding it,
	// plus the endpoint's own node, get deltas.
	ng := ep("g9", "red", "n1", 9)
	ng.Namespace, ng.Labels = "shop", map[string]string{"app": "g"}
	ds := p.Update(2, []Change{{Endpoint: &ng}})
	var nodes []string
	for _, d := range ds {
		nodes = append(nodes, d.Node)
		// n3 holds red's group: g9 joins it as a member change of one
		// address, not the group's whole list again.
		if d.Node == "n3" && (len(d.UpsertGroups) != 0 || len(d.ChangeGroups) != 1 ||
			fmt.Sprint(d.ChangeGroups[0].Add, d.ChangeGroups[0].Remove) != "[198.51.100.9] []") {
			t.Errorf("n3 group delta: upserts %+v, changes %s; want only the change of g9's address", d.UpsertGroups, changes(d))
		}
	}
	if fmt.Sprint(nodes) != "[n1 n2 n3 n4]" {
		t.Errorf("deltas for %v, want n1 (endpoint), n2 and n3 (remote + group), n4 (remote)", nodes)
	}
	// A new b endpoint on blue, with the same address as r3's peer g9:
	// red's groups do not change.
	nb := ep("b9", "blue", "n1", 9)
	nb.Namespace, nb.Labels = "shop", map[string]string{"app": "b"}
	for _, d := range p.Update(3, []Change{{Endpoint: &nb}}) {
		if len(d.UpsertGroups)+len(d.RemoveGroups) > 0 {
			t.Errorf("%s: a blue endpoint changed red's groups: %+v", d.Node, d.UpsertGroups)
		}
	}
	s.Endpoints = append(s.Endpoints, ng, nb)
	for _, n := range []string{"n1", "n2", "n3"} {
		if b := Build(s, n); !b.Equal(p.Plan(n)) {
			t.Errorf("%s: incremental %s, full %s", n, policySummary(p.Plan(n)), policySummary(b))
		}
	}
	// Deleting the policy lifts isolation everywhere.
	p.Update(4, []Change{{Delete: true, Policy: &policy.Policy{Namespace: "shop", Name: "r-from-b"}}})
	for _, n := range []string{"n2", "n3"} {
		if got := policySummary(p.Plan(n)); got != "[]" {
			t.Errorf("%s after delete: %s", n, got)
		}
	}
}

// TestGroupChangeOnOneNetwork: a member joining a group on one network
// changes the group only in the plans that hold it narrowed to that
// network, and recompiles no node's rules: the nodes holding the group on
// another network are not even recompiled (every holder of the group, on
// every network, was, before: 61% of the controller's CPU under the scale
// harness's load with 10,000 policies).
func TestGroupChangeOnOneNetwork(t *testing.T) {
	s := base()
	for i := range s.Endpoints {
		s.Endpoints[i].Namespace = "shop"
		s.Endpoints[i].Labels = map[string]string{"app": s.Endpoints[i].Name[:1]}
	}
	s.Policies = mustPolicies(t, `apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: br-from-g, namespace: shop}
spec:
  podSelector: {matchExpressions: [{key: app, operator: In, values: [b, r]}]}
  ingress: [{from: [{podSelector: {matchLabels: {app: g}}}], ports: [{port: 80}]}]
`)
	p := newPlanner()
	p.Load(1, s)
	rev := int64(1)
	add := func(e plan.Endpoint) map[string]plan.Delta {
		t.Helper()
		e.Namespace, e.Labels = "shop", map[string]string{"app": "g"}
		s.Endpoints = append(s.Endpoints, e)
		rev++
		before := p.recompiled
		ds := map[string]plan.Delta{}
		for _, d := range p.Update(rev, []Change{{Endpoint: &e}}) {
			ds[d.Node] = d
		}
		if n := p.recompiled - before; n != 0 {
			t.Errorf("%s joining group g: %d nodes' rules recompiled, want 0 (no endpoint's rules changed)", e.Name, n)
		}
		for _, n := range []string{"n1", "n2", "n3"} {
			if b := Build(s, n); !b.Equal(p.Plan(n)) {
				t.Errorf("after %s, %s: incremental %s, full %s", e.Name, n, policySummary(p.Plan(n)), policySummary(b))
			}
		}
		return ds
	}
	groups := func(d plan.Delta) string {
		var out []string
		for _, g := range d.UpsertGroups {
			out = append(out, fmt.Sprintf("%s%v", g.Name, g.Members))
		}
		return fmt.Sprint(out)
	}
	// g9 on blue: blue's group changes on n1 (b1) and n2 (b2); n3 holds
	// only red's.
	ds := add(ep("g9", "blue", "n1", 9))
	for n, want := range map[string]int{"n1": 1, "n2": 1} {
		if got := len(ds[n].UpsertGroups); got != want {
			t.Errorf("g9: %s upserts groups %s, want %d", n, groups(ds[n]), want)
		}
	}
	if d, ok := ds["n3"]; ok {
		t.Errorf("g9 on blue: n3 (red only) got a delta: %s", groups(d))
	}
	// g8 on red: red's group changes on n2 (r2) and n3 (r3), not blue's,
	// by g8's address alone (they hold the group with g4 already).
	ds = add(ep("g8", "red", "n3", 8))
	for _, n := range []string{"n2", "n3"} {
		if len(ds[n].UpsertGroups) != 0 || len(ds[n].ChangeGroups) != 1 || fmt.Sprint(ds[n].ChangeGroups[0].Add, ds[n].ChangeGroups[0].Remove) != "[198.51.100.8] []" {
			t.Errorf("g8: %s upserts groups %s, changes %s; want red's changed by g8's address", n, groups(ds[n]), changes(ds[n]))
		}
	}
	if got := len(ds["n1"].UpsertGroups) + len(ds["n1"].ChangeGroups); got != 0 {
		t.Errorf("g8 on red: n1 (blue only) upserts groups %s, changes %s", groups(ds["n1"]), changes(ds["n1"]))
	}
}

func changes(d plan.Delta) string {
	var out []string
	for _, c := range d.ChangeGroups {
		out = append(out, fmt.Sprintf("%s +%v -%v", c.Name, c.Add, c.Remove))
	}
	return fmt.Sprint(out)
}
