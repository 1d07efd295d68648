// Command skiff-scale runs Skiff's scale harness (package test/scale) at
// full size: real controllers, thousands of simulated agents, optionally a
// real agent in a network namespace. Wrap it in the heavy lock:
//
//	flock /tmp/skiff-heavy.lock skiff-scale --agents 5000 --workload local
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/skiff-sdn/skiff/test/scale"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "skiff-scale:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		o         scale.Options
		scenarios string
		keep      bool
		out       string
		interval  time.Duration
		ctlArgs   string
	)
	flag.StringVar(&o.Work.Kind, "workload", scale.Local, "local (tenants, each network on 10 nodes) or wide (one network on every node)")
	flag.IntVar(&o.Work.Nodes, "agents", 5000, "nodes, one agent each")
	flag.IntVar(&o.Work.EndpointsPerNode, "endpoints-per-node", 30, "endpoints per node")
	flag.IntVar(&o.Work.Policies, "policies", 0, "NetworkPolicies (100 namespaces x 100 apps)")
	flag.IntVar(&o.Replicas, "replicas", 1, "1: one controller with embedded etcd; 3: three replicas on a three-member etcd cluster")
	flag.BoolVar(&o.TLS, "tls", true, "mTLS with a certificate per node")
	flag.BoolVar(&o.RealAgent, "real-agent", os.Geteuid() == 0, "node 0 runs a real skiff-agent in a network namespace (root)")
	flag.StringVar(&scenarios, "scenarios", "cold,latency,rest,load,badinput,restart", "comma-separated: "+strings.Join(scale.Scenarios, ","))
	flag.IntVar(&o.Changes, "changes", 1000, "latency: endpoint creations measured one by one")
	flag.IntVar(&o.PolicyChanges, "policy-changes", 200, "policy: policy changes measured one by one (needs --policies)")
	flag.DurationVar(&o.Rest, "rest", 30*time.Second, "rest: how long to measure")
	flag.IntVar(&o.Rate, "rate", 100, "load: endpoint changes per second")
	flag.DurationVar(&o.LoadFor, "load-for", 30*time.Second, "load: how long")
	flag.IntVar(&o.BadRounds, "bad-rounds", 20, "badinput: rounds of every bad request")
	flag.IntVar(&o.Creations, "creations", 10000, "failover: endpoint creations during the faults")
	flag.IntVar(&o.OffloadLocals, "offload-locals", 250, "offload: node 0's local endpoints (wide workload)")
	flag.IntVar(&o.Width, "width", 32, "parallel API clients for setup and creations")
	flag.DurationVar(&o.Counters, "counters", 10*time.Second, "agents' counter report interval")
	flag.BoolVar(&o.Kill, "kill", false, "restart: SIGKILL the controller instead of SIGTERM")
	flag.BoolVar(&o.Profile, "profile", false, "save controller CPU profiles (cold start, rest, load, restart) in the run directory")
	flag.StringVar(&o.Bins.Controller, "bin-dir", "", "directory with prebuilt skiff-controller, skiff-agent and scale-etcd (default: build)")
	flag.StringVar(&o.Dir, "dir", "", "run directory (default: a new temporary one)")
	flag.BoolVar(&keep, "keep", false, "keep the run directory (logs, profiles)")
	flag.StringVar(&out, "out", "", "also write the figures to this file")
	flag.DurationVar(&interval, "plan-interval", 0, "the controllers' --plan-interval (0: the controller's default)")
	flag.StringVar(&ctlArgs, "controller-args", "", "more flags for every controller, space-separated")
	flag.Parse()
	if interval != 0 {
		o.ControllerIn = append(o.ControllerIn, "--plan-interval", interval.String())
	}
	o.ControllerIn = append(o.ControllerIn, strings.Fields(ctlArgs)...)
	o.Scenarios = strings.Split(scenarios, ",")
	if dir := o.Bins.Controller; dir != "" {
		o.Bins = scale.Binaries{Controller: dir + "/skiff-controller", Agent: dir + "/skiff-agent", Etcd: dir + "/scale-etcd"}
	}
	if o.Dir == "" {
		d, err := scale.TempDir()
		if err != nil {
			return err
		}
		o.Dir = d
		if !keep {
			defer os.RemoveAll(d)
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	o.Logf = func(format string, args ...any) { log.Info(fmt.Sprintf(format, args...)) }
	o.Report = scale.NewReport(os.Stdout)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log.Info("run directory", "dir", o.Dir)
	rep, err := scale.Run(ctx, o)
	if rep != nil {
		fmt.Println()
		rep.Table(os.Stdout)
		if out != "" {
			f, ferr := os.Create(out)
			if ferr != nil {
				return ferr
			}
			fmt.Fprintf(f, "skiff-scale %s\n\n", strings.Join(os.Args[1:], " "))
			rep.Table(f)
			f.Close()
		}
	}
	return err
}
