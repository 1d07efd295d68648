package offloadbench

import (
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/datapath/offload"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
	"github.com/skiff-sdn/skiff/test/kernelvm/guest"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// fleetSizes are the nodes TestFleetSize measures: the largest the
// offload datapath accepted while broadcast was copied by its rules (one
// pod, 10,000 remote endpoints behind 100 VTEPs: TestScale's, whose
// encap rule per remote endpoint TestScale installs in the same run),
// and a node of a fleet (250 pods on a network of 1,000 and of 5,000
// nodes, one endpoint on each).
var fleetSizes = []struct {
	name                   string
	locals, remotes, vteps int
}{
	{"scale", 1, 10000, 100},
	{"fleet1000", 250, 1000, 1000},
	{"fleet5000", 250, 5000, 5000},
}

// fleetVTEP is VTEP i of TestFleetSize (198.19.0.0/16, routed to a next
// hop that is never asked: its neighbour entry is permanent).
func fleetVTEP(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)}) }

// fleetRemote is remote endpoint i behind VTEP i%vteps.
func fleetRemote(i, vteps int) plan.Remote {
	return plan.Remote{Name: fmt.Sprintf("r%05d", i), Network: "blue", VTEP: fleetVTEP(i % vteps),
		MAC: fmt.Sprintf("02:42:00:00:%02x:%02x", byte(i>>8), byte(i)), IPs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 15)}}
}

// fleetNode makes namespace ns a node with locals pods (veths skfpNNN,
// their peers skfqNNN in the node too) and returns its plan with
// remotes remote endpoints behind vteps VTEPs, every VTEP in the
// network's flood list.
func fleetNode(t *testing.T, ns string, locals, remotes, vteps int) plan.Plan {
	t.Helper()
	guest.AddNetns(t, ns)
	run := func(args ...string) { guest.In(t, ns, args...) }
	run(guest.IP, "link", "add", "skfu0", "type", "dummy")
	run(guest.IP, "addr", "add", "192.0.2.1/24", "dev", "skfu0")
	run(guest.IP, "link", "set", "skfu0", "up")
	run(guest.IP, "neigh", "add", "192.0.2.2", "lladdr", "02:00:00:00:ee:02", "dev", "skfu0", "nud", "permanent")
	run(guest.IP, "route", "add", "198.19.0.0/16", "via", "192.0.2.2")
	var b strings.Builder
	for i := range locals {
		fmt.Fprintf(&b, "link add skfp%03d type veth peer name skfq%03d\nlink set skfp%03d alias skiff:ep:l%03d up\nlink set skfq%03d up\n", i, i, i, i, i)
	}
	batch := filepath.Join(t.TempDir(), "links.batch")
	if err := os.WriteFile(batch, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	run(guest.IP, "-batch", batch)
	p := plan.New("n1")
	p.UnderlayIP = netip.MustParseAddr("192.0.2.1")
	nw := plan.Network{Name: "blue", VNI: 100, MTU: 1450}
	for i := range vteps {
		nw.FloodVTEPs = append(nw.FloodVTEPs, fleetVTEP(i))
	}
	p.Networks["blue"] = nw
	for i := range locals {
		name := fmt.Sprintf("l%03d", i)
		p.Local[name] = plan.Endpoint{Name: name, Network: "blue", Kind: plan.KindVeth, MAC: fmt.Sprintf("02:00:00:01:%02x:%02x", byte(i>>8), byte(i)),
			IPs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, 200, byte(i)}), 15)}, VFIndex: -1}
	}
	for i := range remotes {
		r := fleetRemote(i, vteps)
		p.Remote[r.Name] = r
	}
	return p
}

// TestFleetSize measures the offload datapath with encap rules on
// demand (Options.Learn, the agent's default) at fleetSizes: the rules
// on a representor and in all, the install against tc -batch of the
// same filters (in a namespace of its own with the same devices), the
// process's RSS, a pair learnt (a frame sent through the node's bridge,
// then Learn: its encap rule alone), one remote endpoint added and
// removed, and one VTEP joining the network with its endpoint and
// leaving (a whole Apply: the network changed). Medians of changeRounds
// changes, the first beside.
//
//	hack/kernelvm/run.sh -v -bins "" -memory 6144 -timeout 60m -run 'TestScale$|TestFleetSize' ./test/kernelvm/offloadbench
func TestFleetSize(t *testing.T) {
	guest.Require(t)
	for i, size := range fleetSizes {
		t.Run(size.name, func(t *testing.T) {
			fleetSize(t, fmt.Sprintf("skfs%d", i), size.name+"_", size.locals, size.remotes, size.vteps)
		})
	}
}

func fleetSize(t *testing.T, ns, prefix string, locals, remotes, vteps int) {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	p := fleetNode(t, ns, locals, remotes, vteps)
	repOf := func(ep string) string { return "skfp" + strings.TrimPrefix(ep, "l") }
	dp, err := offload.New(offload.Options{Logger: log, NetNS: testkit.Path(ns), Learn: &offload.LearnOptions{},
		Representor: func(e plan.Endpoint) (offload.Port, bool) { return offload.Port{Rep: repOf(e.Name)}, true }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dp.Close)
	apply := func(p plan.Plan) time.Duration {
		t.Helper()
		start := time.Now()
		if err := dp.Apply(p); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}

	// Everything from nothing, then the steady state.
	install := apply(p)
	writes := dp.Writes()
	apply(p)
	rep0 := countIn(t, ns, "skfp000")
	// A local and an ARP rule per other pod, and chain 0's filter when
	// there is one of those: nothing per remote endpoint or VTEP.
	want := 2 * (locals - 1)
	if want > 0 {
		want++
	}
	if rep0 != want {
		t.Fatalf("a representor holds %d filters, want %d", rep0, want)
	}
	total := countIn(t, ns, offload.VXLANName)
	reps := map[string]string{}
	for ep := range p.Local {
		reps[ep] = repOf(ep)
		total += countIn(t, ns, repOf(ep))
	}
	rss := rssKiB()
	t.Logf("FIGURE %s%d pods, %d remote endpoints, %d VTEPs: %d filters on a representor, %d in all, installed in %v (%d writes), RSS %d KiB",
		prefix, locals, remotes, vteps, rep0, total, install.Round(time.Millisecond), writes, rss)
	figure(prefix+"rep_filters", rep0)
	figure(prefix+"filters", total)
	figure(prefix+"install_ms", install)
	figure(prefix+"rss_kib", rss)

	// The reference: tc -batch of the same filters in a namespace with
	// the same devices.
	ref := ns + "ref"
	guest.AddNetns(t, ref)
	var b strings.Builder
	b.WriteString("link add " + offload.VXLANName + " type vxlan external dstport 4789 nolearning\n")
	for ep := range p.Local {
		fmt.Fprintf(&b, "link add %s type veth peer name skfr%s\n", repOf(ep), strings.TrimPrefix(ep, "l"))
	}
	links := filepath.Join(t.TempDir(), "ref.links")
	if err := os.WriteFile(links, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	guest.In(t, ref, guest.IP, "-batch", links)
	rules, pol := compile(t, p, flower.Input{Reps: reps, VXLAN: offload.VXLANName, Sends: func(string) []string { return nil }})
	devs := map[string]bool{}
	for _, r := range rules {
		devs[r.Dev] = true
	}
	for _, r := range pol {
		devs[r.Dev] = true
	}
	file := batchFileOf(t, slices.Sorted(maps.Keys(devs)), rules, pol)
	start := time.Now()
	guest.In(t, ref, guest.TC, "-batch", file)
	refTook := time.Since(start)
	if n := len(rules) + len(pol); n != total {
		t.Fatalf("the reference has %d filters, the datapath installed %d", n, total)
	}
	t.Logf("FIGURE %stc -batch of the same %d filters: %v; the datapath's install (with its links, bridge and entries) took %.2f of it",
		prefix, total, refTook.Round(time.Millisecond), float64(install)/float64(refTook))
	figure(prefix+"tc_batch_ms", refTook)
	figure(prefix+"install_ratio_vs_tc_batch", float64(install)/float64(refTook))

	// Pairs learnt: pod l000 sends a frame to remote endpoint rN
	// through the node's bridge; Learn gives its representor that one
	// encap rule.
	pod := ns + "pod"
	guest.AddNetns(t, pod)
	guest.In(t, ns, guest.IP, "link", "set", "skfq000", "netns", pod)
	guest.In(t, pod, guest.IP, "link", "set", "skfq000", "address", p.Local["l000"].MAC, "up")
	var learns []time.Duration
	for i := range changeRounds + 1 {
		dst, err := net.ParseMAC(p.Remote[fmt.Sprintf("r%05d", i)].MAC)
		if err != nil {
			t.Fatal(err)
		}
		testkit.SendFrame(t, pod, "skfq000", dst, 0x88b5, []byte("skiff fleet learn"))
		w0 := dp.Writes()
		start := time.Now()
		again, err := dp.Learn()
		if err != nil {
			t.Fatal(err)
		}
		if again {
			// The representor's first forwarding rule (a pod alone on
			// the node): its way in from chain 0 comes with it, in a
			// whole Apply.
			apply(p)
		}
		took := time.Since(start)
		if w := dp.Writes() - w0; w != 1 && !again {
			t.Fatalf("pair %d: Learn wrote %d times, want 1 (its encap rule)", i, w)
		}
		learns = append(learns, took)
	}
	want = rep0 + changeRounds + 1
	if rep0 == 0 {
		want++ // chain 0's
	}
	if n := countIn(t, ns, "skfp000"); n != want {
		t.Fatalf("after %d pairs learnt the representor holds %d filters, want %d", changeRounds+1, n, want)
	}
	t.Logf("FIGURE %sa pair learnt (Learn: the set read, one encap rule written): first %v, median %v",
		prefix, learns[0].Round(10*time.Microsecond), median(learns[1:]).Round(10*time.Microsecond))
	figure(prefix+"learn_first_ms", learns[0])
	figure(prefix+"learn_median_ms", median(learns[1:]))

	// One remote endpoint added and removed; one VTEP joining with its
	// endpoint and leaving.
	changes := func(name string, change func(q *plan.Plan, i int)) {
		var add, del []time.Duration
		for i := range changeRounds + 1 {
			q := p.Clone()
			change(&q, i)
			w0 := dp.Writes()
			add = append(add, apply(q))
			w1 := dp.Writes()
			del = append(del, apply(p))
			if i == 0 {
				t.Logf("FIGURE %s%s: %d writes, back %d", prefix, name, w1-w0, dp.Writes()-w1)
			}
		}
		t.Logf("FIGURE %s%s: first %v, median %v; back: first %v, median %v", prefix, name,
			add[0].Round(10*time.Microsecond), median(add[1:]).Round(10*time.Microsecond),
			del[0].Round(10*time.Microsecond), median(del[1:]).Round(10*time.Microsecond))
		figure(prefix+name+"_first_ms", add[0])
		figure(prefix+name+"_median_ms", median(add[1:]))
		figure(prefix+name+"_back_median_ms", median(del[1:]))
	}
	changes("endpoint_add", func(q *plan.Plan, i int) {
		r := fleetRemote(remotes+i, vteps)
		q.Remote[r.Name] = r
	})
	changes("vtep_join", func(q *plan.Plan, i int) {
		r := fleetRemote(remotes+i, vteps)
		r.VTEP = fleetVTEP(vteps + i)
		q.Remote[r.Name] = r
		n := q.Networks["blue"]
		n.FloodVTEPs = append(n.FloodVTEPs, r.VTEP)
		q.Networks["blue"] = n
	})
	t.Logf("FIGURE %sRSS after the changes %d KiB", prefix, rssKiB())
}
