// Command demo shows Skiff's controller at work: it starts the real
// skiff-controller with its embedded etcd, registers three nodes and opens
// their plan streams (as agents do), creates two tenant networks and
// endpoints with the real skiffctl, and prints what each node is sent.
// Run it with `make demo`; it removes everything it made.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	start := time.Now()
	dir, err := os.MkdirTemp("", "skiff-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := l.Addr().String()
	l.Close()

	step("start skiff-controller (embedded etcd in %s)", dir)
	ctrl := exec.Command("bin/skiff-controller", "--listen", addr, "--data-dir", dir, "--log-level", "warn")
	ctrl.Stderr = os.Stderr
	if err := ctrl.Start(); err != nil {
		return err
	}
	defer func() { _ = ctrl.Process.Kill(); _ = ctrl.Wait() }()

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	agent := skiffv1.NewAgentServiceClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	nodes := map[string]string{"node1": "192.0.2.1", "node2": "192.0.2.2", "node3": "192.0.2.3"}
	var names []string
	for n := range nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	step("register %d nodes and open their plan streams", len(nodes))
	var (
		mu  sync.Mutex
		got = map[string][]string{}
	)
	for _, n := range names {
		if err := retry(func() error {
			_, err := agent.Register(ctx, &skiffv1.RegisterRequest{Node: &skiffv1.Node{Name: n, UnderlayIp: nodes[n], Mode: "software"}})
			return err
		}); err != nil {
			return fmt.Errorf("register %s: %w", n, err)
		}
		s, err := agent.StreamPlan(ctx, &skiffv1.StreamPlanRequest{Node: n})
		if err != nil {
			return err
		}
		go func() {
			for {
				u, err := s.Recv()
				if err != nil {
					return
				}
				mu.Lock()
				got[n] = append(got[n], describe(u))
				mu.Unlock()
			}
		}()
	}

	step("create two tenant networks and endpoints with skiffctl")
	cmds := [][]string{
		{"network", "create", "blue", "--vni", "100"},
		{"subnet", "create", "blue-v4", "--network", "blue", "--cidr", "198.51.100.0/24"},
		{"network", "create", "red", "--vni", "200"},
		{"subnet", "create", "red-v4", "--network", "red", "--cidr", "203.0.113.0/24"},
		{"endpoint", "create", "web-1", "--network", "blue", "--node", "node1", "--label", "app=web"},
		{"endpoint", "create", "web-2", "--network", "blue", "--node", "node2", "--label", "app=web"},
		{"endpoint", "create", "db-1", "--network", "red", "--node", "node2", "--label", "app=db"},
		{"endpoint", "create", "db-2", "--network", "red", "--node", "node3", "--label", "app=db"},
	}
	for _, c := range cmds {
		if err := ctl(addr, c...); err != nil {
			return err
		}
	}
	step("bad input is refused with the field and the reason")
	_ = ctl(addr, "network", "create", "green", "--vni", "0")
	_ = ctl(addr, "network", "create", "green", "--vni", "100")

	step("skiffctl get endpoints")
	if err := ctl(addr, "get", "endpoints"); err != nil {
		return err
	}
	step("skiffctl plan node2 (node2 has endpoints on both networks)")
	time.Sleep(300 * time.Millisecond)
	if err := ctl(addr, "plan", "node2"); err != nil {
		return err
	}

	step("what each node's plan stream carried (relevance: a node hears only of networks it has endpoints on)")
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	for _, n := range names {
		fmt.Printf("  %s:\n", n)
		for _, line := range got[n] {
			fmt.Printf("    %s\n", line)
		}
	}
	mu.Unlock()
	step("done in %.1fs; controller stopped, %s removed", time.Since(start).Seconds(), dir)
	return nil
}

func describe(u *skiffv1.PlanUpdate) string {
	if s := u.GetSnapshot(); s != nil {
		return fmt.Sprintf("snapshot rev %d: %d networks, %d local, %d remote", s.Revision, len(s.Networks), len(s.LocalEndpoints), len(s.RemoteEndpoints))
	}
	d := u.GetDelta()
	var parts []string
	for _, n := range d.UpsertNetworks {
		parts = append(parts, fmt.Sprintf("network %s (vni %d, flood %v)", n.Name, n.Vni, n.FloodVteps))
	}
	for _, e := range d.UpsertLocal {
		parts = append(parts, fmt.Sprintf("local %s %s %v", e.Name, e.Mac, e.Ips))
	}
	for _, e := range d.UpsertRemote {
		parts = append(parts, fmt.Sprintf("remote %s %v via %s", e.Name, e.Ips, e.Vtep))
	}
	return fmt.Sprintf("delta rev %d->%d: %s", d.FromRevision, d.Revision, strings.Join(parts, "; "))
}

func ctl(addr string, args ...string) error {
	fmt.Printf("  $ skiffctl %s\n", strings.Join(args, " "))
	cmd := exec.Command(filepath.Join("bin", "skiffctl"), append([]string{"--controller", addr}, args...)...)
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		fmt.Printf("    %s\n", line)
	}
	return err
}

func retry(f func() error) error {
	var err error
	for range 100 {
		if err = f(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

func step(format string, args ...any) {
	fmt.Printf("\n== "+format+"\n", args...)
}
