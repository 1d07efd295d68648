// Package offloadbench measures the offload datapath in the kernel VM
// (software tc: netdevsim offloads no flower): how fast a node's rules for
// 10,000 remote endpoints are installed, and how long one endpoint change
// takes on a node that holds them (TestScale); the same for a
// NetworkPolicy whose peer is a group of 1,000 and 10,000 addresses, and
// what the policy costs real traffic (TestPolicy, policy_test.go). Both
// compare with iproute2's tc -batch installing the same filters. They
// assert what the rules are, never how fast; the figures are in
// docs/performance.md, every run in docs/perf-log/offload.md.
//
//	hack/kernelvm/run.sh -v -bins "" -timeout 20m ./test/kernelvm/offloadbench
package offloadbench

import (
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/datapath/offload"
	"github.com/skiff-sdn/skiff/internal/nl/tc"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

const (
	endpoints = 10000
	vteps     = 100
)

func in(t testing.TB, args ...string) string { t.Helper(); return guest.In(t, "skbench", args...) }

func count(t testing.TB, dev string) int { t.Helper(); return countIn(t, "skbench", dev) }

func remote(i int) plan.Remote {
	// Tenant addresses in the benchmarking range (no packet is sent).
	ip := netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
	return plan.Remote{Name: fmt.Sprintf("r%05d", i), Network: "blue", VTEP: netip.AddrFrom4([4]byte{203, 0, 113, byte(1 + i%vteps)}),
		MAC: fmt.Sprintf("02:42:00:00:%02x:%02x", byte(i>>8), byte(i)), IPs: []netip.Prefix{netip.PrefixFrom(ip, 15)}}
}

// scalePlan is the plan of node n1 with one local endpoint (pod) and
// 10,000 remote endpoints.
func scalePlan() plan.Plan { return scalePlanOf(endpoints) }

// scalePlanOf is scalePlan with n remote endpoints.
func scalePlanOf(n int) plan.Plan {
	p := plan.New("n1")
	p.Revision = 1 // changes come as the agent makes them: follow
	p.UnderlayIP = netip.MustParseAddr("192.0.2.1")
	nw := plan.Network{Name: "blue", VNI: 100, MTU: 1450}
	for i := range 15 { // the kernel's action limit allows 15 VTEPs of broadcast fan-out
		nw.FloodVTEPs = append(nw.FloodVTEPs, netip.AddrFrom4([4]byte{203, 0, 113, byte(1 + i)}))
	}
	p.Networks["blue"] = nw
	p.Local["pod"] = plan.Endpoint{Name: "pod", Network: "blue", Kind: plan.KindVeth, MAC: "02:00:00:00:00:0a",
		IPs: []netip.Prefix{netip.MustParsePrefix("198.51.100.10/24")}, VFIndex: -1}
	for i := range n {
		r := remote(i)
		p.Remote[r.Name] = r
	}
	return p
}

// scaleNode makes namespace ns a node with one local endpoint (a veth
// standing in for its representor, skpbench) and 10,000 remote endpoints,
// and returns its plan and datapath (closed at the test's end).
func scaleNode(t *testing.T, ns string, log *slog.Logger) (plan.Plan, *offload.Datapath) {
	return scaleNodeOf(t, ns, log, endpoints)
}

// scaleNodeOf is scaleNode with n remote endpoints.
func scaleNodeOf(t *testing.T, ns string, log *slog.Logger, n int) (plan.Plan, *offload.Datapath) {
	guest.AddNetns(t, ns)
	run := func(args ...string) { guest.In(t, ns, args...) }
	run(guest.IP, "link", "add", "skbu0", "type", "dummy")
	run(guest.IP, "addr", "add", "192.0.2.1/24", "dev", "skbu0")
	run(guest.IP, "link", "set", "skbu0", "up")
	run(guest.IP, "route", "add", "203.0.113.0/24", "via", "192.0.2.2")
	run(guest.IP, "link", "add", "skpbench", "type", "veth", "peer", "name", "skbpeer")
	run(guest.IP, "link", "set", "skpbench", "alias", "skiff:ep:pod", "up")
	dp, err := offload.New(offload.Options{Logger: log, NetNS: testkit.Path(ns),
		Representor: func(plan.Endpoint) (offload.Port, bool) { return offload.Port{Rep: "skpbench"}, true }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dp.Close)
	return scalePlanOf(n), dp
}

// oneSocketRate is the install rate of TestWriteModes' modes (none when
// it did not run), which TestScale compares with its tc -batch.
var oneSocketRate = map[string]float64{}

// unwatchedRate is the rate of TestWriteModes/tc_batch_unwatched (0 when
// it did not run).
var unwatchedRate float64

// TestWriteModes installs the node of TestScale with simpler writers:
// waiting for each request's answer (serial), pipelined over one socket
// with the watch reading the datapath's own notifications
// (one_socket_read_own), and over one socket with the kernel dropping
// them (one_socket); what pipelining, the dropped notifications and the
// parallel sockets gain.
// It runs before TestScale; each namespace (datapath closed first) is
// deleted when its subtest ends, freeing the filters. tc_batch_unwatched
// is TestScale's reference in a namespace where nobody subscribes to tc
// notifications: what the kernel's notification of each filter to the
// datapath's watch costs tc -batch in TestScale.
func TestWriteModes(t *testing.T) {
	guest.Require(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for _, mode := range []struct {
		name      string
		pipelined bool
		writers   int
		dropOwn   bool
	}{{"serial", false, 1, false}, {"one_socket_read_own", true, 1, false}, {"one_socket", true, 1, true}} {
		t.Run(mode.name, func(t *testing.T) {
			pipelined, writers, dropOwn := flower.Pipelined, flower.Writers, tc.DropOwn
			flower.Pipelined, flower.Writers, tc.DropOwn = mode.pipelined, mode.writers, mode.dropOwn
			p, dp := scaleNode(t, "skbench1", log)
			flower.Pipelined, flower.Writers, tc.DropOwn = pipelined, writers, dropOwn
			start := time.Now()
			if err := dp.Apply(p); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			total := countIn(t, "skbench1", "skpbench") + countIn(t, "skbench1", offload.VXLANName)
			// The representor's encap per remote endpoint and chain 0's;
			// the VXLAN device's decap, ARP and chain 0's.
			if want := endpoints + 1 + 3; total != want {
				t.Fatalf("%d rules, want %d", total, want)
			}
			rate := float64(total) / took.Seconds()
			t.Logf("FIGURE install, %s: %d rules in %v: %.0f rules/s", mode.name, total, took.Round(time.Millisecond), rate)
			figure("install_"+mode.name+"_ms", took)
			figure("install_"+mode.name+"_rules_per_s", rate)
			oneSocketRate[mode.name] = rate
		})
	}
	// Profiles (the host keeps them with run.sh -keep): a whole install
	// over one socket and over the default writers.
	for _, writers := range []int{1, flower.Writers} {
		t.Run(fmt.Sprintf("profile_writers=%d", writers), func(t *testing.T) {
			saved := flower.Writers
			flower.Writers = writers
			p, dp := scaleNode(t, "skbench1", log)
			flower.Writers = saved
			profile(t, fmt.Sprintf("install-writers%d", writers), 1, func() {
				if err := dp.Apply(p); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
	t.Run("tc_batch_unwatched", func(t *testing.T) {
		const ns = "skbench2"
		guest.AddNetns(t, ns)
		guest.In(t, ns, guest.IP, "link", "add", "skbtc", "type", "veth", "peer", "name", "skbtcpeer")
		guest.In(t, ns, guest.IP, "link", "add", offload.VXLANName, "type", "vxlan", "external", "nolearning", "dstport", strconv.Itoa(flower.VXLANPort))
		file, nrules := batchFile(t, scalePlan(), "skbtc")
		start := time.Now()
		guest.In(t, ns, guest.TC, "-batch", file)
		took := time.Since(start)
		if got := countIn(t, ns, "skbtc"); got != nrules {
			t.Fatalf("tc -batch installed %d of %d rules", got, nrules)
		}
		t.Logf("FIGURE tc -batch, no tc subscriber in its namespace: %d rules in %v: %.0f rules/s", nrules, took.Round(time.Millisecond), float64(nrules)/took.Seconds())
		figure("tc_batch_unwatched_rules_per_s", float64(nrules)/took.Seconds())
		unwatchedRate = float64(nrules) / took.Seconds()
	})
}

// batchFile writes the tc -batch file installing plan p's representor
// rules on dev (its clsact, the forwarding rules in their chain and chain
// 0's filter to it, from the same compiled rules as the datapath's) and
// returns its path and how many filters it adds.
func batchFile(t *testing.T, p plan.Plan, dev string) (string, int) {
	t.Helper()
	rules, pol := compile(t, p, flower.Input{Reps: map[string]string{"pod": dev}, VXLAN: offload.VXLANName})
	var b strings.Builder
	b.WriteString("qdisc add dev " + dev + " clsact\n")
	nrules := 0
	for _, r := range pol {
		if r.Dev == dev {
			nrules++
			batchPolicy(t, &b, r)
		}
	}
	for _, r := range rules {
		if r.Dev == dev {
			nrules++
			batchRule(t, &b, r)
		}
	}
	file := filepath.Join(t.TempDir(), "rules.tc")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return file, nrules
}

func TestScale(t *testing.T) {
	guest.Require(t)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	p, dp := scaleNode(t, "skbench", log)
	in(t, guest.IP, "link", "add", "skbtc", "type", "veth", "peer", "name", "skbtcpeer")

	// 1. Everything from nothing.
	w0, m0 := dp.Writes(), dp.TCMessages()
	start := time.Now()
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	full := time.Since(start)
	installed := dp.Writes() - w0
	installMsgs := dp.TCMessages() - m0
	repRules := count(t, "skpbench")
	// encap per remote, in the forwarding chain, and chain 0's filter
	// sending everything there (no policy: no conntrack); broadcast,
	// and ARP for the remote endpoints, are the replication bridge's.
	if want := endpoints + 1; repRules != want {
		t.Fatalf("representor holds %d rules, want %d", repRules, want)
	}
	// Decap and ARP for the local endpoint, and chain 0's.
	vxRules := count(t, offload.VXLANName)
	if want := 2 + 1; vxRules != want {
		t.Fatalf("%s holds %d rules, want %d", offload.VXLANName, vxRules, want)
	}
	total := repRules + vxRules
	t.Logf("FIGURE install: %d rules (%d writes incl. device and qdiscs) for %d remote endpoints in %v: %.0f rules/s",
		total, installed, endpoints, full.Round(time.Millisecond), float64(total)/full.Seconds())
	figure("install_rules", total)
	figure("install_ms", full)
	figure("install_rules_per_s", float64(total)/full.Seconds())
	figure("install_tc_msgs", installMsgs)
	figure("rss_kib", rssKiB())

	// 2. Nothing changed.
	w0, m0 = dp.Writes(), dp.TCMessages()
	start = time.Now()
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	idle := time.Since(start)
	if w := dp.Writes() - w0; w != 0 {
		t.Fatalf("re-apply wrote %d times", w)
	}
	t.Logf("FIGURE re-apply, nothing changed, %d rules: %v, 0 writes", total, idle.Round(time.Millisecond))
	figure("reapply_ms", idle)
	figure("reapply_tc_msgs", dp.TCMessages()-m0)
	// The first re-apply lists the links again when the install's own
	// link changes were announced after its last listing (the VXLAN
	// device's operational state comes later); the next ones, with no
	// link change since, do not.
	const more = 10
	w0, m0 = dp.Writes(), dp.TCMessages()
	start = time.Now()
	for range more {
		if err := dp.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	next := time.Since(start) / more
	if w := dp.Writes() - w0; w != 0 {
		t.Fatalf("re-applies wrote %d times", w)
	}
	t.Logf("FIGURE %d more re-applies, nothing changed: %v each, %d tc messages in all", more, next, dp.TCMessages()-m0)
	figure("reapply_next_ms", next)
	figure("reapply_next_tc_msgs", dp.TCMessages()-m0)

	// Counters: the state and counters of every rule, read now.
	m0 = dp.TCMessages()
	start = time.Now()
	read := 0
	for _, ss := range dp.Rules() {
		read += len(ss)
	}
	took := time.Since(start)
	if want := total - 2; read != want { // chain 0's filters are the policy programmer's
		t.Fatalf("read %d rules' counters, want %d", read, want)
	}
	t.Logf("FIGURE counters of %d rules read in %v", read, took.Round(time.Millisecond))
	figure("counters_read_ms", took)
	figure("counters_read_tc_msgs", dp.TCMessages()-m0)

	// 3. One endpoint change each: added, moved to another VTEP, deleted.
	firstChanges(t, dp, &p, "", total)

	// The same again, changeRounds times (another endpoint added, r00042
	// moved back and forth, the added one deleted): the median of each
	// (the figures above are the first change of each kind).
	times := map[string][]time.Duration{}
	parts := phaseTimes{}
	extra := remote(endpoints + 1)
	for i := range changeRounds {
		r := p.Remote["r00042"]
		r.VTEP = netip.AddrFrom4([4]byte{203, 0, 113, byte(201 + i%2)})
		for _, step := range []struct {
			figure string
			d      plan.Delta
		}{
			{"endpoint_add", plan.Delta{UpsertRemote: []plan.Remote{extra}}},
			{"endpoint_move", plan.Delta{UpsertRemote: []plan.Remote{r}}},
			{"endpoint_delete", plan.Delta{RemoveRemote: []string{extra.Name}}},
		} {
			follow(t, &p, step.d)
			w0 := dp.Writes()
			start = time.Now()
			if err := dp.Apply(p); err != nil {
				t.Fatal(err)
			}
			times[step.figure] = append(times[step.figure], time.Since(start))
			parts.add(step.figure, dp)
			if w, want := dp.Writes()-w0, changeWrites[step.figure]; w != want {
				t.Fatalf("%s, round %d: %d writes, want %d", step.figure, i, w, want)
			}
		}
	}
	for _, name := range []string{"endpoint_add", "endpoint_move", "endpoint_delete"} {
		t.Logf("FIGURE %s, median of %d more rounds: %v", name, changeRounds, median(times[name]))
		figure(name+"_p50_ms", median(times[name]))
		parts.report(t, name)
	}

	// Drift: one filter deleted by hand (iproute2) is put back by the
	// next Apply, which writes that filter alone (told by the tc
	// notification which filter it was: the device is not read).
	var victim flower.State
	for _, s := range dp.Rules()["pod"] {
		if s.Rule.Kind == flower.KindEncap && s.Rule.Dev == "skpbench" {
			victim = s
			break
		}
	}
	if victim.Handle == 0 {
		t.Fatal("no encap rule with a handle on skpbench")
	}
	in(t, guest.TC, "filter", "del", "dev", "skpbench", "ingress", "chain", fmt.Sprint(flower.ChainForward), "prio", fmt.Sprint(victim.Rule.Prio),
		"handle", fmt.Sprintf("%#x", victim.Handle), "protocol", "all", "flower")
	w0, m0 = dp.Writes(), dp.TCMessages()
	drift0 := dp.Drift()
	start = time.Now()
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	took = time.Since(start)
	if w, d := dp.Writes()-w0, dp.Drift()-drift0; w != 1 || d != 1 {
		t.Fatalf("repairing a filter deleted by hand: %d writes, %d devices seen changed; want 1 and 1", w, d)
	}
	if got := count(t, "skpbench"); got != repRules { // one remote endpoint added, one deleted: as installed
		t.Fatalf("after the repair skpbench holds %d filters, want %d", got, repRules)
	}
	t.Logf("FIGURE repair of a filter deleted by hand on a device of %d filters: %v (1 write)", repRules, took.Round(time.Millisecond))
	figure("repair_ms", took)
	figure("repair_tc_msgs", dp.TCMessages()-m0)
	t.Logf("FIGURE repair, parts (ms): %s", phaseFigures("repair", dp))

	// One filter altered by hand (replaced at its handle with a drop):
	// the next Apply replaces it again, at the same handle.
	var altered flower.State
	for _, s := range dp.Rules()["pod"] {
		if s.Rule.Kind == flower.KindEncap && s.Rule.Dev == "skpbench" && s.Handle != victim.Handle {
			altered = s
			break
		}
	}
	where := []string{"dev", "skpbench", "ingress", "chain", fmt.Sprint(flower.ChainForward), "prio", fmt.Sprint(altered.Rule.Prio),
		"handle", fmt.Sprintf("%#x", altered.Handle), "protocol", "all"}
	in(t, append(append([]string{guest.TC, "filter", "replace"}, where...), "flower", "dst_mac", altered.Rule.Match.DstMAC, "action", "drop")...)
	w0, m0 = dp.Writes(), dp.TCMessages()
	drift0 = dp.Drift()
	start = time.Now()
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	took = time.Since(start)
	if w, d := dp.Writes()-w0, dp.Drift()-drift0; w != 1 || d != 1 {
		t.Fatalf("repairing a filter altered by hand: %d writes, %d devices seen changed; want 1 and 1", w, d)
	}
	if out := in(t, append([]string{guest.TC, "filter", "show"}, where...)...); !strings.Contains(out, "tunnel_key") || strings.Contains(out, "gact action drop") {
		t.Fatalf("after the repair, the filter altered by hand is\n%s", out)
	}
	t.Logf("FIGURE repair of a filter altered by hand on a device of %d filters: %v (1 write); parts (ms): %s", repRules, took.Round(10*time.Microsecond),
		phaseFigures("repair_altered", dp))
	figure("repair_altered_ms", took)
	figure("repair_altered_tc_msgs", dp.TCMessages()-m0)

	// Profiles (only when the VM run keeps files): the steps above again.
	apply := func() {
		if err := dp.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	profile(t, "reapply", 50, apply)
	profile(t, "counters", 3, func() { dp.Rules() })
	profile(t, "endpoint", 20, func() {
		follow(t, &p, plan.Delta{UpsertRemote: []plan.Remote{extra}})
		apply()
		r := p.Remote["r00042"]
		r.VTEP = netip.AddrFrom4([4]byte{203, 0, 113, byte(201 + int(r.VTEP.As4()[3])%2)})
		follow(t, &p, plan.Delta{UpsertRemote: []plan.Remote{r}})
		apply()
		follow(t, &p, plan.Delta{RemoveRemote: []string{extra.Name}})
		apply()
	})

	// Reference: iproute2 installing the same representor rules with
	// tc -batch (one process, one netlink socket) on another device of
	// this namespace, where the datapath's watch is subscribed to tc
	// notifications (so the kernel builds one per filter for both).
	file, nrules := batchFile(t, p, "skbtc")
	if nrules != repRules {
		t.Fatalf("the reference has %d rules for the representor, the datapath installed %d", nrules, repRules)
	}
	start = time.Now()
	in(t, guest.TC, "-batch", file)
	ref := time.Since(start)
	if got := count(t, "skbtc"); got != nrules {
		t.Fatalf("tc -batch installed %d of %d rules", got, nrules)
	}
	ratio := float64(total) / full.Seconds() / (float64(nrules) / ref.Seconds())
	t.Logf("FIGURE reference tc -batch: %d rules in %v: %.0f rules/s (the datapath's rate is %.2f of it)", nrules, ref.Round(time.Millisecond),
		float64(nrules)/ref.Seconds(), ratio)
	figure("tc_batch_ms", ref)
	figure("tc_batch_rules_per_s", float64(nrules)/ref.Seconds())
	figure("install_ratio_vs_tc_batch", ratio)
	if unwatchedRate > 0 {
		// The conservative ratio: tc -batch where nobody reads its
		// notifications (the datapath's watch does here).
		r := float64(total) / full.Seconds() / unwatchedRate
		t.Logf("FIGURE the datapath's install rate against tc -batch with no tc subscriber (TestWriteModes): %.2f", r)
		figure("install_ratio_vs_tc_batch_unwatched", r)
	}
	for _, mode := range slices.Sorted(maps.Keys(oneSocketRate)) {
		r1 := oneSocketRate[mode] / (float64(nrules) / ref.Seconds())
		t.Logf("FIGURE the same install, %s (TestWriteModes): %.2f of tc -batch", mode, r1)
		figure("install_"+mode+"_ratio_vs_tc_batch", r1)
	}
	start = time.Now()
	out := in(t, guest.TC, "-s", "filter", "show", "dev", "skbtc", "ingress")
	show := time.Since(start)
	t.Logf("FIGURE reference tc -s filter show of %d rules: %v (%d bytes of output)", nrules, show.Round(time.Millisecond), len(out))
	figure("tc_show_ms", show)
}

// changeWrites are the writes of one remote endpoint's change: its
// encap rule, and in the replication bridge its neighbour and its two
// entries (bridge, VXLAN device); a move to another VTEP keeps the
// neighbour and the bridge's entry and moves the VXLAN device's
// (deleted, added).
var changeWrites = map[string]int{"endpoint_add": 4, "endpoint_move": 3, "endpoint_delete": 4}

// firstChanges makes the first remote endpoint changes on the node of
// dp, holding total rules and the plan *p (of scalePlanOf(n), installed):
// r(n) added, r00042 moved to a VTEP new to the node, r00007 deleted;
// each timed (figures prefix+"endpoint_add" and so on), with the parts
// of its Apply.
func firstChanges(t *testing.T, dp *offload.Datapath, p *plan.Plan, prefix string, total int) {
	t.Helper()
	added := remote(len(p.Remote))
	for _, step := range []struct {
		name, figure string
		change       func()
		writes       int
		nextHops     int // underlay next hops looked up: VTEPs new to the node only
	}{
		{"add one remote endpoint", "endpoint_add", func() { follow(t, p, plan.Delta{UpsertRemote: []plan.Remote{added}}) }, changeWrites["endpoint_add"], 0},
		{"move one remote endpoint to another VTEP", "endpoint_move", func() {
			r := p.Remote["r00042"]
			r.VTEP = netip.MustParseAddr("203.0.113.200")
			follow(t, p, plan.Delta{UpsertRemote: []plan.Remote{r}})
		}, changeWrites["endpoint_move"], 1},
		{"delete one remote endpoint", "endpoint_delete", func() { follow(t, p, plan.Delta{RemoveRemote: []string{"r00007"}}) }, changeWrites["endpoint_delete"], 0},
	} {
		step.change()
		w0, m0 := dp.Writes(), dp.TCMessages()
		h0, g0 := dp.NextHops(), gcs()
		at := time.Since(started)
		start := time.Now()
		if err := dp.Apply(*p); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		name := prefix + step.figure
		figure(name+"_gcs", gcs()-g0)
		if w := dp.Writes() - w0; w != step.writes {
			t.Fatalf("%s: %d writes, want %d", step.name, w, step.writes)
		}
		if n := dp.NextHops() - h0; n != step.nextHops {
			t.Errorf("%s: %d underlay next hops looked up, want %d", step.name, n, step.nextHops)
		}
		t.Logf("FIGURE %s%s on a node with %d rules: %v (%d writes), from %.3fs of the process; parts (ms): %s", prefix, step.name, total,
			took.Round(10*time.Microsecond), step.writes, at.Seconds(), phaseFigures(name, dp))
		figure(name+"_ms", took)
		figure(name+"_tc_msgs", dp.TCMessages()-m0)
	}
}

// follow makes *p the plan at the next revision by d, as the agent does
// with the controller's deltas (a clone, plan.Follow): the datapath finds
// what changed in p.Recent.
func follow(t testing.TB, p *plan.Plan, d plan.Delta) {
	t.Helper()
	q := p.Clone()
	d.Node, d.From, d.Revision = p.Node, p.Revision, p.Revision+1
	if err := q.Follow(d); err != nil {
		t.Fatal(err)
	}
	*p = q
}
