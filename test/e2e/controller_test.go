package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
	"github.com/skiff-sdn/skiff/test/testkit"
)

func setupNetwork(t *testing.T, m skiffv1.ManagementServiceClient, name string, vni uint32, cidr string) {
	t.Helper()
	ctx := context.Background()
	if _, err := m.CreateNetwork(ctx, &skiffv1.CreateNetworkRequest{Network: &skiffv1.Network{Name: name, Vni: vni}}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateSubnet(ctx, &skiffv1.CreateSubnetRequest{Subnet: &skiffv1.Subnet{Name: name + "-v4", Network: name, Cidr: cidr}}); err != nil {
		t.Fatal(err)
	}
}

// createConcurrently creates clients*each endpoints on network from
// `clients` goroutines, each with its own connection to one of addrs.
func createConcurrently(t *testing.T, addrs []string, network string, clients, each int) map[string]*skiffv1.Endpoint {
	t.Helper()
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		out = map[string]*skiffv1.Endpoint{}
	)
	errs := make(chan error, clients*each)
	for c := range clients {
		m := mgmt(t, addrs[c%len(addrs)])
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				name := fmt.Sprintf("%s-ep-%d-%d", network, c, i)
				e, err := m.CreateEndpoint(context.Background(), &skiffv1.CreateEndpointRequest{Endpoint: &skiffv1.Endpoint{
					Name: name, Network: network, Node: fmt.Sprintf("node-%d", c%5)}})
				if err != nil {
					errs <- fmt.Errorf("%s: %w", name, err)
					continue
				}
				mu.Lock()
				out[e.Name] = e
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	return out
}

// checkUnique fails the test when two endpoints share an IP or a MAC.
func checkUnique(t *testing.T, eps map[string]*skiffv1.Endpoint) map[string]bool {
	t.Helper()
	ips, macs := map[string]string{}, map[string]string{}
	for _, e := range eps {
		if len(e.Ips) != 1 {
			t.Errorf("%s has %v, want one address", e.Name, e.Ips)
		}
		for _, ip := range e.Ips {
			if o, ok := ips[ip]; ok {
				t.Errorf("%s given to both %s and %s", ip, o, e.Name)
			}
			ips[ip] = e.Name
		}
		if o, ok := macs[e.Mac]; ok {
			t.Errorf("MAC %s given to both %s and %s", e.Mac, o, e.Name)
		}
		macs[e.Mac] = e.Name
	}
	held := map[string]bool{}
	for ip := range ips {
		held[ip] = true
	}
	return held
}

func TestEmbeddedAllocationsSurviveSIGKILL(t *testing.T) {
	addr, data := testkit.FreeAddr(t), t.TempDir()
	c := startController(t, addr, "--data-dir", data)
	m := mgmt(t, addr)
	setupNetwork(t, m, "blue", 100, "198.51.100.0/22")

	eps := createConcurrently(t, []string{addr}, "blue", 50, 10)
	if len(eps) != 500 {
		t.Fatalf("%d endpoints created, want 500", len(eps))
	}
	held := checkUnique(t, eps)

	c.kill()
	startController(t, addr, "--data-dir", data)
	m = mgmt(t, addr)
	list, err := m.ListEndpoints(context.Background(), &skiffv1.ListRequest{Network: "blue"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Endpoints) != 500 {
		t.Fatalf("after restart: %d endpoints, want 500", len(list.Endpoints))
	}
	for _, e := range list.Endpoints {
		before := eps[e.Name]
		if before == nil || before.Mac != e.Mac || fmt.Sprint(before.Ips) != fmt.Sprint(e.Ips) {
			t.Errorf("after restart %s is %v %v, was %v", e.Name, e.Mac, e.Ips, before)
		}
	}
	nets, err := m.ListNetworks(context.Background(), &skiffv1.ListRequest{})
	if err != nil || len(nets.Networks) != 1 || nets.Networks[0].Vni != 100 {
		t.Fatalf("after restart networks = %v, %v", nets, err)
	}
	for i := range 20 {
		e, err := m.CreateEndpoint(context.Background(), &skiffv1.CreateEndpointRequest{Endpoint: &skiffv1.Endpoint{
			Name: fmt.Sprintf("late-%d", i), Network: "blue", Node: "node-1"}})
		if err != nil {
			t.Fatal(err)
		}
		if held[e.Ips[0]] {
			t.Fatalf("after restart %s was given %s, which is held", e.Name, e.Ips[0])
		}
		held[e.Ips[0]] = true
	}
}

// startEtcd starts Debian's etcd-server on loopback ports and returns its
// client URL.
func startEtcd(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatal("etcd is not installed: run `make deps` (Debian etcd-server)")
	}
	client, peer := "http://"+testkit.FreeAddr(t), "http://"+testkit.FreeAddr(t)
	dir := t.TempDir()
	logf, _ := os.Create(filepath.Join(dir, "etcd.log"))
	cmd := exec.Command(bin, "--name", "e2e", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "e2e="+peer, "--log-level", "error")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return client
}

func TestReplicasOnExternalEtcd(t *testing.T) {
	etcdURL := startEtcd(t)
	a, b := testkit.FreeAddr(t), testkit.FreeAddr(t)
	startController(t, a, "--etcd-endpoints", etcdURL)
	startController(t, b, "--etcd-endpoints", etcdURL)
	ma, mb := mgmt(t, a), mgmt(t, b)

	// The same VNI asked of both replicas at once: exactly one wins.
	for round := range 10 {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, m := range []skiffv1.ManagementServiceClient{ma, mb} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = m.CreateNetwork(context.Background(), &skiffv1.CreateNetworkRequest{Network: &skiffv1.Network{
					Name: fmt.Sprintf("race-%d-%d", round, i), Vni: uint32(1000 + round)}})
			}()
		}
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: both or neither created VNI %d: %v, %v", round, 1000+round, errs[0], errs[1])
		}
	}

	setupNetwork(t, ma, "blue", 100, "198.51.100.0/22")
	eps := createConcurrently(t, []string{a, b}, "blue", 50, 10)
	if len(eps) != 500 {
		t.Fatalf("%d endpoints created, want 500", len(eps))
	}
	checkUnique(t, eps)
	for _, addr := range []string{a, b} {
		list, err := mgmt(t, addr).ListEndpoints(context.Background(), &skiffv1.ListRequest{})
		if err != nil || len(list.Endpoints) != 500 {
			t.Fatalf("replica %s lists %d endpoints (%v), want 500", addr, len(list.GetEndpoints()), err)
		}
	}
	// Both replicas compute the same plan.
	testkit.Eventually(t, "", 20*time.Second, testkit.NoError(func() error {
		pa, err1 := ma.GetPlan(context.Background(), &skiffv1.GetPlanRequest{Node: "node-1"})
		pb, err2 := mb.GetPlan(context.Background(), &skiffv1.GetPlanRequest{Node: "node-1"})
		if err1 != nil || err2 != nil {
			return fmt.Errorf("%v %v", err1, err2)
		}
		if len(pa.LocalEndpoints) != 100 || fmt.Sprint(pa) != fmt.Sprint(pb) {
			return fmt.Errorf("plans differ or incomplete: %d and %d local endpoints", len(pa.LocalEndpoints), len(pb.LocalEndpoints))
		}
		return nil
	}))
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
