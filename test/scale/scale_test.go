package scale

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skiff-sdn/skiff/test/testkit"
)

var (
	buildOnce sync.Once
	bins      Binaries
	buildErr  error
	binDir    string
)

// built builds the binaries once for every test of the package.
func built(t *testing.T) Binaries {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "skiff-scale-bin-")
		if buildErr == nil {
			bins, buildErr = Build(context.Background(), binDir)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bins
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// smoke runs the harness small; it fails on the first scenario that does.
func smoke(t *testing.T, o Options) *Report {
	t.Helper()
	o.Bins = built(t)
	o.Dir = t.TempDir()
	o.Logf = t.Logf
	var out strings.Builder
	o.Report = NewReport(&out)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := Run(ctx, o)
	t.Log("figures:\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestSmokeOneController runs every single-controller scenario with 40
// simulated agents under mTLS: cold start, delta latency, rest, load, bad
// input, and a restart (SIGKILL) from which every agent must resume
// without a snapshot.
func TestSmokeOneController(t *testing.T) {
	rep := smoke(t, Options{
		Work: Workload{Kind: Local, Nodes: 40}, Replicas: 1, TLS: true,
		Scenarios: []string{"cold", "latency", "rest", "load", "badinput", "restart"},
		Changes:   20, Rest: time.Second, Rate: 20, LoadFor: 2 * time.Second, BadRounds: 1, Kill: true,
		Counters: time.Second,
	})
	if got := rep.Get("controller restart (SIGKILL)", "snapshots sent"); got != "0" {
		t.Errorf("the restart sent %s snapshots, want 0", got)
	}
}

// TestSmokePolicies runs the policy workload (400 policies with ipBlocks
// and egress over 1,200 endpoints) through a cold start, endpoint changes,
// policy changes and a load: every change must reach the agents it
// concerns and every plan must equal the controller's.
func TestSmokePolicies(t *testing.T) {
	rep := smoke(t, Options{
		Work: Workload{Kind: Local, Nodes: 40, Policies: 400}, Replicas: 1, TLS: true,
		Scenarios: []string{"cold", "latency", "policy", "load"},
		Changes:   20, PolicyChanges: 20, Rate: 20, LoadFor: 2 * time.Second, Counters: time.Second,
	})
	if got := rep.Get("policy change", "of which the apply call, p50 / p99"); got == "" {
		t.Error("the policy scenario reported no figure")
	}
}

// TestSmokeReplicas runs the faults on three replicas and a three-member
// etcd cluster with a cluster-wide network: a replica and the etcd
// leader SIGKILLed during 300 creations.
func TestSmokeReplicas(t *testing.T) {
	smoke(t, Options{
		Work: Workload{Kind: Wide, Nodes: 30, EndpointsPerNode: 5}, Replicas: 3, TLS: true,
		Scenarios: []string{"cold", "failover"}, Creations: 300, Width: 16, Counters: time.Second,
	})
}

// TestSmokeOffload runs the offload compile on node 0 of a cluster-wide
// network of 30 nodes, given 20 local endpoints: each representor holds
// a local and an ARP rule per other local endpoint, the gateway's two,
// and an encap rule per remote endpoint (ARP for those is the node's
// bridge's).
func TestSmokeOffload(t *testing.T) {
	rep := smoke(t, Options{
		Work: Workload{Kind: Wide, Nodes: 30, EndpointsPerNode: 5}, Replicas: 1, TLS: true,
		Scenarios: []string{"offload"}, OffloadLocals: 20, Counters: time.Second,
	})
	var locals, remotes, vteps, networks, total, most, vx int
	if _, err := fmt.Sscanf(rep.Get("offload", "n00000's plan (from GetPlan)"), "%d local endpoints, %d remote endpoints behind %d VTEPs, %d networks",
		&locals, &remotes, &vteps, &networks); err != nil {
		t.Fatalf("the plan's figure: %v", err)
	}
	if _, err := fmt.Sscanf(rep.Get("offload", "rules: total / per representor (most) / on the VXLAN device"), "%d / %d / %d", &total, &most, &vx); err != nil {
		t.Fatalf("the rules' figure: %v", err)
	}
	if locals != 20 || remotes != 29*5 || vteps != 29 || networks != 1 {
		t.Errorf("node 0's plan: %d local, %d remote endpoints behind %d VTEPs, %d networks; want 20, 145, 29, 1", locals, remotes, vteps, networks)
	}
	if want := 2*(locals-1) + 2 + remotes; most != want {
		t.Errorf("%d rules on a representor, want %d", most, want)
	}
	if want := 2 * locals; vx != want {
		t.Errorf("%d rules on the VXLAN device, want %d (decap and ARP per local endpoint)", vx, want)
	}
}

// TestRealAgent puts a real skiff-agent (software datapath, in a network
// namespace) among the simulated ones, given every replica's address: it
// must fail over when its replica is SIGKILLed and resume without a
// snapshot, and a whole-controller restart must not change its datapath
// (ip monitor). Root: namespaces.
func TestRealAgent(t *testing.T) {
	testkit.Require(t)
	rep := smoke(t, Options{
		Work: Workload{Kind: Local, Nodes: 20}, Replicas: 3, TLS: true, RealAgent: true,
		Scenarios: []string{"failover"}, Creations: 100, Width: 8, Counters: time.Second,
	})
	if got := rep.Get("replica and etcd member loss", "the real agent (on the killed replica) resumed with"); got == "" || strings.HasPrefix(got, "snapshot") {
		t.Errorf("the real agent resumed with %q after its replica was killed", got)
	}
	rep = smoke(t, Options{
		Work: Workload{Kind: Local, Nodes: 20}, Replicas: 1, TLS: true, RealAgent: true,
		Scenarios: []string{"restart"}, Kill: true, Counters: time.Second,
	})
	if got := rep.Get("controller restart (SIGKILL)", "real agent: resumed with"); got == "snapshot" || got == "" {
		t.Errorf("the real agent resumed with %q after the restart", got)
	}
}
