package offload

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/nl/nltest"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
)

// encapTo lists the devices holding a filter for dst's MAC among devs.
func encapTo(ns *nltest.NS, dst string, devs ...string) []string {
	var out []string
	for _, d := range devs {
		for _, f := range ns.Filters(d) {
			if f.Match.DstMAC.String() == dst {
				out = append(out, d)
			}
		}
	}
	return out
}

// Encap rules on demand, on the fake: a representor gets an encap rule
// for a remote endpoint once the replication bridge learnt that its
// endpoint sends to it (one write), kept across a restart (nothing
// written), gone with the remote endpoint and when idle.
func TestLearnFake(t *testing.T) {
	state := filepath.Join(t.TempDir(), "sends.json")
	ports := map[string]Port{"a": {Rep: "pf0vf0"}, "b": {Rep: "pf0vf1"}, "c": {Rep: "pf0vf2"}}
	w, k, dp := offloadNodeWith(t, ports, &LearnOptions{State: state})
	ns := w.NS("")
	a := local("a", "blue", "02:00:00:00:00:0a", "198.51.100.10/24")
	b := local("b", "blue", "02:00:00:00:00:0b", "198.51.100.11/24")
	r1 := remote("r1", "02:00:00:00:00:01", "198.51.100.5/24", vtep2)
	r2 := remote("r2", "02:00:00:00:00:02", "198.51.100.6/24", vtep3)
	p := offloadPlan([]plan.Network{blueNet}, []plan.Endpoint{a, b}, r1, r2)
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	if got := encapTo(ns, r1.MAC, "pf0vf0", "pf0vf1"); len(got) != 0 {
		t.Fatalf("encap rules for r1 before anything was sent: %v", got)
	}
	if ts, err := k.Tables(nl.NftBridge); err != nil || !slices.Contains(ts, LearnTable) {
		t.Fatalf("bridge tables %v (%v), want %s", ts, err, LearnTable)
	}
	learn := func(wantWrites int) {
		t.Helper()
		w0 := dp.Writes()
		apply, err := dp.Learn()
		if err != nil || apply {
			t.Fatalf("Learn() = %v, %v", apply, err)
		}
		if got := dp.Writes() - w0; got != wantWrites {
			t.Errorf("Learn wrote %d times, want %d", got, wantWrites)
		}
	}
	saved := func(want map[string][]string) {
		t.Helper()
		b, err := os.ReadFile(state)
		if err != nil {
			t.Fatal(err)
		}
		var s learnState
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		if len(s.Sends) != len(want) {
			t.Errorf("state file %s, want %v", b, want)
		}
		for ep, names := range want {
			if !slices.Equal(s.Sends[ep], names) {
				t.Errorf("state file %s, want %v", b, want)
			}
		}
	}
	// a sent to r1 through the bridge; frames to a MAC no remote
	// endpoint has, and from a port that is no endpoint's, teach nothing.
	ns.Learn(nl.NftBridge, LearnTable, learnSet, "pf0vf0", r1.MAC)
	ns.Learn(nl.NftBridge, LearnTable, learnSet, "pf0vf0", "02:00:00:00:99:99")
	ns.Learn(nl.NftBridge, LearnTable, learnSet, "pf0vf3", r2.MAC)
	// The first Apply made the bridge: it was not the steady state a
	// change is made alone from, so Learn asks for a whole Apply.
	if apply, err := dp.Learn(); err != nil || !apply {
		t.Fatalf("Learn() after the first Apply = %v, %v; want a whole Apply asked for", apply, err)
	}
	saved(map[string][]string{"a": {"r1"}})
	w0 := dp.Writes()
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	if got := dp.Writes() - w0; got != 1 {
		t.Errorf("the Apply after learning wrote %d times, want 1 (the encap rule)", got)
	}
	if got := encapTo(ns, r1.MAC, "pf0vf0", "pf0vf1"); !slices.Equal(got, []string{"pf0vf0"}) {
		t.Errorf("encap rules for r1 on %v, want pf0vf0 alone", got)
	}
	if got := encapTo(ns, r2.MAC, "pf0vf0", "pf0vf1"); len(got) != 0 {
		t.Errorf("encap rules for r2 on %v, want none", got)
	}
	learn(0)
	// In the steady state a pair costs its rule alone.
	ns.Learn(nl.NftBridge, LearnTable, learnSet, "pf0vf1", r2.MAC)
	learn(1)
	if got := encapTo(ns, r2.MAC, "pf0vf0", "pf0vf1"); !slices.Equal(got, []string{"pf0vf1"}) {
		t.Errorf("encap rules for r2 on %v, want pf0vf1 alone", got)
	}
	saved(map[string][]string{"a": {"r1"}, "b": {"r2"}})
	w0 = dp.Writes()
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	if got := dp.Writes() - w0; got != 0 {
		t.Errorf("the same plan again wrote %d times", got)
	}
	rules := dp.Rules()["a"]
	if !slices.ContainsFunc(rules, func(s flower.State) bool { return s.Rule.Match.DstMAC == r1.MAC && s.State != "" }) {
		t.Errorf("a's rule states hold no installed rule for r1: %+v", rules)
	}

	if pairs, learnt, idle := dp.LearnStats(); pairs != 2 || learnt != 2 || idle != 0 {
		t.Errorf("LearnStats() = %d, %d, %d; want 2 pairs, 2 learnt, 0 idle", pairs, learnt, idle)
	}

	// A restarted datapath compiles the learnt rule from the state file
	// and writes nothing.
	dp.Close()
	k2 := w.MustOpen(t, "")
	dp2, err := New(Options{Kernel: k2, Open: w.Open, Representor: func(e plan.Endpoint) (Port, bool) {
		port, ok := ports[e.Name]
		return port, ok
	}, Learn: &LearnOptions{State: state}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dp2.Close)
	dp = dp2
	if err := dp.Apply(p); err != nil {
		t.Fatal(err)
	}
	if got := dp.Writes(); got != 0 {
		t.Errorf("the restarted datapath's Apply wrote %d times", got)
	}
	if got := encapTo(ns, r1.MAC, "pf0vf0", "pf0vf1"); !slices.Equal(got, []string{"pf0vf0"}) {
		t.Errorf("after a restart, encap rules for r1 on %v, want pf0vf0 alone", got)
	}

	// r1 leaves: its rule and its pair go.
	if err := dp.Apply(offloadPlan([]plan.Network{blueNet}, []plan.Endpoint{a, b}, r2)); err != nil {
		t.Fatal(err)
	}
	if got := encapTo(ns, r1.MAC, "pf0vf0", "pf0vf1"); len(got) != 0 {
		t.Errorf("r1 left, its encap rules are on %v", got)
	}
	saved(map[string][]string{"b": {"r2"}})

	// b's rule for r2 carries nothing for Idle and is removed.
	clock := time.Now()
	dp.learn.now = func() time.Time { return clock }
	// The set's pairs expire (learnTimeout) long before a rule is idle.
	if _, err := k2.DeleteSetElements(nl.NftBridge, LearnTable, learnSet, []nl.NftElement{
		{IfName: "pf0vf0", MAC: r1.MAC}, {IfName: "pf0vf0", MAC: "02:00:00:00:99:99"}, {IfName: "pf0vf3", MAC: r2.MAC}, {IfName: "pf0vf1", MAC: r2.MAC}}); err != nil {
		t.Fatal(err)
	}
	learn(0)
	clock = clock.Add(time.Minute)
	learn(0)
	clock = clock.Add(5 * time.Minute)
	learn(1)
	if got := encapTo(ns, r2.MAC, "pf0vf0", "pf0vf1"); len(got) != 0 {
		t.Errorf("an idle rule stays on %v", got)
	}
	saved(map[string][]string{})
	if pairs, learnt, idle := dp.LearnStats(); pairs != 0 || learnt != 0 || idle != 1 {
		t.Errorf("LearnStats() = %d, %d, %d; want 0 pairs, 0 learnt, 1 idle", pairs, learnt, idle)
	}

	// A network refused on this node (a remote endpoint of it behind an
	// IPv6 VTEP) learns nothing: its frames take the bridge for good.
	c := local("c", "red", "02:00:00:00:00:0c", "203.0.113.10/24")
	rr := remote("rr", "02:00:00:00:00:1b", "203.0.113.11/24", vtep2)
	rx := remote("rx", "02:00:00:00:00:1c", "203.0.113.20/24", netip.MustParseAddr("2001:db8::2"))
	rr.Network, rx.Network = "red", "red"
	p = offloadPlan([]plan.Network{blueNet, redNet}, []plan.Endpoint{a, b, c}, r2, rr, rx)
	for range 2 {
		if err := dp.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	ns.Learn(nl.NftBridge, LearnTable, learnSet, "pf0vf2", rr.MAC)
	learn(0)
	if got := encapTo(ns, rr.MAC, "pf0vf0", "pf0vf1", "pf0vf2"); len(got) != 0 {
		t.Errorf("a refused network's endpoint got encap rules on %v", got)
	}
	if pairs, _, _ := dp.LearnStats(); pairs != 0 {
		t.Errorf("%d pairs learnt of a refused network", pairs)
	}
}

// A state file that does not decode is logged and the datapath starts
// with no pairs; the next pair learnt replaces the file.
func TestLearnStateCorrupt(t *testing.T) {
	state := filepath.Join(t.TempDir(), "sends.json")
	if err := os.WriteFile(state, []byte(`{"sends": {"a": ["r1"`), 0o600); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	ports := map[string]Port{"a": {Rep: "pf0vf0"}, "b": {Rep: "pf0vf1"}}
	w, _, dp := offloadNodeLogged(t, ports, &LearnOptions{State: state}, slog.New(slog.NewTextHandler(&logged, nil)))
	ns := w.NS("")
	if !strings.Contains(logged.String(), "learnt pairs not decoded") || !strings.Contains(logged.String(), state) {
		t.Errorf("log %q names neither the failure nor the file", logged.String())
	}
	if pairs, _, _ := dp.LearnStats(); pairs != 0 {
		t.Errorf("%d pairs from a corrupt state file", pairs)
	}
	a := local("a", "blue", "02:00:00:00:00:0a", "198.51.100.10/24")
	r1 := remote("r1", "02:00:00:00:00:01", "198.51.100.5/24", vtep2)
	p := offloadPlan([]plan.Network{blueNet}, []plan.Endpoint{a}, r1)
	for range 2 {
		if err := dp.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	if got := encapTo(ns, r1.MAC, "pf0vf0"); len(got) != 0 {
		t.Errorf("encap rules for r1 on %v before anything was sent", got)
	}
	ns.Learn(nl.NftBridge, LearnTable, learnSet, "pf0vf0", r1.MAC)
	if apply, err := dp.Learn(); err != nil || apply {
		t.Fatalf("Learn() = %v, %v", apply, err)
	}
	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	var s learnState
	if err := json.Unmarshal(b, &s); err != nil || !slices.Equal(s.Sends["a"], []string{"r1"}) || len(s.Sends) != 1 {
		t.Errorf("state file after a pair learnt: %s (%v), want a -> r1", b, err)
	}
}
