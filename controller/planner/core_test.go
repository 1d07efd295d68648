package planner

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/controller/policy"
	"github.com/skiff-sdn/skiff/internal/plan"
)

func ep(name, network, node string, last byte) plan.Endpoint {
	return plan.Endpoint{Name: name, Network: network, Node: node, Kind: plan.KindVeth,
		MAC: fmt.Sprintf("02:00:00:00:00:%02x", last), IPs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 51, 100, last}), 24)}, VFIndex: -1}
}

func node(name string, last byte) plan.Node {
	return plan.Node{Name: name, UnderlayIP: netip.AddrFrom4([4]byte{192, 0, 2, last})}
}

// summary renders a plan compactly: networks with flood lists, local and
// remote endpoint names (remote with VTEP).
func summary(p plan.Plan) string {
	var nets, loc, rem []string
	for _, n := range slices.Sorted(maps.Keys(p.Networks)) {
		nets = append(nets, fmt.Sprintf("%s%v", n, p.Networks[n].FloodVTEPs))
	}
	loc = slices.Sorted(maps.Keys(p.Local))
	for _, r := range slices.Sorted(maps.Keys(p.Remote)) {
		rem = append(rem, r+"@"+p.Remote[r].VTEP.String())
	}
	return fmt.Sprintf("ul=%v nets=%v local=%v remote=%v", p.UnderlayIP, nets, loc, rem)
}

func base() State {
	return State{
		Networks: []plan.Network{{Name: "blue", VNI: 100, MTU: 1450}, {Name: "red", VNI: 200, MTU: 1450}},
		Subnets:  []plan.Subnet{{Name: "blue-v4", Network: "blue", CIDR: netip.MustParsePrefix("198.51.100.0/24")}},
		Nodes:    []plan.Node{node("n1", 1), node("n2", 2), node("n3", 3)},
		Endpoints: []plan.Endpoint{
			ep("b1", "blue", "n1", 1), ep("b2", "blue", "n2", 2),
			ep("r2", "red", "n2", 3), ep("r3", "red", "n3", 4),
			ep("g4", "red", "n4", 5), // n4 is not registered
		},
	}
}

func newPlanner() *Planner { return New(slog.New(slog.DiscardHandler), Options{}) }

func TestPlansFollowRelevance(t *testing.T) {
	p := newPlanner()
	p.Load(10, base())
	want := map[string]string{
		"n1": "ul=192.0.2.1 nets=[blue[192.0.2.2]] local=[b1] remote=[b2@192.0.2.2]",
		"n2": "ul=192.0.2.2 nets=[blue[192.0.2.1] red[192.0.2.3]] local=[b2 r2] remote=[b1@192.0.2.1 r3@192.0.2.3]",
		"n3": "ul=192.0.2.3 nets=[red[192.0.2.2]] local=[r3] remote=[r2@192.0.2.2]",
		"n4": "ul=invalid IP nets=[red[192.0.2.2 192.0.2.3]] local=[g4] remote=[r2@192.0.2.2 r3@192.0.2.3]",
		"n9": "ul=invalid IP nets=[] local=[] remote=[]",
	}
	for n, w := range want {
		pl := p.Plan(n)
		if got := summary(pl); got != w {
			t.Errorf("%s:\n got %s\nwant %s", n, got, w)
		}
		if pl.Revision != 10 {
			t.Errorf("%s: revision %d, want 10", n, pl.Revision)
		}
	}
	if s := p.Plan("n1").Networks["blue"].Subnets; len(s) != 1 || s[0].Name != "blue-v4" {
		t.Errorf("n1 blue subnets %v", s)
	}
}

// step is one transition: the changes, the nodes that must get a delta,
// and the expected plans of some nodes afterwards.
type step struct {
	name    string
	changes []Change
	deltas  string // sorted node names that get a delta
	plans   map[string]string
}

func TestTransitions(t *testing.T) {
	e := func(x plan.Endpoint) Change { return Change{Endpoint: &x} }
	steps := []step{
		{"blue endpoint added on n3", []Change{e(ep("b3", "blue", "n3", 9))}, "[n1 n2 n3]", map[string]string{
			"n1": "ul=192.0.2.1 nets=[blue[192.0.2.2 192.0.2.3]] local=[b1] remote=[b2@192.0.2.2 b3@192.0.2.3]",
			"n3": "ul=192.0.2.3 nets=[blue[192.0.2.1 192.0.2.2] red[192.0.2.2]] local=[b3 r3] remote=[b1@192.0.2.1 b2@192.0.2.2 r2@192.0.2.2]",
		}},
		{"red endpoint added on n3 (n1 not concerned)", []Change{e(ep("r3b", "red", "n3", 10))}, "[n2 n3 n4]", nil},
		{"b1 moves from n1 to n2", []Change{e(ep("b1", "blue", "n2", 1))}, "[n1 n2 n3]", map[string]string{
			"n1": "ul=192.0.2.1 nets=[] local=[] remote=[]",
			"n2": "ul=192.0.2.2 nets=[blue[192.0.2.3] red[192.0.2.3]] local=[b1 b2 r2] remote=[b3@192.0.2.3 r3@192.0.2.3 r3b@192.0.2.3]",
		}},
		{"n4 registers", []Change{{Node: &plan.Node{Name: "n4", UnderlayIP: netip.MustParseAddr("192.0.2.4")}}}, "[n2 n3 n4]", map[string]string{
			"n3": "ul=192.0.2.3 nets=[blue[192.0.2.2] red[192.0.2.2 192.0.2.4]] local=[b3 r3 r3b] remote=[b1@192.0.2.2 b2@192.0.2.2 g4@192.0.2.4 r2@192.0.2.2]",
		}},
		{"n2 changes its underlay address", []Change{{Node: &plan.Node{Name: "n2", UnderlayIP: netip.MustParseAddr("192.0.2.22")}}}, "[n2 n3 n4]", map[string]string{
			"n4": "ul=192.0.2.4 nets=[red[192.0.2.3 192.0.2.22]] local=[g4] remote=[r2@192.0.2.22 r3@192.0.2.3 r3b@192.0.2.3]",
		}},
		{"red MTU changes", []Change{{Network: &plan.Network{Name: "red", VNI: 200, MTU: 9000}}}, "[n2 n3 n4]", nil},
		{"subnet added to blue", []Change{{Subnet: &plan.Subnet{Name: "blue-v6", Network: "blue", CIDR: netip.MustParsePrefix("2001:db8::/64")}}}, "[n2 n3]", nil},
		{"all red endpoints deleted", []Change{{Delete: true, Endpoint: &plan.Endpoint{Name: "r2"}}, {Delete: true, Endpoint: &plan.Endpoint{Name: "r3"}},
			{Delete: true, Endpoint: &plan.Endpoint{Name: "r3b"}}, {Delete: true, Endpoint: &plan.Endpoint{Name: "g4"}}}, "[n2 n3 n4]", map[string]string{
			"n4": "ul=192.0.2.4 nets=[] local=[] remote=[]",
		}},
		{"red network deleted: nobody concerned", []Change{{Delete: true, Network: &plan.Network{Name: "red"}}}, "[]", nil},
		{"n3 deregisters", []Change{{Delete: true, Node: &plan.Node{Name: "n3"}}}, "[n2 n3]", map[string]string{
			"n2": "ul=192.0.2.22 nets=[blue[]] local=[b1 b2] remote=[]",
		}},
	}
	p := newPlanner()
	p.Load(1, base())
	prev := map[string]plan.Plan{}
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		prev[n] = p.Plan(n)
	}
	state := base()
	for i, s := range steps {
		rev := int64(i + 2)
		deltas := p.Update(rev, s.changes)
		var got []string
		for _, d := range deltas {
			got = append(got, d.Node)
			next := prev[d.Node].Clone()
			if err := next.Apply(d); err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			if cur := p.Plan(d.Node); !next.Equal(cur) || next.Revision != rev {
				t.Fatalf("%s: applying %s's delta gives\n%s\nwant\n%s", s.name, d.Node, summary(next), summary(cur))
			}
			prev[d.Node] = next
		}
		if fmt.Sprint(got) != s.deltas {
			t.Errorf("%s: deltas for %v, want %s", s.name, got, s.deltas)
		}
		for n, w := range s.plans {
			if g := summary(p.Plan(n)); g != w {
				t.Errorf("%s: %s\n got %s\nwant %s", s.name, n, g, w)
			}
		}
		state = applyState(state, s.changes)
		for _, n := range []string{"n1", "n2", "n3", "n4"} {
			if b := Build(state, n); !b.Equal(p.Plan(n)) {
				t.Errorf("%s: incremental plan of %s differs from a full build:\n inc %s\nfull %s", s.name, n, summary(p.Plan(n)), summary(b))
			}
		}
	}
}

// applyState applies changes to a state the slow way.
func applyState(s State, cs []Change) State {
	for _, c := range cs {
		switch {
		case c.Endpoint != nil:
			s.Endpoints = slices.DeleteFunc(slices.Clone(s.Endpoints), func(e plan.Endpoint) bool { return e.Name == c.Endpoint.Name })
			if !c.Delete {
				s.Endpoints = append(s.Endpoints, *c.Endpoint)
			}
		case c.Node != nil:
			s.Nodes = slices.DeleteFunc(slices.Clone(s.Nodes), func(n plan.Node) bool { return n.Name == c.Node.Name })
			if !c.Delete {
				s.Nodes = append(s.Nodes, *c.Node)
			}
		case c.Network != nil:
			s.Networks = slices.DeleteFunc(slices.Clone(s.Networks), func(n plan.Network) bool { return n.Name == c.Network.Name })
			if !c.Delete {
				s.Networks = append(s.Networks, *c.Network)
			}
		case c.Subnet != nil:
			s.Subnets = slices.DeleteFunc(slices.Clone(s.Subnets), func(n plan.Subnet) bool { return n.Name == c.Subnet.Name })
			if !c.Delete {
				s.Subnets = append(s.Subnets, *c.Subnet)
			}
		case c.Policy != nil:
			s.Policies = slices.DeleteFunc(slices.Clone(s.Policies), func(p policy.Policy) bool { return p.Key() == c.Policy.Key() })
			if !c.Delete {
				s.Policies = append(s.Policies, *c.Policy)
			}
		case c.Namespace != nil:
			s.Namespaces = slices.DeleteFunc(slices.Clone(s.Namespaces), func(n NamespaceLabels) bool { return n.Name == c.Namespace.Name })
			if !c.Delete {
				s.Namespaces = append(s.Namespaces, *c.Namespace)
			}
		case c.Status != nil:
			s.Connected = maps.Clone(s.Connected)
			if s.Connected == nil {
				s.Connected = map[string]time.Time{}
			}
			delete(s.Connected, c.Status.Node)
			if c.Status.Connected {
				s.Connected[c.Status.Node] = c.Status.Since
			}
		case c.DPUReady != nil:
			s.DPUReady = slices.DeleteFunc(slices.Clone(s.DPUReady), func(r EndpointReady) bool { return r.Endpoint == c.DPUReady.Endpoint })
			if !c.Delete {
				s.DPUReady = append(s.DPUReady, *c.DPUReady)
			}
		}
	}
	return s
}

var randomPolicies = func() []policy.Policy {
	ps, err := policy.ParseYAML([]byte(`apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: db, namespace: p}
spec:
  podSelector: {matchLabels: {app: db}}
  ingress: [{from: [{podSelector: {matchLabels: {app: web}}}, {namespaceSelector: {matchLabels: {env: prod}}}]}]
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: web, namespace: q}
spec:
  podSelector: {}
  policyTypes: [Egress]
  egress: [{to: [{namespaceSelector: {}, podSelector: {matchLabels: {app: db}}}], ports: [{port: 5432}]}]
`))
	if err != nil {
		panic(err)
	}
	return ps
}()

func TestRandomChangesMatchFullBuild(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	nodes := []string{"a", "b", "c", "d", "e"}
	nets := []string{"x", "y", "z"}
	state := State{Networks: []plan.Network{{Name: "x", VNI: 1}, {Name: "y", VNI: 2}, {Name: "z", VNI: 3}}}
	p := newPlanner()
	p.Load(1, state)
	held := map[string]plan.Plan{}
	for _, n := range nodes {
		held[n] = p.Plan(n)
	}
	for i := range 3000 {
		var c Change
		switch k := r.IntN(13); {
		case k == 11:
			// A node's agent comes or goes. (A node away has no Since
			// in a full build: the planner saw it go.)
			up := r.IntN(2) == 0
			st := NodeStatus{Node: nodes[r.IntN(5)], Connected: up}
			if up {
				st.Since = time.Unix(int64(i), 0)
			}
			c = Change{Status: &st}
		case k == 12:
			rd := EndpointReady{Endpoint: fmt.Sprintf("e%d", r.IntN(15)), Ready: r.IntN(2) == 0}
			if !rd.Ready {
				rd.Reason = "not yet"
			}
			c = Change{DPUReady: &rd, Delete: r.IntN(3) == 0}
		case k == 10:
			if r.IntN(3) == 0 {
				n := NamespaceLabels{Name: []string{"p", "q"}[r.IntN(2)], Labels: map[string]string{"env": []string{"prod", "dev"}[r.IntN(2)]}}
				c = Change{Namespace: &n, Delete: r.IntN(3) == 0}
				break
			}
			pol := randomPolicies[r.IntN(len(randomPolicies))]
			c = Change{Policy: &pol, Delete: r.IntN(3) == 0}
		case k < 6:
			e := ep(fmt.Sprintf("e%d", r.IntN(15)), nets[r.IntN(3)], nodes[r.IntN(5)], byte(r.IntN(200)))
			e.Namespace, e.Labels = []string{"p", "q", ""}[r.IntN(3)], map[string]string{"app": []string{"web", "db"}[r.IntN(2)]}
			if i := slices.IndexFunc(state.Endpoints, func(x plan.Endpoint) bool { return x.Name == e.Name }); i >= 0 && r.IntN(2) == 0 {
				// A label change only (an owner record's).
				old := state.Endpoints[i]
				old.Labels = e.Labels
				e = old
			}
			c = Change{Endpoint: &e, Delete: r.IntN(3) == 0}
		case k < 8:
			n := node(nodes[r.IntN(5)], byte(r.IntN(4)+1)) // shared VTEPs happen
			switch r.IntN(4) {
			case 0: // a host and its DPU (a or b, never itself)
				n.Mode, n.DPU = plan.ModeDPUHost, []string{"a", "b"}[r.IntN(2)]
				if n.DPU == n.Name {
					n.DPU = "c"
				}
			case 1:
				n.Mode = plan.ModeDPU
			case 2: // host ports: a host member of networks that route out
				n.Mode = []string{plan.ModeSoftware, plan.ModeOffload}[r.IntN(2)]
			}
			c = Change{Node: &n, Delete: r.IntN(4) == 0}
		case k < 9:
			n := plan.Network{Name: nets[r.IntN(3)], VNI: uint32(r.IntN(5) + 1), MTU: uint32(1400 + r.IntN(3)),
				Egress: []string{"", plan.EgressNone, plan.EgressSNAT, plan.EgressRouted}[r.IntN(4)]}
			c = Change{Network: &n, Delete: r.IntN(6) == 0}
		default:
			w := nets[r.IntN(3)] // subnet names are unique across networks, as in the store
			s := plan.Subnet{Name: fmt.Sprintf("%s-s%d", w, r.IntN(3)), Network: w, CIDR: netip.MustParsePrefix("198.51.100.0/24")}
			c = Change{Subnet: &s, Delete: r.IntN(2) == 0}
		}
		rev := int64(i + 2)
		for _, d := range p.Update(rev, []Change{c}) {
			h := held[d.Node].Clone()
			if err := h.Apply(d); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			held[d.Node] = h
		}
		state = applyState(state, []Change{c})
		for _, n := range nodes {
			b := Build(state, n)
			if cur := p.Plan(n); !cur.Equal(b) {
				t.Fatalf("step %d (%+v %+v): %s incremental\n%+v\nfull\n%+v", i, c, c.Node, n, cur, b)
			}
			if !held[n].Equal(b) {
				t.Fatalf("step %d: %s plan rebuilt from deltas\n%s\nwant\n%s", i, n, summary(held[n]), summary(b))
			}
		}
	}
}

func next(t *testing.T, s *Subscription) Update {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, err := s.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestStreams(t *testing.T) {
	ctx := context.Background()
	var historyCalls int
	p := New(slog.New(slog.DiscardHandler), Options{LogDeltas: 4, History: func(ctx context.Context, n string, rev int64) (plan.Plan, error) {
		historyCalls++
		if rev == 5 {
			pl := plan.New(n) // pretend n1 had nothing at revision 5
			return pl, nil
		}
		return plan.Plan{}, fmt.Errorf("compacted")
	}})
	p.Load(10, base())

	s, _ := p.Subscribe(ctx, "n1", 0)
	if u := next(t, s); u.Snapshot == nil || u.Snapshot.Revision != 10 {
		t.Fatalf("first update %+v, want snapshot at 10", u)
	}
	s.Close()

	s, _ = p.Subscribe(ctx, "n1", 10)
	if u := next(t, s); u.Delta == nil || !u.Delta.Empty() || u.Delta.From != 10 {
		t.Fatalf("in-sync resume: %+v, want an empty delta", u)
	}
	s.Close()

	x := ep("b9", "blue", "n2", 50)
	p.Update(11, []Change{{Endpoint: &x}})
	y := ep("b8", "blue", "n3", 51)
	p.Update(12, []Change{{Endpoint: &y}})
	s, _ = p.Subscribe(ctx, "n1", 10)
	u := next(t, s)
	if u.Delta == nil || u.Delta.From != 10 || u.Delta.Revision != 12 || len(u.Delta.UpsertRemote) != 2 {
		t.Fatalf("resume from log: %+v, want one delta 10->12 with two remotes", u)
	}
	s.Close()

	s, _ = p.Subscribe(ctx, "n1", 5)
	u = next(t, s)
	if u.Delta == nil || u.Delta.From != 5 || historyCalls != 1 || len(u.Delta.UpsertLocal) != 1 {
		t.Fatalf("resume through history: %+v (calls %d)", u, historyCalls)
	}
	s.Close()

	s, _ = p.Subscribe(ctx, "n1", 3)
	if u = next(t, s); u.Snapshot == nil {
		t.Fatalf("resume from a compacted revision: %+v, want a snapshot", u)
	}
	s.Close()
}

func TestSlowSubscriberIsCoalesced(t *testing.T) {
	ctx := context.Background()
	p := newPlanner()
	p.Load(1, base())
	s, _ := p.Subscribe(ctx, "n1", 0)
	snap := next(t, s).Snapshot
	for i := range 10000 {
		e := ep(fmt.Sprintf("churn-%d", i%50), "blue", "n2", byte(i%200))
		p.Update(int64(i+2), []Change{{Endpoint: &e, Delete: i%3 == 2}})
	}
	cur := p.Plan("n1")
	if s.Pending() > len(cur.Remote)+len(cur.Networks)+50 {
		t.Fatalf("pending %d items for a plan of %d", s.Pending(), len(cur.Remote))
	}
	u := next(t, s)
	held := snap.Clone()
	if err := held.Apply(*u.Delta); err != nil {
		t.Fatal(err)
	}
	if !held.Equal(cur) || held.Revision != cur.Revision {
		t.Fatalf("coalesced delta gives %s, want %s", summary(held), summary(cur))
	}
}

func TestSubscribeAheadWaits(t *testing.T) {
	p := newPlanner()
	p.Load(1, base())
	got := make(chan Update, 1)
	go func() {
		s, err := p.Subscribe(context.Background(), "n1", 3)
		if err != nil {
			return
		}
		u, _ := s.Next(context.Background())
		got <- u
	}()
	p.Update(2, nil)
	select {
	case u := <-got:
		t.Fatalf("subscriber ahead of the planner got %+v before the planner reached its revision", u)
	case <-time.After(100 * time.Millisecond):
	}
	x := ep("b9", "blue", "n2", 50)
	p.Update(3, []Change{{Endpoint: &x}})
	u := <-got
	if u.Delta == nil && u.Snapshot == nil {
		t.Fatal("no update")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.Subscribe(ctx, "n1", 99); err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("subscribe far ahead: %v, want the context's error", err)
	}
}

func TestRegistrationChangesThePlanRevision(t *testing.T) {
	p := newPlanner()
	p.Load(1, State{})
	if got := p.Plan("ghost"); got.Revision != 1 || len(p.Nodes()) != 0 {
		t.Fatalf("reading an unknown node's plan created one: %v %v", got, p.Nodes())
	}
	n := node("n5", 5)
	ds := p.Update(2, []Change{{Node: &n}})
	if len(ds) != 1 || ds[0].UnderlayIP == nil || *ds[0].UnderlayIP != n.UnderlayIP || ds[0].From != 1 {
		t.Fatalf("registration deltas %+v, want one header delta 1->2", ds)
	}
	if got := p.Plan("n5"); got.Revision != 2 || !got.Equal(Build(State{Nodes: []plan.Node{n}}, "n5")) {
		t.Fatalf("plan after registration %+v", got)
	}
}

// TestHostPortVTEPs: a network's host port VTEPs are its members'
// running a datapath with host ports (modes software, offload and dpu),
// without the node's own; a member that named no mode is a flood VTEP
// only, until it registers with one.
func TestHostPortVTEPs(t *testing.T) {
	mode := func(n plan.Node, m string) plan.Node { n.Mode = m; return n }
	s := State{
		Networks: []plan.Network{{Name: "x", VNI: 1}},
		Nodes: []plan.Node{mode(node("a", 1), plan.ModeSoftware), mode(node("b", 2), plan.ModeSoftware),
			mode(node("c", 3), plan.ModeOffload), mode(node("d", 4), plan.ModeDPU), node("e", 5)},
		Endpoints: []plan.Endpoint{ep("e1", "x", "a", 1), ep("e2", "x", "b", 2), ep("e3", "x", "c", 3), ep("e4", "x", "d", 4), ep("e5", "x", "e", 5)},
	}
	p := newPlanner()
	p.Load(1, s)
	x := p.Plan("a").Networks["x"]
	if !slices.Equal(x.FloodVTEPs, addrs(2, 3, 4, 5)) || !slices.Equal(x.HostPortVTEPs, addrs(2, 3, 4)) {
		t.Fatalf("a's network: flood %v, host ports %v", x.FloodVTEPs, x.HostPortVTEPs)
	}
	if c := p.Plan("c").Networks["x"]; !slices.Equal(c.HostPortVTEPs, addrs(1, 2, 4)) {
		t.Fatalf("the offload node c's network: host ports %v", c.HostPortVTEPs)
	}
	c := mode(node("e", 5), plan.ModeOffload)
	ds := p.Update(2, []Change{{Node: &c}})
	i := slices.IndexFunc(ds, func(d plan.Delta) bool { return d.Node == "a" })
	if i < 0 || len(ds[i].UpsertNetworks) != 1 || !slices.Equal(ds[i].UpsertNetworks[0].HostPorts(), addrs(2, 3, 4, 5)) {
		t.Fatalf("e now runs the offload datapath: deltas %+v", ds)
	}
	if b := Build(applyState(s, []Change{{Node: &c}}), "a"); !p.Plan("a").Equal(b) {
		t.Fatalf("incremental %+v, full build %+v", p.Plan("a"), b)
	}
}
