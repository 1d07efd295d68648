package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/skiff-sdn/skiff/controller/store"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

func rangeKeys(rs []*pb.ResponseOp) int64 {
	var n int64
	for _, r := range rs {
		if rr := r.GetResponseRange(); rr != nil {
			n += rr.Count
		}
		if tr := r.GetResponseTxn(); tr != nil {
			n += rangeKeys(tr.Responses)
		}
	}
	return n
}

// newClient returns a client of its own on the test etcd, as another
// controller replica would have.
func newClient(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcdCli.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// replica returns a store on a client of its own under the test's prefix.
func replica(t *testing.T, cli *clientv3.Client) *store.Store {
	return store.New(cli, slog.New(slog.NewTextHandler(io.Discard, nil))).WithPrefix(prefixOf(t))
}

// TestCreateReadsBoundedKeys: an endpoint creation reads a bounded number of
// keys, whatever the number of addresses already allocated on its
// network. Reading (or counting) the network's allocations fails it.
func TestCreateReadsBoundedKeys(t *testing.T) {
	ctx := context.Background()
	cli := newClient(t)
	kv := newRoundTripKV(cli.KV)
	cli.KV = kv
	s := replica(t, cli)
	mustNetwork(t, s, "big", 100, "2001:db8:1::/64")
	mustNetwork(t, s, "other", 101, "2001:db8:2::/64")
	// Creations on one network, and its allocations, must not cost
	// reads on another.
	create := func(net string, n, from int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += 8 {
					if _, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: fmt.Sprintf("%s-%d", net, from+i), Network: net, Node: "n1"}); err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	// perCreate returns the most keys one creation on net read, over 20.
	perCreate := func(net string, from int) int64 {
		t.Helper()
		var most int64
		for i := range 20 {
			before := kv.keys.Load()
			if _, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: fmt.Sprintf("%s-m%d", net, from+i), Network: net, Node: "n1"}); err != nil {
				t.Fatal(err)
			}
			most = max(most, kv.keys.Load()-before)
		}
		return most
	}
	small := perCreate("big", 0)
	create("big", 600, 0)
	large := perCreate("big", 100)
	create("other", 600, 0)
	t.Logf("keys read by one creation: %d with 0-20 allocations, %d with 600-620", small, large)
	// What one creation reads: the endpoint's name, the network, its
	// subnets, guard and locks, and its candidate addresses; 600
	// allocations would show.
	const bound = 32
	if small > bound || large > bound {
		t.Fatalf("one creation read %d keys with 20 allocations on its network and %d with 620; want at most %d each", small, large, bound)
	}
}

// TestTwoReplicasFillSubnet: two stores on clients of their own (two
// controller replicas) create endpoints at once until their subnet is
// full: every address is given exactly once, the next creation is refused
// naming the subnet, and an address freed is given again.
func TestTwoReplicasFillSubnet(t *testing.T) {
	ctx := context.Background()
	a, b := replica(t, newClient(t)), replica(t, newClient(t))
	mustNetwork(t, a, "blue", 100, "198.51.100.0/26")
	// Allocatable: .2 to .62 (.0 network, .1 the gateway, .63 broadcast).
	const workers = 8
	var (
		mu   sync.Mutex
		got  = map[string]string{} // address -> endpoint
		dups []string
		full atomic.Int64
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for w := range workers {
		s := a
		if w%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				name := fmt.Sprintf("ep-%d", next.Add(1))
				e, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: name, Network: "blue", Node: "n1"})
				if errors.Is(err, store.ErrExhausted) {
					full.Add(1)
					return
				}
				if err != nil {
					t.Errorf("create %s: %v", name, err)
					return
				}
				mu.Lock()
				if o, dup := got[e.Ips[0]]; dup {
					dups = append(dups, fmt.Sprintf("%s given to %s and %s", e.Ips[0], o, name))
				}
				got[e.Ips[0]] = name
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(dups) > 0 {
		t.Fatalf("duplicate addresses: %v", dups)
	}
	if full.Load() != workers {
		t.Fatalf("%d of %d workers saw the subnet exhausted", full.Load(), workers)
	}
	want := map[string]bool{}
	for i := 2; i <= 62; i++ {
		want[netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), 26).String()] = true
	}
	for ip := range got {
		if !want[ip] {
			t.Errorf("%s given: not allocatable", ip)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("subnet refused as exhausted after %d addresses, want all %d of .2-.62", len(got), len(want))
	}
	_, err := b.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "one-more", Network: "blue", Node: "n1"})
	if !errors.Is(err, store.ErrExhausted) || !strings.Contains(err.Error(), `no free address left in subnet(s) blue-0 of network "blue"`) {
		t.Fatalf("creation on a full subnet: got %v, want exhausted naming subnet blue-0", err)
	}
	// An address freed by one replica is given by the other.
	var victim, addr string
	for ip, name := range got {
		victim, addr = name, ip
		break
	}
	if err := a.DeleteEndpoint(ctx, victim); err != nil {
		t.Fatal(err)
	}
	e, err := b.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "reuse", Network: "blue", Node: "n1"})
	if err != nil {
		t.Fatalf("creation after freeing %s: %v", addr, err)
	}
	if e.Ips[0] != addr {
		t.Fatalf("got %v, want the only free address %s", e.Ips, addr)
	}
	all, err := a.ListEndpoints(ctx, "blue", "")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, e := range all {
		if o, dup := seen[e.Ips[0]]; dup {
			t.Errorf("stored: %s held by %s and %s", e.Ips[0], o, e.Name)
		}
		seen[e.Ips[0]] = e.Name
	}
	if len(seen) != len(got) {
		t.Fatalf("%d endpoints stored, %d created", len(seen), len(got))
	}
}

// BenchmarkCreateEndpoint creates endpoints (and deletes them again, so
// that the network's size stays put) on networks already holding 1,000 and
// 20,000 endpoints: a creation's cost should not depend on it.
func BenchmarkCreateEndpoint(b *testing.B) {
	ctx := context.Background()
	s := store.New(etcdCli, slog.New(slog.NewTextHandler(io.Discard, nil))).WithPrefix("/bench/create/")
	for i, size := range []int{1000, 20000} {
		net := fmt.Sprintf("net%d", size)
		if _, err := s.CreateNetwork(ctx, &skiffv1.Network{Name: net, Vni: uint32(200 + i)}); err != nil {
			b.Fatal(err)
		}
		if _, err := s.CreateSubnet(ctx, &skiffv1.Subnet{Name: net + "-v6", Network: net, Cidr: fmt.Sprintf("2001:db8:%x::/64", 16+i)}); err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		var failed atomic.Value
		for w := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := w; j < size; j += 16 {
					if _, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: fmt.Sprintf("%s-%d", net, j), Network: net, Node: "n1"}); err != nil {
						failed.Store(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if err, ok := failed.Load().(error); ok {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("allocations=%d", size), func(b *testing.B) {
			n := 0
			for b.Loop() {
				name := fmt.Sprintf("%s-b%d", net, n)
				n++
				if _, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: name, Network: net, Node: "n1"}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := s.DeleteEndpoint(ctx, name); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
