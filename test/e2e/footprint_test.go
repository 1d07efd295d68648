package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
	"github.com/skiff-sdn/skiff/test/testkit"
)

// procStats returns a process's resident set (KiB) and CPU time used
// (user+system, in clock ticks).
func procStats(tb testing.TB, pid int) (rssKiB, ticks int64) {
	tb.Helper()
	rssKiB, _, err := testkit.Memory(pid)
	if err != nil {
		tb.Fatal(err)
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return rssKiB, u + s
}

// idleCPU measures a process's CPU use over d, in percent of one core.
func idleCPU(tb testing.TB, pid int, d time.Duration) float64 {
	_, t0 := procStats(tb, pid)
	time.Sleep(d)
	_, t1 := procStats(tb, pid)
	return float64(t1-t0) / 100 / d.Seconds() * 100 // USER_HZ is 100
}

// BenchmarkAgentFootprint runs one real agent and reports its memory idle
// and with 250 local + 5,000 remote endpoints over 10 networks (10,000 FDB
// entries, 5,250 neighbour entries), its CPU while idle in both states, and
// the time to program everything. Run:
//
//	go test -run '^$' -bench AgentFootprint -benchtime 1x ./test/e2e/
func BenchmarkAgentFootprint(b *testing.B) {
	for b.Loop() {
		footprint(b)
	}
}

func footprint(b *testing.B) {
	c := newCluster(b, "n1")
	pid := c.nodes["n1"].agent.Process.Pid
	testkit.Eventually(b, "", 20*time.Second, testkit.NoError(func() error {
		if !strings.Contains(c.mustCtl("get", "nodes"), "true") {
			return fmt.Errorf("agent not connected")
		}
		return nil
	}))
	time.Sleep(2 * time.Second)
	rssIdle, _ := procStats(b, pid)
	cpuIdle := idleCPU(b, pid, 10*time.Second)

	// The load runs inside the underlay namespace, where the controller
	// listens: this test binary, re-executed as a loader.
	start := time.Now()
	out, err := testkit.Try(c.ul, "env", "SKIFF_E2E_LOADER="+ctrlAddr, os.Args[0])
	if err != nil {
		b.Fatalf("loader: %v\n%s", err, out)
	}
	testkit.Eventually(b, "", 20*time.Second, testkit.NoError(func() error {
		total := 0
		for i := range 10 {
			total += strings.Count(c.fdb("n1", 1000+i), " ")
		}
		if total < 5000+10 {
			return fmt.Errorf("%d VXLAN FDB entries so far", total)
		}
		return nil
	}))
	converged := time.Since(start)
	time.Sleep(3 * time.Second)
	rssLoaded, _ := procStats(b, pid)
	cpuLoaded := idleCPU(b, pid, 10*time.Second)
	b.ReportMetric(float64(rssIdle)/1024, "idle-RSS-MiB")
	b.ReportMetric(float64(rssLoaded)/1024, "loaded-RSS-MiB")
	b.ReportMetric(cpuIdle, "idle-CPU-%")
	b.ReportMetric(cpuLoaded, "loaded-idle-CPU-%")
	b.ReportMetric(converged.Seconds(), "create+program-s")
	b.Logf("loader: %s", strings.TrimSpace(out))
}

// runLoader creates the footprint benchmark's objects on the controller at
// addr: a remote node, 10 networks, 250 endpoints on n1 and 5,000 on the
// remote node, from 16 concurrent clients.
func runLoader(addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	mg := skiffv1.NewManagementServiceClient(conn)
	ag := skiffv1.NewAgentServiceClient(conn)
	ctx := context.Background()
	if _, err := ag.Register(ctx, &skiffv1.RegisterRequest{Node: &skiffv1.Node{Name: "far", UnderlayIp: "192.0.2.200"}}); err != nil {
		return err
	}
	for i := range 10 {
		name := fmt.Sprintf("net%d", i)
		if _, err := mg.CreateNetwork(ctx, &skiffv1.CreateNetworkRequest{Network: &skiffv1.Network{Name: name, Vni: uint32(1000 + i)}}); err != nil {
			return err
		}
		if _, err := mg.CreateSubnet(ctx, &skiffv1.CreateSubnetRequest{Subnet: &skiffv1.Subnet{Name: name + "-v6", Network: name, Cidr: fmt.Sprintf("2001:db8:0:%d::/64", i)}}); err != nil {
			return err
		}
	}
	start := time.Now()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	jobs := make(chan *skiffv1.Endpoint)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range jobs {
				if _, err := mg.CreateEndpoint(ctx, &skiffv1.CreateEndpointRequest{Endpoint: e}); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range 250 {
		jobs <- &skiffv1.Endpoint{Name: fmt.Sprintf("local-%d", i), Network: fmt.Sprintf("net%d", i%10), Node: "n1"}
	}
	for i := range 5000 {
		jobs <- &skiffv1.Endpoint{Name: fmt.Sprintf("remote-%d", i), Network: fmt.Sprintf("net%d", i%10), Node: "far"}
	}
	close(jobs)
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("%d creates failed, first: %w", len(errs), errs[0])
	}
	fmt.Printf("5250 endpoints created in %v\n", time.Since(start).Round(time.Millisecond))
	return nil
}
