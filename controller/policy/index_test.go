package policy

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// TestIndexMatchesCompile drives an Index with random changes and checks
// after every one that it holds exactly what a full Compile of the same
// input gives, and that Take names every endpoint whose rules and every
// group whose members changed.
func TestIndexMatchesCompile(t *testing.T) {
	pool, err := ParseYAML([]byte(`
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny, namespace: a}
spec: {podSelector: {}, policyTypes: [Ingress, Egress]}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web, namespace: a}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{from: [{podSelector: {matchLabels: {app: db}}}, {namespaceSelector: {matchLabels: {team: x}}}], ports: [{port: 80}]}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db, namespace: b}
spec:
  podSelector: {matchExpressions: [{key: app, operator: In, values: [db, web]}]}
  policyTypes: [Egress]
  egress: [{to: [{namespaceSelector: {}, podSelector: {matchLabels: {app: web}}}, {ipBlock: {cidr: 203.0.113.0/24, except: [203.0.113.8/29]}}]}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: same, namespace: b}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{from: [{podSelector: {}}, {namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: a}}, podSelector: {matchLabels: {app: web}}}]}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web2, namespace: a}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{from: [{podSelector: {matchLabels: {app: db}}}], ports: [{protocol: UDP, port: 53, endPort: 60}]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	x := NewIndex()
	eps := map[string]Endpoint{}
	ns := map[string]map[string]string{}
	pols := map[string]Policy{}
	prev := Result{Endpoints: map[string]EndpointRules{}, Groups: map[string]Group{}}
	for step := range 3000 {
		what := ""
		switch r := rng.IntN(10); {
		case r < 5:
			e := Endpoint{Name: fmt.Sprintf("e%d", rng.IntN(12)), Node: fmt.Sprintf("n%d", rng.IntN(3)),
				Namespace: []string{"a", "b", "c", ""}[rng.IntN(4)], Labels: map[string]string{"app": []string{"web", "db", "x"}[rng.IntN(3)]},
				IPs: []netip.Addr{netip.AddrFrom4([4]byte{198, 51, 100, byte(rng.IntN(20))})}}
			if rng.IntN(5) == 0 {
				e.IPs = nil
			}
			if old, ok := eps[e.Name]; ok && rng.IntN(2) == 0 {
				// Only the labels (and perhaps the node) change: an owner
				// record's labels reaching the endpoint.
				old.Labels, old.Node = e.Labels, e.Node
				e = old
			}
			eps[e.Name] = e
			x.SetEndpoint(e)
			what = fmt.Sprintf("set endpoint %+v", e)
		case r < 7:
			name := fmt.Sprintf("e%d", rng.IntN(12))
			delete(eps, name)
			x.DeleteEndpoint(name)
			what = "delete endpoint " + name
		case r < 8:
			n := []string{"a", "b", "c"}[rng.IntN(3)]
			l := map[string]string{"team": []string{"x", "y"}[rng.IntN(2)]}
			if rng.IntN(3) == 0 {
				l = nil
			}
			ns[n] = l
			x.SetNamespace(n, l)
			what = fmt.Sprintf("namespace %s %v", n, l)
		case r < 9:
			p := pool[rng.IntN(len(pool))]
			pols[p.Key()] = p
			set := func() {
				if err := x.SetPolicy(p); err != nil {
					t.Fatal(err)
				}
			}
			if rng.IntN(2) == 0 {
				set()
			} else {
				x.Batch(set) // reselects at the end
			}
			what = "set policy " + p.Key()
		default:
			p := pool[rng.IntN(len(pool))]
			delete(pols, p.Key())
			x.DeletePolicy(p.Key())
			what = "delete policy " + p.Key()
		}
		want, err := Compile(slices.Collect(maps.Values(pols)), slices.Collect(maps.Values(eps)), ns)
		if err != nil {
			t.Fatal(err)
		}
		got := x.Result()
		if render(got) != render(want) || fmt.Sprint(groupMembers(got)) != fmt.Sprint(groupMembers(want)) {
			t.Fatalf("step %d (%s):\nindex:\n%s\n%v\ncompile:\n%s\n%v", step, what, render(got), groupMembers(got), render(want), groupMembers(want))
		}
		dirtyEps, dirtyGroups := x.Take()
		for name, er := range want.Endpoints {
			if old, ok := prev.Endpoints[name]; (!ok || !rulesEqual(old, er)) && !slices.Contains(dirtyEps, name) {
				t.Fatalf("step %d (%s): %s's rules changed, not reported", step, what, name)
			}
		}
		for name := range prev.Endpoints {
			if _, ok := want.Endpoints[name]; !ok && !slices.Contains(dirtyEps, name) {
				t.Fatalf("step %d (%s): %s no longer selected, not reported", step, what, name)
			}
		}
		for id, g := range want.Groups {
			if old, ok := prev.Groups[id]; ok && !slices.Equal(old.Members, g.Members) && !slices.Contains(dirtyGroups, id) {
				t.Fatalf("step %d (%s): group %s changed, not reported", step, what, id)
			}
		}
		prev = want
	}
}

func groupMembers(r Result) map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	for id, g := range r.Groups {
		out[id] = nil
		if len(g.Members) > 0 {
			out[id] = g.Members
		}
	}
	return out
}

// TestRelabelMarksOnlyWhatChanged: a label change that moves an endpoint
// in no group and under no other policy marks nothing to recompute; one
// that does marks that endpoint and those groups only.
func TestRelabelMarksOnlyWhatChanged(t *testing.T) {
	pols, err := ParseYAML([]byte(`
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web, namespace: a}
spec:
  podSelector: {matchLabels: {app: web}}
  ingress: [{from: [{podSelector: {matchLabels: {app: db}}}]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	x := NewIndex()
	if err := x.SetPolicy(pols[0]); err != nil {
		t.Fatal(err)
	}
	ip := func(b byte) []netip.Addr { return []netip.Addr{netip.AddrFrom4([4]byte{198, 51, 100, b})} }
	x.SetEndpoint(Endpoint{Name: "w", Namespace: "a", Network: "n", Node: "n1", Labels: map[string]string{"app": "web"}, IPs: ip(1)})
	x.SetEndpoint(Endpoint{Name: "d", Namespace: "a", Network: "n", Node: "n1", Labels: map[string]string{"app": "db"}, IPs: ip(2)})
	x.Take()
	for _, c := range []struct {
		name        string
		e           Endpoint
		eps, groups string
		selected    bool
	}{
		{"an unrelated label", Endpoint{Name: "d", Namespace: "a", Network: "n", Node: "n1", Labels: map[string]string{"app": "db", "pod-template-hash": "x1"}, IPs: ip(2)}, "[]", "[]", false},
		{"web gets one", Endpoint{Name: "w", Namespace: "a", Network: "n", Node: "n1", Labels: map[string]string{"app": "web", "v": "2"}, IPs: ip(1)}, "[]", "[]", true},
		{"db leaves the group", Endpoint{Name: "d", Namespace: "a", Network: "n", Node: "n1", Labels: map[string]string{"app": "cache"}, IPs: ip(2)}, "[]", "[g0]", false},
		{"db becomes web", Endpoint{Name: "d", Namespace: "a", Network: "n", Node: "n1", Labels: map[string]string{"app": "web"}, IPs: ip(2)}, "[d]", "[]", true},
		{"web moves node", Endpoint{Name: "w", Namespace: "a", Network: "n", Node: "n2", Labels: map[string]string{"app": "web", "v": "2"}, IPs: ip(1)}, "[w]", "[]", true},
	} {
		x.SetEndpoint(c.e)
		eps, groups := x.Take()
		gs := slices.Clone(groups)
		for i := range gs {
			gs[i] = "g" + fmt.Sprint(i)
		}
		if fmt.Sprint(eps) != c.eps || fmt.Sprint(gs) != c.groups {
			t.Errorf("%s: marked endpoints %v groups %v, want %s and %s", c.name, eps, groups, c.eps, c.groups)
		}
		if _, ok := x.Rules(c.e.Name); ok != c.selected {
			t.Errorf("%s: selected %v, want %v", c.name, ok, c.selected)
		}
	}
}
