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
  ingress: [{from: [{podSelector: {matchLabels: {app: b}}}], ports: [{port: 80}]}]
`)
	p := newPlanner()
	p.Load(1, s)
	// r2 is on n2, r3 on n3: both isolated, with the group of b endpoints.
	want := map[string]string{
		"n1": "[]",
		"n2": "[r2 in=true out=false rules=1 group [198.51.100.1 198.51.100.2]]",
		"n3": "[r3 in=true out=false rules=1 group [198.51.100.1 198.51.100.2]]",
	}
	for n, w := range want {
		if got := policySummary(p.Plan(n)); got != w {
			t.Errorf("%s: %s, want %s", n, got, w)
		}
	}
	// A new b endpoint changes the group: only the nodes holding it, plus
	// the endpoint's own nodes, get deltas.
	nb := ep("b9", "blue", "n1", 9)
	nb.Namespace, nb.Labels = "shop", map[string]string{"app": "b"}
	ds := p.Update(2, []Change{{Endpoint: &nb}})
	var nodes []string
	for _, d := range ds {
		nodes = append(nodes, d.Node)
		if d.Node == "n3" && (len(d.UpsertGroups) != 1 || len(d.UpsertGroups[0].Members) != 3) {
			t.Errorf("n3 group delta %+v", d.UpsertGroups)
		}
	}
	if fmt.Sprint(nodes) != "[n1 n2 n3]" {
		t.Errorf("deltas for %v, want n1 (endpoint), n2 (endpoint + group), n3 (group)", nodes)
	}
	s.Endpoints = append(s.Endpoints, nb)
	for _, n := range []string{"n1", "n2", "n3"} {
		if b := Build(s, n); !b.Equal(p.Plan(n)) {
			t.Errorf("%s: incremental %s, full %s", n, policySummary(p.Plan(n)), policySummary(b))
		}
	}
	// Deleting the policy lifts isolation everywhere.
	p.Update(3, []Change{{Delete: true, Policy: &policy.Policy{Namespace: "shop", Name: "r-from-b"}}})
	for _, n := range []string{"n2", "n3"} {
		if got := policySummary(p.Plan(n)); got != "[]" {
			t.Errorf("%s after delete: %s", n, got)
		}
	}
}
