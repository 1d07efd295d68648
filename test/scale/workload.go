package scale

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// Workload kinds.
const (
	// Local: localized tenants; nodes in groups of NodesPerNetwork, each
	// group with NetworksPerNode networks spanning all its nodes.
	Local = "local"
	// Wide: one cluster-wide pod network on every node.
	Wide = "wide"
)

// Workload describes the objects of a run. Node i is named n%05d and has
// the underlay address 198.18.0.0/15 + i (RFC 2544's benchmarking range;
// no packet is ever sent to it).
type Workload struct {
	Kind             string
	Nodes            int
	EndpointsPerNode int
	// Local only: networks per node and nodes per network.
	NetworksPerNode, NodesPerNetwork int
	// Policies is the number of NetworkPolicies (0: none), over
	// Namespaces namespaces of 100 apps each.
	Policies   int
	Namespaces int
}

// Endpoint is one endpoint of the workload.
type Endpoint struct {
	Name, Network, Node, Namespace, App string
}

// NetworkSpec is one network of the workload.
type NetworkSpec struct {
	Name string
	VNI  uint32
	CIDR string
}

func (w Workload) withDefaults() Workload {
	if w.EndpointsPerNode == 0 {
		w.EndpointsPerNode = 30
	}
	if w.NetworksPerNode == 0 {
		w.NetworksPerNode = 3
	}
	if w.NodesPerNetwork == 0 {
		w.NodesPerNetwork = 10
	}
	if w.Namespaces == 0 {
		w.Namespaces = 100
	}
	return w
}

// Validate checks the workload's shape.
func (w Workload) Validate() error {
	w = w.withDefaults()
	switch {
	case w.Kind != Local && w.Kind != Wide:
		return fmt.Errorf("workload: kind %q is not %s or %s", w.Kind, Local, Wide)
	case w.Nodes < 1 || w.Nodes > 100000:
		return fmt.Errorf("workload: nodes must be 1..100000, got %d", w.Nodes)
	case w.Kind == Local && w.Nodes%w.NodesPerNetwork != 0:
		return fmt.Errorf("workload: nodes (%d) must be a multiple of nodes per network (%d)", w.Nodes, w.NodesPerNetwork)
	case w.Kind == Local && w.EndpointsPerNode%w.NetworksPerNode != 0:
		return fmt.Errorf("workload: endpoints per node (%d) must be a multiple of networks per node (%d)", w.EndpointsPerNode, w.NetworksPerNode)
	case w.Kind == Local && w.EndpointsPerNode/w.NetworksPerNode*w.NodesPerNetwork > 200:
		return fmt.Errorf("workload: more than 200 endpoints per network do not fit its /24")
	case w.Kind == Wide && w.Nodes*w.EndpointsPerNode > 60000:
		return fmt.Errorf("workload: more than 60000 endpoints do not fit the wide network's /16")
	}
	return nil
}

// NodeName names node i.
func NodeName(i int) string { return fmt.Sprintf("n%05d", i) }

// NodeSpecs returns every node.
func (w Workload) NodeSpecs() []NodeSpec {
	base := netip.MustParseAddr("198.18.0.1").As4()
	out := make([]NodeSpec, w.Nodes)
	for i := range out {
		v := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
		v += uint32(i)
		a := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
		out[i] = NodeSpec{Name: NodeName(i), UnderlayIP: a.String()}
	}
	return out
}

// Networks returns every network. Local networks all reuse
// 198.51.100.0/24 (networks may reuse a CIDR); the wide network has
// 198.19.0.0/16.
func (w Workload) Networks() []NetworkSpec {
	w = w.withDefaults()
	if w.Kind == Wide {
		return []NetworkSpec{{Name: "pods", VNI: 1, CIDR: "198.19.0.0/16"}}
	}
	var out []NetworkSpec
	for g := range w.Nodes / w.NodesPerNetwork {
		for k := range w.NetworksPerNode {
			i := g*w.NetworksPerNode + k
			out = append(out, NetworkSpec{Name: fmt.Sprintf("t%05d", i), VNI: uint32(1000 + i), CIDR: "198.51.100.0/24"})
		}
	}
	return out
}

// networkOf returns the network of node's k-th endpoint.
func (w Workload) networkOf(node, k int) string {
	w = w.withDefaults()
	if w.Kind == Wide {
		return "pods"
	}
	return fmt.Sprintf("t%05d", node/w.NodesPerNetwork*w.NetworksPerNode+k%w.NetworksPerNode)
}

// Members returns the nodes that have endpoints on network.
func (w Workload) Members(network string) []string {
	w = w.withDefaults()
	if w.Kind == Wide {
		out := make([]string, w.Nodes)
		for i := range out {
			out[i] = NodeName(i)
		}
		return out
	}
	var i int
	fmt.Sscanf(network, "t%05d", &i)
	g := i / w.NetworksPerNode
	var out []string
	for n := g * w.NodesPerNetwork; n < (g+1)*w.NodesPerNetwork; n++ {
		out = append(out, NodeName(n))
	}
	return out
}

// Endpoint returns the x-th endpoint (0 <= x < Nodes*EndpointsPerNode).
// Its namespace and app spread every (namespace, app) pair evenly.
func (w Workload) Endpoint(x int) Endpoint {
	w = w.withDefaults()
	node, k := x/w.EndpointsPerNode, x%w.EndpointsPerNode
	return Endpoint{Name: fmt.Sprintf("%s-%02d", NodeName(node), k), Network: w.networkOf(node, k), Node: NodeName(node),
		Namespace: fmt.Sprintf("ns%03d", x%w.Namespaces), App: fmt.Sprintf("a%02d", x/w.Namespaces%100)}
}

// Endpoints is the number of endpoints.
func (w Workload) Endpoints() int { return w.Nodes * w.withDefaults().EndpointsPerNode }

// Extra returns a new endpoint named name on a random network, on a random
// member node of it, and the nodes the change concerns.
func (w Workload) Extra(name string, r *rand.Rand) (Endpoint, []string) {
	w = w.withDefaults()
	nets := w.Networks()
	n := nets[r.IntN(len(nets))].Name
	members := w.Members(n)
	x := r.IntN(w.Endpoints())
	return Endpoint{Name: name, Network: n, Node: members[r.IntN(len(members))],
		Namespace: fmt.Sprintf("ns%03d", x%w.Namespaces), App: fmt.Sprintf("a%02d", x/w.Namespaces%100)}, members
}

// PB returns the endpoint as the API takes it.
func (e Endpoint) PB() *skiffv1.Endpoint {
	return &skiffv1.Endpoint{Name: e.Name, Network: e.Network, Node: e.Node, Kind: "veth", Namespace: e.Namespace,
		Owner: "pod:" + e.Namespace + "/" + e.Name, Labels: map[string]string{"app": e.App}}
}

// NamespaceLabels returns namespace i's labels (a team of ten namespaces).
func NamespaceLabels(i int) map[string]string {
	return map[string]string{"team": fmt.Sprintf("t%d", i%10)}
}

// PolicyDocuments returns the workload's NetworkPolicies as YAML documents,
// in batches of at most batch. Policy j of namespace ns isolates app j
// for ingress and allows apps j+1 and j+2 of its namespace and app j+3 of
// the namespaces of its team, on TCP 80 and 443, and a /24 of the
// underlay (its team's monitoring, all of the underlay's /16 but one /26)
// on TCP 9100; every tenth one also isolates egress, allowing its team's
// apps j+1 on TCP 5432 and 203.0.113.0/24 on TCP 443.
func (w Workload) PolicyDocuments(batch int) []string {
	w = w.withDefaults()
	var out []string
	var b strings.Builder
	n := 0
	for i := range w.Policies {
		b.WriteString(w.PolicyDocument(i, 0))
		if n++; n == batch {
			out = append(out, b.String())
			b.Reset()
			n = 0
		}
	}
	if n > 0 {
		out = append(out, b.String())
	}
	return out
}

// PolicyDocument returns policy i of PolicyDocuments; version v > 0 moves
// its monitoring port to 9100+v (a change of the policy's rules only:
// the endpoints it selects and its address groups stay).
func (w Workload) PolicyDocument(i, v int) string {
	w = w.withDefaults()
	ns, app := i%w.Namespaces, i/w.Namespaces%100
	var b strings.Builder
	fmt.Fprintf(&b, `---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {namespace: ns%03d, name: p%05d}
spec:
  podSelector: {matchLabels: {app: a%02d}}
`, ns, i, app)
	if i%10 == 0 {
		b.WriteString("  policyTypes: [Ingress, Egress]\n")
	} else {
		b.WriteString("  policyTypes: [Ingress]\n")
	}
	fmt.Fprintf(&b, `  ingress:
  - from:
    - podSelector: {matchExpressions: [{key: app, operator: In, values: [a%02d, a%02d]}]}
    - namespaceSelector: {matchLabels: {team: t%d}}
      podSelector: {matchLabels: {app: a%02d}}
    ports: [{protocol: TCP, port: 80}, {protocol: TCP, port: 443}]
  - from:
    - ipBlock: {cidr: 198.18.%d.0/24, except: [198.18.%d.%d/26]}
    ports: [{protocol: TCP, port: %d}]
`, (app+1)%100, (app+2)%100, ns%10, (app+3)%100, ns%10, ns%10, 64*(app%4), 9100+v)
	if i%10 == 0 {
		fmt.Fprintf(&b, `  egress:
  - to:
    - namespaceSelector: {matchLabels: {team: t%d}}
      podSelector: {matchLabels: {app: a%02d}}
    ports: [{protocol: TCP, port: 5432}]
  - to:
    - ipBlock: {cidr: 203.0.113.0/24}
    ports: [{protocol: TCP, port: 443}]
`, ns%10, (app+1)%100)
	}
	return b.String()
}

// PolicySelects returns the workload's endpoints (indices) that policy i
// selects: those of its namespace with its app.
func (w Workload) PolicySelects(i int) []int {
	w = w.withDefaults()
	ns, app := i%w.Namespaces, i/w.Namespaces%100
	var out []int
	for x := ns; x < w.Endpoints(); x += w.Namespaces {
		if x/w.Namespaces%100 == app {
			out = append(out, x)
		}
	}
	return out
}

// Rates collects durations per step of a setup, for the report.
type Rates struct {
	mu    sync.Mutex
	Steps []Step
}

// Step is one timed setup step.
type Step struct {
	What    string
	Count   int
	Seconds float64
}

func (r *Rates) add(what string, count int, secs float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Steps = append(r.Steps, Step{what, count, secs})
}
