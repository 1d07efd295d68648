package policy

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// benchCluster is 100 namespaces of 1,000 endpoints (100,000) and 100
// policies per namespace (10,000): each selects one of 20 apps and allows
// two other apps of its namespace and one app from the namespaces of a
// team, on two ports.
func benchCluster() ([]Policy, []Endpoint, map[string]map[string]string) {
	var eps []Endpoint
	ns := map[string]map[string]string{}
	for n := range 100 {
		name := fmt.Sprintf("ns%d", n)
		ns[name] = map[string]string{"team": fmt.Sprintf("t%d", n%10)}
		for i := range 1000 {
			k := n*1000 + i
			eps = append(eps, Endpoint{Name: fmt.Sprintf("e%d", k), Node: fmt.Sprintf("n%d", k%1000), Namespace: name,
				Labels: map[string]string{"app": fmt.Sprintf("app%d", i%20), "shard": fmt.Sprint(i % 7)},
				IPs:    []netip.Addr{netip.AddrFrom4([4]byte{10, byte(k >> 16), byte(k >> 8), byte(k)})}})
		}
	}
	var y strings.Builder
	for n := range 100 {
		for j := range 100 {
			fmt.Fprintf(&y, `---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: p%d, namespace: ns%d}
spec:
  podSelector: {matchLabels: {app: app%d, shard: "%d"}}
  ingress:
  - from: [{podSelector: {matchLabels: {app: app%d}}}, {podSelector: {matchLabels: {app: app%d}}}, {namespaceSelector: {matchLabels: {team: t%d}}, podSelector: {matchLabels: {app: app%d}}}]
    ports: [{port: 80}, {protocol: UDP, port: 53}]
`, j, n, j%20, j%7, (j+1)%20, (j+2)%20, j%10, (j+3)%20)
		}
	}
	pols, err := ParseYAML([]byte(y.String()))
	if err != nil {
		panic(err)
	}
	return pols, eps, ns
}

func loadIndex(pols []Policy, eps []Endpoint, ns map[string]map[string]string) *Index {
	x := NewIndex()
	x.Batch(func() {
		for n, l := range ns {
			x.SetNamespace(n, l)
		}
		for _, e := range eps {
			x.SetEndpoint(e)
		}
		for _, p := range pols {
			if err := x.SetPolicy(p); err != nil {
				panic(err)
			}
		}
	})
	x.Take()
	return x
}

// BenchmarkIndexLoad compiles 10,000 policies over 100,000 endpoints.
func BenchmarkIndexLoad(b *testing.B) {
	pols, eps, ns := benchCluster()
	b.ResetTimer()
	for b.Loop() {
		x := loadIndex(pols, eps, ns)
		b.ReportMetric(float64(len(x.rules)), "isolated-endpoints")
		b.ReportMetric(float64(len(x.groups)), "groups")
	}
}

// BenchmarkIndexLabelChange changes one endpoint's app label back and
// forth in that cluster: its own rules and its group memberships change.
func BenchmarkIndexLabelChange(b *testing.B) {
	pols, eps, ns := benchCluster()
	x := loadIndex(pols, eps, ns)
	e := eps[12345]
	i := 0
	b.ResetTimer()
	for b.Loop() {
		e.Labels = map[string]string{"app": fmt.Sprintf("app%d", i%20), "shard": "1"}
		i++
		x.SetEndpoint(e)
		eps, groups := x.Take()
		if len(eps)+len(groups) == 0 {
			b.Fatal("a label change changed nothing")
		}
	}
}

// BenchmarkCompileFull is the same cluster through the pure compiler in
// one pass: what a controller without the index would redo on every
// change.
func BenchmarkCompileFull(b *testing.B) {
	pols, eps, ns := benchCluster()
	for b.Loop() {
		if _, err := Compile(pols, eps, ns); err != nil {
			b.Fatal(err)
		}
	}
}
