package offloadbench

import (
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/datapath/offload"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// The policy benchmark: NetworkPolicy on the offload datapath (flower
// filters with act_ct in chains 0-2 ahead of forwarding in chain 3), in
// software tc with software conntrack (netdevsim offloads no flower).
//
// Two node namespaces built alike, each with two pods (veth pairs into
// pod namespaces, the host sides as representors) on one network with a
// subnet gateway (the datapath's veth pair, as on a real node):
//
//   - "open": no policy at all (chain 0 sends everything to forwarding);
//   - "policy": pod b isolated for ingress, with one rule allowing the
//     members of an address group of N addresses (the clients, pod a and
//     the node's gateway address, last) on two TCP ports. Flower has no sets: the group is one filter
//     per member and port on each device traffic from any member may
//     enter by (the VXLAN device, the gateway's port); a's representor
//     holds only the filters a's own address can match.
//
// It measures installing the policy (Datapath.Apply) next to iproute2's
// tc -batch installing the same filters, one member joining, an
// unchanged re-apply, and TCP throughput and new connections per second
// to b on both nodes, interleaved. It asserts what the filters
// are (exact counts per device, writes) and that the policy holds (a port
// outside it is dropped, every connection counted by b's rule), never
// how fast; the figures are in docs/performance.md and
// docs/perf-log/offload.md.

const (
	portStream  = 5201 // throughput; allowed
	portConn    = 8080 // new connections; allowed
	portShut    = 8081 // not in the policy: dropped on the policy node
	rounds      = 4    // traffic rounds
	streamSlice = time.Second
	connSlice   = 500 * time.Millisecond
)

var groupSizes = []int{1000, 10000}

var podIP = map[string]string{"a": "198.51.100.10", "b": "198.51.100.11"}

const (
	vni       = 100
	gatewayIP = "198.51.100.1"
)

// gwPort is the eswitch side of the network's gateway, which the
// datapath makes (a veth pair).
var gwPort = offload.GatewayPortName(vni)

// rep is the representor (host side of the pod's veth) of endpoint e.
func rep(e string) string { return "skpb" + e }

func countIn(t testing.TB, ns, dev string) int {
	t.Helper()
	return strings.Count(guest.In(t, ns, guest.TC, "filter", "show", "dev", dev, "ingress"), " handle ")
}

type node struct {
	ns   string
	pods map[string]string // endpoint -> pod namespace
	p    plan.Plan
	dp   *offload.Datapath
	srv  *servers
}

// newNode makes a node namespace with pods a and b and a datapath in it.
func newNode(t *testing.T, ns string, log *slog.Logger) *node {
	t.Helper()
	guest.AddNetns(t, ns)
	guest.In(t, ns, guest.IP, "link", "add", "skpbu0", "type", "dummy")
	guest.In(t, ns, guest.IP, "addr", "add", "192.0.2.1/24", "dev", "skpbu0")
	guest.In(t, ns, guest.IP, "link", "set", "skpbu0", "up")
	n := &node{ns: ns, pods: map[string]string{}, p: plan.New("n1")}
	n.p.UnderlayIP = netip.MustParseAddr("192.0.2.1")
	n.p.Networks["blue"] = plan.Network{Name: "blue", VNI: vni, MTU: 1450, Subnets: []plan.Subnet{{Name: "blue-v4", Network: "blue",
		CIDR: netip.MustParsePrefix("198.51.100.0/24"), Gateway: netip.MustParseAddr(gatewayIP)}}}
	for i, e := range []string{"a", "b"} {
		pod := ns + e
		n.pods[e] = pod
		guest.AddNetns(t, pod)
		mac := fmt.Sprintf("02:00:00:00:00:%02x", 10+i)
		guest.Run(t, guest.IP, "link", "add", rep(e), "netns", ns, "type", "veth", "peer", "name", "eth0", "netns", pod)
		guest.In(t, ns, guest.IP, "link", "set", rep(e), "up")
		guest.In(t, pod, guest.IP, "link", "set", "eth0", "address", mac, "mtu", "1450", "up")
		guest.In(t, pod, guest.IP, "addr", "add", podIP[e]+"/24", "dev", "eth0")
		n.p.Local[e] = plan.Endpoint{Name: e, Network: "blue", Kind: plan.KindVeth, MAC: mac,
			IPs: []netip.Prefix{netip.MustParsePrefix(podIP[e] + "/24")}, VFIndex: -1}
	}
	var err error
	n.dp, err = offload.New(offload.Options{Logger: log, NetNS: testkit.Path(ns),
		Representor: func(e plan.Endpoint) (offload.Port, bool) { return offload.Port{Rep: rep(e.Name)}, true }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.dp.Close)
	n.srv = serve(t, n.pods["b"], podIP["b"])
	return n
}

// apply applies the node's plan and returns the writes and the time taken.
func (n *node) apply(t *testing.T, what string) (int, time.Duration) {
	t.Helper()
	w0 := n.dp.Writes()
	start := time.Now()
	if err := n.dp.Apply(n.p); err != nil {
		t.Fatalf("%s: %s: %v", n.ns, what, err)
	}
	return n.dp.Writes() - w0, time.Since(start)
}

// counts returns the filters on the ingress of the node's devices.
func (n *node) counts(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for d := range forwarding {
		out[d] = countIn(t, n.ns, d)
	}
	return out
}

func sum(m map[string]int) int {
	s := 0
	for _, v := range m {
		s += v
	}
	return s
}

// Forwarding rules of the two-pod plan (chain 3): on each representor
// unicast and ARP to the other pod and to the gateway; on the VXLAN
// device decap and ARP for each pod; on the gateway's port unicast and
// ARP to each pod.
var forwarding = map[string]int{rep("a"): 4, rep("b"): 4, offload.VXLANName: 4, gwPort: 4}

// policyFilters is the policy pipeline for b isolated for ingress with
// one rule allowing a group of members (a among them) on ports.
func policyFilters(members, ports int) map[string]int {
	// Chain 0: into conntrack, the rest to forwarding. Chain 1:
	// established, related, on to chain 2. Chain 2: b's rule (one filter
	// per member and port), b's default deny, the rest on.
	return map[string]int{
		// Whatever enters a's representor comes from a: of b's rule,
		// only a's address.
		rep("a"): 2 + 3 + 1*ports + 2,
		// Chain 0 also drops b's IPv6; chain 2 only sends the rest on
		// (b's own traffic does not meet b's ingress rules).
		rep("b"): 3 + 3 + 1,
		// From the tunnel and from the gateway: any member (the VNI
		// matched on the VXLAN device).
		offload.VXLANName: 2 + 3 + members*ports + 2,
		gwPort:            2 + 3 + members*ports + 2,
	}
}

// devicesWithGroup are the devices holding b's rule for every member.
var devicesWithGroup = []string{offload.VXLANName, gwPort}

func TestPolicy(t *testing.T) {
	guest.Require(t)
	// New connections at a few thousand per second, each kept 10 s in
	// CLOSE after its RST: more than the default table of a 1 GiB guest.
	const ctMax = "/proc/sys/net/netfilter/nf_conntrack_max"
	if old, err := os.ReadFile(ctMax); err == nil {
		if err := os.WriteFile(ctMax, []byte("262144"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.WriteFile(ctMax, old, 0o644) })
	}
	for _, n := range groupSizes {
		t.Run(fmt.Sprintf("members=%d", n), func(t *testing.T) { policyBench(t, n) })
	}
}

func policyBench(t *testing.T, members int) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	const ports = 2
	open := newNode(t, "skpbq", log)
	pol := newNode(t, "skpbp", log)

	// The open node: forwarding, and chain 0's filter to it.
	open.apply(t, "no policy")
	want := map[string]int{}
	for d, n := range forwarding {
		want[d] = n + 1
	}
	if got := open.counts(t); !maps.Equal(got, want) {
		t.Fatalf("no policy: filters per device %v, want %v", got, want)
	}

	// (a) The policy node: forwarding and b's policy from nothing.
	group := plan.AddressGroup{Name: "g"}
	for i := range members - 2 {
		group.Members = append(group.Members, netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
	}
	group.Members = append(group.Members, netip.MustParseAddr(gatewayIP), netip.MustParseAddr(podIP["a"]))
	pol.p.Groups["g"] = group
	pol.p.Revision = 1 // from here on, changes come as the agent makes them: follow
	pol.p.Policies["b"] = plan.EndpointPolicy{Endpoint: "b", IngressIsolated: true, Ingress: []plan.PolicyRule{{
		Peers: []plan.PolicyPeer{{Group: "g"}},
		Ports: []plan.PolicyPort{{Protocol: "TCP", Port: portStream}, {Protocol: "TCP", Port: portConn}},
	}}}
	pw0 := pol.dp.PolicyWrites()
	tl := watchWrites(pol.dp)
	writes, took := pol.apply(t, "policy from nothing")
	tl.stop()
	polWrites := pol.dp.PolicyWrites() - pw0
	want = map[string]int{}
	for d, n := range policyFilters(members, ports) {
		want[d] = n + forwarding[d]
	}
	got := pol.counts(t)
	if !maps.Equal(got, want) {
		t.Fatalf("policy: filters per device %v, want %v", got, want)
	}
	total := sum(got)
	if wantPol := sum(policyFilters(members, ports)); polWrites != wantPol {
		t.Fatalf("policy from nothing: %d policy filter writes, want %d", polWrites, wantPol)
	}
	rate := float64(total) / took.Seconds()
	t.Logf("FIGURE members=%d install: %d filters (%d policy, %d writes incl. the VXLAN device and qdiscs) in %v: %.0f filters/s",
		members, total, polWrites, writes, took.Round(time.Millisecond), rate)
	t.Logf("FIGURE members=%d install timeline: %s", members, tl.summary(polWrites))
	g := fmt.Sprintf("_g%d", members)
	figure("policy_install_ms"+g, took)
	figure("policy_install_filters"+g, total)

	// (d) Unchanged re-apply.
	if w, took := pol.apply(t, "unchanged"); w != 0 {
		t.Fatalf("unchanged re-apply wrote %d times", w)
	} else {
		t.Logf("FIGURE members=%d re-apply, nothing changed, %d filters: %v, 0 writes", members, total, took.Round(time.Millisecond))
		figure("policy_reapply_ms"+g, took)
	}

	// What a reconcile reads back: one dump of the VXLAN device (every
	// chain), decoded, as each of the datapath's two programmers does
	// for each device at every Apply.
	dumpVX(t, pol, members)

	// (b) The reference: the same filters by tc -batch, on devices of
	// the same names and kinds in a namespace of their own.
	refRate := reference(t, pol.p, got)
	t.Logf("FIGURE members=%d datapath/tc-batch install rate: %.2f", members, rate/refRate)
	figure("policy_install_ratio_vs_tc_batch"+g, rate/refRate)

	// (c) One member joins: one filter per port on each device holding
	// b's rule for every member (the VXLAN device, the gateway's port).
	grp := pol.p.Groups["g"]
	grp.Members = append(slices.Clone(grp.Members), netip.MustParseAddr("10.255.0.1"))
	follow(t, &pol.p, plan.Delta{UpsertGroups: []plan.AddressGroup{grp}})
	g0 := gcs()
	w, took := pol.apply(t, "one member joins")
	figure("group_member_join_gcs"+g, gcs()-g0)
	if wantW := ports * len(devicesWithGroup); w != wantW {
		t.Fatalf("one member joining wrote %d times, want %d (%d ports x %v)", w, wantW, ports, devicesWithGroup)
	}
	for _, d := range devicesWithGroup {
		want[d] += ports
	}
	if got := pol.counts(t); !maps.Equal(got, want) {
		t.Fatalf("after one member joined: filters per device %v, want %v", got, want)
	}
	t.Logf("FIGURE members=%d one member joins, %d filters: %v, %d writes; parts (ms): %s", members, sum(want), took.Round(10*time.Microsecond), w,
		phaseFigures("group_member_join"+g, pol.dp))
	figure("group_member_join_ms"+g, took)
	if members == groupSizes[len(groupSizes)-1] {
		figure("group_member_join_ms", took)
	}

	// (c') It leaves again.
	grp.Members = grp.Members[:len(grp.Members)-1]
	follow(t, &pol.p, plan.Delta{UpsertGroups: []plan.AddressGroup{grp}})
	g0 = gcs()
	w, took = pol.apply(t, "one member leaves")
	figure("group_member_leave_gcs"+g, gcs()-g0)
	if wantW := ports * len(devicesWithGroup); w != wantW {
		t.Fatalf("one member leaving wrote %d times, want %d", w, wantW)
	}
	for _, d := range devicesWithGroup {
		want[d] -= ports
	}
	if got := pol.counts(t); !maps.Equal(got, want) {
		t.Fatalf("after one member left: filters per device %v, want %v", got, want)
	}
	t.Logf("FIGURE members=%d one member leaves, %d filters: %v, %d writes; parts (ms): %s", members, sum(want), took.Round(10*time.Microsecond), w,
		phaseFigures("group_member_leave"+g, pol.dp))
	figure("group_member_leave_ms"+g, took)
	if members == groupSizes[len(groupSizes)-1] {
		figure("group_member_leave_ms", took)
	}

	// The same again, changeRounds times: the median of a join and of a leave
	// (the figures above are the first change after the install).
	var joins, leaves []time.Duration
	parts := phaseTimes{}
	for range changeRounds {
		grp.Members = append(slices.Clone(grp.Members), netip.MustParseAddr("10.255.0.1"))
		follow(t, &pol.p, plan.Delta{UpsertGroups: []plan.AddressGroup{grp}})
		w, took := pol.apply(t, "one member joins")
		joins = append(joins, took)
		parts.add("group_member_join"+g, pol.dp)
		grp.Members = grp.Members[:len(grp.Members)-1]
		follow(t, &pol.p, plan.Delta{UpsertGroups: []plan.AddressGroup{grp}})
		w2, took := pol.apply(t, "one member leaves")
		leaves = append(leaves, took)
		parts.add("group_member_leave"+g, pol.dp)
		if wantW := ports * len(devicesWithGroup); w != wantW || w2 != wantW {
			t.Fatalf("one member joining and leaving wrote %d and %d times, want %d each", w, w2, wantW)
		}
	}
	if got := pol.counts(t); !maps.Equal(got, want) {
		t.Fatalf("after %d joins and leaves: filters per device %v, want %v", changeRounds, got, want)
	}
	join, leave := median(joins), median(leaves)
	t.Logf("FIGURE members=%d one member joins / leaves, median of %d more rounds: %v / %v", members, changeRounds, join, leave)
	figure("group_member_join_p50_ms"+g, join)
	figure("group_member_leave_p50_ms"+g, leave)
	parts.report(t, "group_member_join"+g)
	parts.report(t, "group_member_leave"+g)
	if members == groupSizes[len(groupSizes)-1] {
		figure("group_member_join_p50_ms", join)
		figure("group_member_leave_p50_ms", leave)
	}

	// Profile (only when the VM run keeps files): join and leave again.
	if members == groupSizes[len(groupSizes)-1] {
		profile(t, "group", 10, func() {
			grp.Members = append(slices.Clone(grp.Members), netip.MustParseAddr("10.255.0.1"))
			follow(t, &pol.p, plan.Delta{UpsertGroups: []plan.AddressGroup{grp}})
			pol.apply(t, "one member joins")
			grp.Members = grp.Members[:len(grp.Members)-1]
			follow(t, &pol.p, plan.Delta{UpsertGroups: []plan.AddressGroup{grp}})
			pol.apply(t, "one member leaves")
		})
	}

	// (e) Traffic to b from two members: pod a, whose representor holds
	// only the filters a's address can match, and the node itself by its
	// gateway address, whose packets enter by the gateway's port and meet
	// the filters of every member (as packets from remote pods meet those
	// of the VXLAN device). Established packets skip chain 2: only a
	// connection's first packet is looked up among the group's filters.
	// The policy holds: a port outside it is dropped on the policy node,
	// open on the other.
	type client struct {
		name string
		ns   func(*node) string
	}
	clients := []client{{"pod a", func(n *node) string { return n.pods["a"] }}, {"gateway", func(n *node) string { return n.ns }}}
	for _, c := range clients {
		if err := dialOnce(t, c.ns(open), portShut); err != nil {
			t.Fatalf("no policy: %s to port %d: %v", c.name, portShut, err)
		}
		if err := dialOnce(t, c.ns(pol), portShut); err == nil {
			t.Fatalf("policy: %s to port %d, which is not allowed, connected", c.name, portShut)
		}
	}
	// Each round interleaves short slices on the two nodes (ABBA, twice)
	// so that both see the same noise of the shared machine.
	type tally struct{ n, secs float64 }
	type key struct {
		what string
		n    *node
	}
	var conns int
	ratios := map[string][]float64{}
	all := map[key]*tally{}
	add := func(m map[key]*tally, k key, n, secs float64) {
		if m[k] == nil {
			m[k] = &tally{}
		}
		m[k].n += n
		m[k].secs += secs
	}
	whats := []string{"TCP Mbit/s, pod a", "new connections/s, pod a", "new connections/s, gateway"}
	for r := range rounds {
		order := []*node{open, pol, pol, open, open, pol, pol, open}
		if r%2 == 1 {
			order = []*node{pol, open, open, pol, pol, open, open, pol}
		}
		round := map[key]*tally{}
		for _, n := range order {
			b, secs := stream(t, n, streamSlice)
			add(round, key{whats[0], n}, b/1e6, secs)
		}
		for i, c := range clients {
			for _, n := range order {
				got, secs := connect(t, c.ns(n), connSlice)
				add(round, key{whats[1+i], n}, float64(got), secs)
				if n == pol {
					conns += got
				}
			}
		}
		var line strings.Builder
		for _, w := range whats {
			o, p := round[key{w, open}], round[key{w, pol}]
			ratio := (p.n / p.secs) / (o.n / o.secs)
			ratios[w] = append(ratios[w], ratio)
			fmt.Fprintf(&line, "; %s %.0f / %.0f (ratio %.2f)", w, o.n/o.secs, p.n/p.secs, ratio)
			add(all, key{w, open}, o.n, o.secs)
			add(all, key{w, pol}, p.n, p.secs)
		}
		t.Logf("FIGURE members=%d traffic round %d, no policy / policy%s", members, r+1, line.String())
	}
	for _, w := range whats {
		o, p := all[key{w, open}], all[key{w, pol}]
		t.Logf("FIGURE members=%d traffic, policy / no policy, %s: rounds %.2f-%.2f, all rounds %.2f",
			members, w, slices.Min(ratios[w]), slices.Max(ratios[w]), (p.n/p.secs)/(o.n/o.secs))
	}

	// Every connection on the policy node opened through b's rule.
	cs, err := pol.dp.PolicyCounters()
	if err != nil {
		t.Fatal(err)
	}
	var through uint64
	for _, c := range cs {
		if c.Endpoint == "b" && c.Rule == 0 {
			through += c.Packets
		}
	}
	if through < uint64(conns) {
		t.Fatalf("b's ingress rule counted %d packets for %d connections", through, conns)
	}
}

func dumpVX(t *testing.T, n *node, members int) {
	t.Helper()
	k, err := nl.Open(testkit.Path(n.ns))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	c, err := flower.OpenPolicy(k)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	idx, err := strconv.Atoi(strings.TrimSpace(guest.In(t, n.ns, "/bin/cat", "/sys/class/net/"+offload.VXLANName+"/ifindex")))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	fs, err := c.Dump(idx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE members=%d one dump of %s (%d filters, every chain, decoded): %v", members, offload.VXLANName, len(fs), time.Since(start).Round(time.Millisecond))
}
