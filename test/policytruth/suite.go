package policytruth

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
)

// Env is how the suite acts on a cluster; each place that runs it (e2e,
// kernel VM) says how.
type Env struct {
	// LabelNamespace sets one label of a Kubernetes namespace (skiffctl
	// namespace label).
	LabelNamespace func(t *testing.T, namespace, key, value string)
	// CreatePod makes pod p on node p.Node, in Kubernetes namespace
	// p.Namespace with labels p.Labels, on the cluster's network in
	// Subnet, and sets p.NetNS (the path of its network namespace) and
	// p.IP.
	CreatePod func(t *testing.T, p *Pod)
	// Apply applies a YAML stream of NetworkPolicies (skiffctl policy
	// apply -f).
	Apply func(t *testing.T, yaml string)
	// Delete deletes the policy "namespace/name" (skiffctl delete
	// policy).
	Delete func(t *testing.T, name string)
}

// Options tune Run; the zero value is the e2e tier's.
type Options struct {
	// Probes are sent between every ordered pair of pods; Probes when
	// nil. Every case is run whatever the list.
	Probes []Probe
	// Timeout is how long one probe waits for its answer; 1 s when zero.
	Timeout time.Duration
	// Settle is how long a measured matrix may take to equal the
	// expected one (the policy travelling to the nodes); 20 s when zero.
	Settle time.Duration
	// SettleFailing, when set, replaces Settle once a matrix has failed
	// to match: a datapath that enforces nothing then fails in minutes,
	// every case still reported.
	SettleFailing time.Duration
	// Diagnose, when set, is called when a matrix differs, and what it
	// returns is added to the failure (rules, counters of the nodes).
	Diagnose func(t *testing.T, what string) string
	// AfterCase, when set, runs after a case's matrix matched and before
	// its policies are deleted.
	AfterCase func(t *testing.T, c Case, pols []networkingv1.NetworkPolicy, pods []*Pod)
}

// MinPolicies is how many NetworkPolicies the suite must hold at least.
const MinPolicies = 25

// Run labels the namespaces, makes the pods of Layout with their probe
// servers, checks the open matrix, then applies every case, checks that
// the measured matrix equals Expected, deletes the case's policies and
// checks that the open matrix is back. It returns the pods.
func Run(t *testing.T, env Env, o Options) []*Pod {
	t.Helper()
	if o.Probes == nil {
		o.Probes = Probes
	}
	if o.Timeout == 0 {
		o.Timeout = time.Second
	}
	if o.Settle == 0 {
		o.Settle = 20 * time.Second
	}
	for _, name := range slices.Sorted(maps.Keys(Namespaces)) {
		for _, k := range slices.Sorted(maps.Keys(Namespaces[name])) {
			env.LabelNamespace(t, name, k, Namespaces[name][k])
		}
	}
	pods := Layout()
	for _, p := range pods {
		env.CreatePod(t, p)
		if p.NetNS == "" || p.IP == "" {
			t.Fatalf("pod %s: CreatePod left netns %q address %q", p.Name, p.NetNS, p.IP)
		}
		Serve(t, p, o.Probes)
	}
	settle, failed := o.Settle, false
	check := func(what string, want map[string]bool) {
		t.Helper()
		start := time.Now()
		var diff, first []string
		for round := 1; round == 1 || time.Since(start) < settle; round++ {
			got := Measure(pods, o.Probes, o.Timeout)
			reprobe(pods, o, want, got)
			diff = diff[:0]
			for _, k := range slices.Sorted(maps.Keys(want)) {
				if got[k] != want[k] {
					diff = append(diff, fmt.Sprintf("%s: measured %v, Kubernetes says %v", k, got[k], want[k]))
				}
			}
			if round == 1 {
				first = slices.Clone(diff)
			}
			if len(diff) == 0 {
				msg := fmt.Sprintf("%s: %d probes match (%v)", what, len(want), time.Since(start).Round(time.Millisecond))
				if round > 1 {
					// Slow convergence is worth seeing: the first
					// round tells propagation (a deny still open)
					// from lost probes (an allow that timed out).
					msg += fmt.Sprintf(", after %d rounds; the first differed in %d probes: %s", round, len(first), strings.Join(first[:min(len(first), 4)], "; "))
				}
				t.Log(msg)
				return
			}
		}
		msg := fmt.Sprintf("%s: the measured matrix differs from Kubernetes' in %d of %d probes:\n%s", what, len(diff), len(want), strings.Join(diff, "\n"))
		if o.Diagnose != nil {
			msg += "\n" + o.Diagnose(t, what)
		}
		t.Error(msg)
		if !failed && o.SettleFailing != 0 {
			failed, settle = true, o.SettleFailing
			t.Logf("from now on a matrix settles for at most %v", settle)
		}
	}
	open := Expected(nil, pods, o.Probes)
	check("no policy", open)
	npols := 0
	for _, c := range Cases {
		doc, pols, err := c.Render(pods)
		if err != nil {
			t.Fatal(err)
		}
		npols += len(pols)
		want := Expected(pols, pods, o.Probes)
		if maps.Equal(want, open) && !c.Open {
			t.Fatalf("%s: the case changes nothing: it tests nothing", c.Name)
		}
		env.Apply(t, doc)
		check(c.Name, want)
		if o.AfterCase != nil {
			o.AfterCase(t, c, pols, pods)
		}
		for _, p := range pols {
			env.Delete(t, p.Namespace+"/"+p.Name)
		}
		// Deleting lifts the isolation, so the next case starts open
		// and cannot pass on what this one left.
		check(c.Name+", deleted", open)
	}
	t.Logf("%d cases, %d policies", len(Cases), npols)
	if npols < MinPolicies {
		t.Fatalf("the suite has %d policies; it must have at least %d", npols, MinPolicies)
	}
	return pods
}

// reprobe measures again, up to twice, the probes of got that differ from
// want: under emulation a probe that should pass can time out while 180
// others run. Every probe of a round that matches was still measured in
// that round, so a denied flow must be measured denied, and an allowed one
// must get through at least once, after the policy was applied.
func reprobe(pods []*Pod, o Options, want, got map[string]bool) {
	type probe struct {
		src, dst *Pod
		pr       Probe
		k        string
	}
	for range 2 {
		// The differing probes first, then measured: got is not read
		// while the measurements write it.
		var again []probe
		for _, src := range pods {
			for _, dst := range pods {
				for _, pr := range o.Probes {
					if k := Key(src, dst, pr); src != dst && got[k] != want[k] {
						again = append(again, probe{src, dst, pr, k})
					}
				}
			}
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, a := range again {
			wg.Go(func() {
				ok := Reach(a.src, a.dst, a.pr, o.Timeout)
				mu.Lock()
				got[a.k] = ok
				mu.Unlock()
			})
		}
		wg.Wait()
	}
}
