package scale

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// Env is one run: the controllers, the fleet, the workload they hold, and
// where figures go. Scenarios are its methods; each records its figures
// under its own name.
type Env struct {
	Cluster *Cluster
	Fleet   *Fleet
	Work    Workload
	Mgmt    skiffv1.ManagementServiceClient
	Report  *Report
	// Real is the real agent among the nodes, if any.
	Real *RealAgent
	// ProfileDir, when set, receives CPU profiles of the controller (first
	// replica) during the cold start, the load and the restart.
	ProfileDir string
	Logf       func(format string, args ...any)

	rmu   sync.Mutex
	rng   *rand.Rand
	extra atomic.Int64
}

func (e *Env) logf(format string, args ...any) {
	if e.Logf != nil {
		e.Logf(format, args...)
	}
}

// newEndpoint returns a new endpoint named prefix-N on a random network
// and node, and the nodes with a simulated agent that it concerns.
func (e *Env) newEndpoint(prefix string) (Endpoint, []string) {
	name := fmt.Sprintf("%s-%06d", prefix, e.extra.Add(1))
	var ep Endpoint
	var members []string
	e.random(func(r *rand.Rand) { ep, members = e.Work.Extra(name, r) })
	return ep, e.fleetNodes(members)
}

// random calls fn with the run's random source, one caller at a time.
func (e *Env) random(fn func(r *rand.Rand)) {
	e.rmu.Lock()
	defer e.rmu.Unlock()
	if e.rng == nil {
		e.rng = rand.New(rand.NewPCG(1, 2))
	}
	fn(e.rng)
}

// profile captures a CPU profile of the first controller for d in the
// background; the returned function waits for it.
func (e *Env) profile(ctx context.Context, name string, d time.Duration) func() {
	if e.ProfileDir == "" {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		path := filepath.Join(e.ProfileDir, name+".cpu.pprof")
		if err := Profile(ctx, e.Cluster.Controllers[0], "profile", int(d.Seconds()), path); err != nil {
			e.logf("profile %s: %v", name, err)
		}
	}()
	return func() { <-done }
}

// fleetNodes keeps the nodes that have a simulated agent.
func (e *Env) fleetNodes(nodes []string) []string {
	var out []string
	for _, n := range nodes {
		if e.Fleet.Agent(n) != nil {
			out = append(out, n)
		}
	}
	return out
}

// InSync waits until every agent's plan equals the controller's plan for
// its node, checking again while changes are still arriving, for up to
// timeout. It returns an error naming a few agents that still differ.
//
// The timeout grows by a second per 100,000 plan items the agents hold:
// one check reads and compares every plan (30 M items on a network that
// spans 1,000 nodes), and the machine is shared with the controller.
func (e *Env) InSync(ctx context.Context, timeout time.Duration) error {
	timeout += time.Duration(e.Fleet.PlanItems()/100_000) * time.Second
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		bad, examples, err := e.Fleet.Verify(ctx, e.Mgmt, 32)
		if err == nil && bad == 0 {
			if e.Real != nil {
				return e.Real.InSync(ctx, e.Mgmt)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("in sync: %w", err)
			}
			return fmt.Errorf("in sync: %d agents differ from the controller's plan: %v", bad, examples)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ColdStart stops the controller(s), starts them again with no agent
// connected, then starts the fleet (agents with no plan) and measures the
// time until every agent holds its plan, which is then checked.
func (e *Env) ColdStart(ctx context.Context) error {
	const sc = "cold start"
	e.Fleet.Stop()
	for _, ct := range e.Cluster.Controllers {
		ct.Proc.Stop()
	}
	start := time.Now()
	if err := parallel(len(e.Cluster.Controllers), len(e.Cluster.Controllers), func(i int) error {
		return e.Cluster.Controllers[i].Start(ctx)
	}); err != nil {
		return err
	}
	serving := time.Now()
	u0, _ := e.Cluster.Controllers[0].Usage()
	h0, _ := ReadUsage(os.Getpid())
	wait := e.profile(ctx, "coldstart", 10*time.Second)
	before := e.Fleet.Stats()
	e.Fleet.TakeFailures()
	e.Fleet.Start(ctx)
	last, err := e.Fleet.WaitSessions(ctx, serving)
	if err != nil {
		return err
	}
	u1, _ := e.Cluster.Controllers[0].Usage()
	h1, _ := ReadUsage(os.Getpid())
	e.Report.Add(sc, "controller start -> serving (planner loaded; every replica)", "%s", secs(serving.Sub(start)))
	e.Report.Add(sc, "agents started -> every agent holds its plan", "%s", secs(last.Sub(serving)))
	e.Report.Add(sc, "controller start -> every agent holds its plan", "%s", secs(last.Sub(start)))
	e.Report.Add(sc, "controller CPU while agents connected", "%.1f s (%.0f%% of one core)", (u1.CPU - u0.CPU).Seconds(), CPUPercent(u0, u1))
	e.Report.Add(sc, "controller RSS after", "%s", mib(u1.RSS))
	e.Report.Add(sc, "harness (the simulated agents) CPU meanwhile", "%.1f s (%.0f%% of one core)", (h1.CPU - h0.CPU).Seconds(), CPUPercent(h0, h1))
	st := e.Fleet.Stats()
	e.Report.Add(sc, "snapshots sent", "%d", st.Snapshots)
	e.Report.Add(sc, "plan streams opened by the agents / agents", "%d / %d", st.Sessions-before.Sessions, len(e.Fleet.Agents))
	e.Report.Add(sc, "agents' sessions that failed, by cause", "%s", e.Fleet.TakeFailures())
	e.Report.Add(sc, "plan items held by the agents", "%d", e.Fleet.PlanItems())
	wait()
	check := time.Now()
	if err := e.InSync(ctx, 2*time.Minute); err != nil {
		return err
	}
	e.Report.Add(sc, "every plan checked against GetPlan", "ok (%s)", secs(time.Since(check)))
	return nil
}

// Latency creates n endpoints one after another, each on a random network
// and node, and measures the time from the call to every relevant agent
// holding the endpoint; then deletes them.
func (e *Env) Latency(ctx context.Context, n int) error {
	const sc = "delta latency"
	var total, api []time.Duration
	var names []string
	for i := range n {
		ep, members := e.newEndpoint("lat")
		name := ep.Name
		w := e.Fleet.Expect(name, members, false)
		if err := CreateEndpoint(ctx, e.Mgmt, ep); err != nil {
			return err
		}
		called := time.Since(w.Start)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		d, err := e.Fleet.Wait(wctx, w)
		cancel()
		if err != nil {
			return fmt.Errorf("change %d: %w", i, err)
		}
		total, api, names = append(total, d), append(api, called), append(names, name)
	}
	e.Report.Add(sc, fmt.Sprintf("endpoint created -> every relevant agent has it, p50 / p99 over %d", n), "%s / %s (max %s)",
		ms(Percentile(total, 50)), ms(Percentile(total, 99)), ms(Percentile(total, 100)))
	e.Report.Add(sc, "of which the create call (etcd transaction), p50 / p99", "%s / %s", ms(Percentile(api, 50)), ms(Percentile(api, 99)))
	return parallel(len(names), 16, func(i int) error { return DeleteEndpoint(ctx, e.Mgmt, names[i]) })
}

// Rest measures the controllers' CPU and memory for d with every agent
// connected and reporting counters, and nothing changing.
func (e *Env) Rest(ctx context.Context, d time.Duration) error {
	const sc = "at rest"
	var us [][2]Usage
	for _, ct := range e.Cluster.Controllers {
		u, err := ct.Usage()
		if err != nil {
			return err
		}
		us = append(us, [2]Usage{u})
	}
	wait := e.profile(ctx, "rest", d)
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return ctx.Err()
	}
	wait()
	for i, ct := range e.Cluster.Controllers {
		u, err := ct.Usage()
		if err != nil {
			return err
		}
		e.Report.Add(sc, fmt.Sprintf("controller %d CPU over %s (counters every %s)", i+1, d, e.Fleet.cfg.Counters),
			"%.1f%% of one core", CPUPercent(us[i][0], u))
		e.Report.Add(sc, fmt.Sprintf("controller %d RSS", i+1), "%s", mib(u.RSS))
	}
	if e.ProfileDir != "" {
		// The live heap at rest (after a GC): what each plan and stream costs.
		path := filepath.Join(e.ProfileDir, "rest.heap.pprof")
		if err := Profile(ctx, e.Cluster.Controllers[0], "heap?gc=1", 0, path); err != nil {
			e.logf("profile heap: %v", err)
		}
	}
	return nil
}

// Load makes rate endpoint changes per second for d (creations, and once
// 500 exist, as many deletions of the oldest), measures the controllers'
// CPU and memory and the latency of one change in ten, then deletes what
// it created and checks every plan.
func (e *Env) Load(ctx context.Context, rate int, d time.Duration) error {
	const sc = "under load"
	u0, err := e.Cluster.Controllers[0].Usage()
	if err != nil {
		return err
	}
	h0, _ := ReadUsage(os.Getpid())
	st0 := e.Fleet.Stats()
	wait := e.profile(ctx, "load", min(d, 30*time.Second))
	var (
		mu        sync.Mutex
		live      []string
		latencies []time.Duration
		failed    error
		wg        sync.WaitGroup
		changes   atomic.Int64
		skipped   int             // ticks with 64 changes outstanding
		calls     []time.Duration // creation calls (the API's answer)
	)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.Now().Add(d)
	sem := make(chan struct{}, 64)
	for i := 0; time.Now().Before(end); i++ {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		mu.Lock()
		del := ""
		if len(live) >= 500 && i%2 == 1 {
			del, live = live[0], live[1:]
		}
		mu.Unlock()
		select {
		case sem <- struct{}{}:
		default:
			mu.Lock()
			failed = fmt.Errorf("more than 64 changes outstanding at %d/s: the API does not keep up", rate)
			skipped++
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			var err error
			if del != "" {
				err = DeleteEndpoint(ctx, e.Mgmt, del)
			} else {
				ep, members := e.newEndpoint("load")
				name := ep.Name
				var w *Watch
				if i%10 == 0 {
					w = e.Fleet.Expect(name, members, false)
				}
				t0 := time.Now()
				if err = CreateEndpoint(ctx, e.Mgmt, ep); err == nil {
					mu.Lock()
					live = append(live, name)
					calls = append(calls, time.Since(t0))
					mu.Unlock()
					if w != nil {
						wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
						lat, werr := e.Fleet.Wait(wctx, w)
						cancel()
						mu.Lock()
						latencies = append(latencies, lat)
						if werr != nil {
							failed = werr
						}
						mu.Unlock()
					}
				}
			}
			changes.Add(1)
			if err != nil {
				mu.Lock()
				failed = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	u1, err := e.Cluster.Controllers[0].Usage()
	if err != nil {
		return err
	}
	h1, _ := ReadUsage(os.Getpid())
	st1 := e.Fleet.Stats()
	wait()
	// The figures are recorded whether or not the rate was kept: they
	// say by how much it was not.
	e.Report.Add(sc, fmt.Sprintf("changes made (target %d/s for %s)", rate, d), "%d (%.0f/s)", changes.Load(), float64(changes.Load())/u1.At.Sub(u0.At).Seconds())
	e.Report.Add(sc, "ticks skipped: 64 changes outstanding", "%d", skipped)
	if n := changes.Load(); n > 0 {
		e.Report.Add(sc, "deltas received by the agents, per change: deltas / bytes / group member addresses", "%.0f / %.0f / %.0f",
			float64(st1.Deltas-st0.Deltas)/float64(n), float64(st1.DeltaBytes-st0.DeltaBytes)/float64(n), float64(st1.GroupAddrs-st0.GroupAddrs)/float64(n))
	}
	e.Report.Add(sc, "controller 1 CPU", "%.1f%% of one core", CPUPercent(u0, u1))
	e.Report.Add(sc, "controller 1 RSS at the end", "%s", mib(u1.RSS))
	e.Report.Add(sc, "harness (the simulated agents and the API clients) CPU", "%.1f%% of one core", CPUPercent(h0, h1))
	e.Report.Add(sc, "creation -> every relevant agent, p50 / p99 (one change in ten)", "%s / %s", ms(Percentile(latencies, 50)), ms(Percentile(latencies, 99)))
	e.Report.Add(sc, "creation call (the API's answer), p50 / p99", "%s / %s", ms(Percentile(calls, 50)), ms(Percentile(calls, 99)))
	// Whether or not the rate was kept, what was made is deleted and every
	// plan checked: a load the controller fell behind on must still end
	// with every agent holding its plan.
	check := time.Now()
	err = parallel(len(live), 16, func(i int) error { return DeleteEndpoint(ctx, e.Mgmt, live[i]) })
	if err == nil {
		err = e.InSync(ctx, 2*time.Minute)
	}
	if err == nil {
		e.Report.Add(sc, "after the load: its endpoints deleted, every plan checked against GetPlan", "ok (%s)", secs(time.Since(check)))
	} else {
		e.Report.Add(sc, "after the load: its endpoints deleted, every plan checked against GetPlan", "failed: %v", err)
	}
	return errors.Join(failed, err)
}
