package scale

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Scenario names, in the order Run plays them.
var Scenarios = []string{"cold", "latency", "policy", "rest", "load", "badinput", "restart", "failover", "offload"}

// fleetless are the scenarios that need no agent session (they read a
// plan with GetPlan): a run of only these starts no simulated agent.
var fleetless = []string{"offload"}

// Options configure a run.
type Options struct {
	Work     Workload
	Replicas int  // 1: embedded etcd; 3: replicas on a three-member etcd
	TLS      bool // mTLS everywhere (needed by badinput)
	// RealAgent replaces the simulated agent of node 0 by a real
	// skiff-agent in a network namespace (root).
	RealAgent bool
	Scenarios []string
	// Bins are prebuilt binaries; empty: built into Dir.
	Bins Binaries
	Dir  string
	// Sizes of the scenarios.
	Changes       int           // latency: changes measured one by one
	PolicyChanges int           // policy: policy changes measured one by one
	Rest          time.Duration // rest: how long
	Rate          int           // load: changes per second
	LoadFor       time.Duration // load: how long
	BadRounds     int           // badinput: rounds of every bad request
	Creations     int           // failover: creations during the faults
	OffloadLocals int           // offload: node 0's local endpoints
	Width         int           // parallel API clients for setup and failover
	Counters      time.Duration // agents' counter report interval
	Kill          bool          // restart with SIGKILL instead of SIGTERM
	Profile       bool          // save controller CPU profiles in Dir
	ControllerIn  []string      // extra controller flags
	Logf          func(format string, args ...any)
	Report        *Report
}

// Run sets up the workload on real controllers, starts the fleet and plays
// the scenarios. Figures go to o.Report; the first failure ends the run.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.Work.Validate(); err != nil {
		return nil, err
	}
	for _, s := range o.Scenarios {
		if !slices.Contains(Scenarios, s) {
			return nil, fmt.Errorf("scenario %q: not one of %v", s, Scenarios)
		}
	}
	if o.Report == nil {
		o.Report = NewReport(nil)
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if o.Width == 0 {
		o.Width = 32
	}
	rep := o.Report
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	if lim, err := RaiseFileLimit(uint64(3*o.Work.Nodes + 4096)); err != nil || lim < uint64(2*o.Work.Nodes+1024) {
		return nil, fmt.Errorf("open-file limit %d is too low for %d agents (%v)", lim, o.Work.Nodes, err)
	}
	if o.Bins.Controller == "" {
		logf("building binaries")
		b, err := Build(ctx, o.Dir)
		if err != nil {
			return nil, err
		}
		o.Bins = b
	}
	cl, err := NewCluster(o.Bins, o.Dir, ClusterConfig{Replicas: o.Replicas, TLS: o.TLS, Args: o.ControllerIn})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	logf("starting %d controller(s)", len(cl.Controllers))
	if err := cl.Start(ctx); err != nil {
		return nil, err
	}
	mgmt, conn, err := cl.Mgmt()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	nodes := o.Work.NodeSpecs()
	simNodes := nodes
	if o.RealAgent {
		simNodes = nodes[1:]
	}
	fleet, err := NewFleet(FleetConfig{Target: cl.Target(), Nodes: simNodes, Creds: cl.NodeCreds, Counters: o.Counters, Logf: logf})
	if err != nil {
		return nil, err
	}
	defer fleet.Close()
	env := &Env{Cluster: cl, Fleet: fleet, Work: o.Work, Mgmt: mgmt, Report: rep, Logf: logf}
	if o.Profile {
		env.ProfileDir = o.Dir
	}
	w := o.Work.withDefaults()
	desc := fmt.Sprintf("%s, %d agents, %d endpoints, %d networks, %d policies, %d controller(s), mTLS %v",
		w.Kind, w.Nodes, w.Endpoints(), len(w.Networks()), w.Policies, len(cl.Controllers), o.TLS)
	rep.Add("setup", "workload", "%s", desc)
	logf("setting up: %s", desc)
	rates, err := Setup(ctx, mgmt, fleet, o.Work, o.Width)
	if err != nil {
		return rep, err
	}
	for _, s := range rates.Steps {
		rep.Add("setup", s.What, "%d in %s (%.0f/s, %d clients)", s.Count, secs(time.Duration(s.Seconds*float64(time.Second))), float64(s.Count)/s.Seconds, o.Width)
	}
	rep.Add("load average", "after setup (1 / 5 / 15 min)", "%s", loadAverage())
	has := func(s string) bool { return slices.Contains(o.Scenarios, s) }
	sessions := o.RealAgent || slices.ContainsFunc(o.Scenarios, func(s string) bool { return !slices.Contains(fleetless, s) })
	if !sessions {
		rep.Add("setup", "simulated agents", "not started (the scenarios read plans with GetPlan)")
	} else if has("cold") {
		logf("scenario: cold start")
		err := env.ColdStart(ctx)
		rep.Add("load average", "after cold", "%s", loadAverage())
		if err != nil {
			return rep, fmt.Errorf("cold start: %w", err)
		}
	} else {
		fleet.Start(ctx)
		if _, err := fleet.WaitSessions(ctx, time.Time{}); err != nil {
			return rep, err
		}
	}
	if o.RealAgent {
		logf("starting the real agent")
		ra, err := StartRealAgent(ctx, cl, nodes[0], filepath.Join(o.Dir, "real-agent"))
		if err != nil {
			return rep, err
		}
		defer ra.Close()
		env.Real = ra
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err = ra.InSync(rctx, mgmt)
		cancel()
		if err != nil {
			return rep, fmt.Errorf("%w\n%s", err, ra.Log())
		}
		rep.Add("setup", "real agent started -> its datapath holds its plan", "%s", secs(time.Since(start)))
	}
	steps := []struct {
		name string
		fn   func() error
	}{
		{"latency", func() error { return env.Latency(ctx, o.Changes) }},
		{"policy", func() error { return env.PolicyChange(ctx, o.PolicyChanges) }},
		{"rest", func() error { return env.Rest(ctx, o.Rest) }},
		{"load", func() error { return env.Load(ctx, o.Rate, o.LoadFor) }},
		{"badinput", func() error { return env.BadInput(ctx, o.BadRounds, 20) }},
		{"restart", func() error { return env.Restart(ctx, o.Kill) }},
		{"failover", func() error { return env.Failover(ctx, o.Creations, o.Width) }},
		{"offload", func() error { return env.OffloadCompile(ctx, o.OffloadLocals) }},
	}
	for _, s := range steps {
		if !has(s.name) {
			continue
		}
		logf("scenario: %s", s.name)
		err := s.fn()
		rep.Add("load average", "after "+s.name, "%s", loadAverage())
		if err != nil {
			return rep, fmt.Errorf("%s: %w", s.name, err)
		}
	}
	if !sessions {
		return rep, nil
	}
	st := fleet.Stats()
	rep.Add("end", "agent sessions / snapshots / deltas / rejected updates", "%d / %d / %d / %d", st.Sessions, st.Snapshots, st.Deltas, st.Rejected)
	if st.Rejected > 0 {
		return rep, errors.New("some agents received updates that did not apply")
	}
	if err := env.InSync(ctx, 2*time.Minute); err != nil {
		return rep, fmt.Errorf("end: %w", err)
	}
	return rep, nil
}

// TempDir makes a directory for a run under the system's temporary
// directory.
func TempDir() (string, error) { return os.MkdirTemp("", "skiff-scale-") }
