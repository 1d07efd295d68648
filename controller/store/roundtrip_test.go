package store_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/skiff-sdn/skiff/controller/store"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// roundTripKV counts and times the calls made through it by kind: a
// linearizable read (etcd answers it once every write it knows of is
// applied: under a stream of writes, a wait for their commit), a
// serializable read (the member's applied state, at once), a write. It
// also counts the keys etcd visited for the reads: the Count of every
// range response (the keys in the range, whatever the options: a
// count-only read walks them all too).
type roundTripKV struct {
	clientv3.KV
	keys atomic.Int64
	// beforeWrite, if set, is called before each write is sent.
	beforeWrite func()
	mu          sync.Mutex
	calls       map[string]int
	spent       map[string]time.Duration
}

func newRoundTripKV(kv clientv3.KV) *roundTripKV {
	return &roundTripKV{KV: kv, calls: map[string]int{}, spent: map[string]time.Duration{}}
}

func (c *roundTripKV) record(ops []clientv3.Op, conds bool, d time.Duration) {
	kind := "serializable read"
	for _, op := range ops {
		switch {
		case !op.IsGet() || conds:
			kind = "write"
		case !op.IsSerializable() && kind != "write":
			kind = "linearizable read"
		}
	}
	c.mu.Lock()
	c.calls[kind]++
	c.spent[kind] += d
	c.mu.Unlock()
}

func (c *roundTripKV) take() (map[string]int, map[string]time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls, spent := c.calls, c.spent
	c.calls, c.spent = map[string]int{}, map[string]time.Duration{}
	return calls, spent
}

func (c *roundTripKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	t0 := time.Now()
	r, err := c.KV.Get(ctx, key, opts...)
	if err == nil {
		c.keys.Add(r.Count)
	}
	c.record([]clientv3.Op{clientv3.OpGet(key, opts...)}, false, time.Since(t0))
	return r, err
}

func (c *roundTripKV) Txn(ctx context.Context) clientv3.Txn {
	return &roundTripTxn{Txn: c.KV.Txn(ctx), c: c}
}

type roundTripTxn struct {
	clientv3.Txn
	c     *roundTripKV
	conds bool
	ops   []clientv3.Op
}

func (t *roundTripTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.conds = t.conds || len(cs) > 0
	t.Txn = t.Txn.If(cs...)
	return t
}

func (t *roundTripTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.ops = append(t.ops, ops...)
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *roundTripTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }

func (t *roundTripTxn) Commit() (*clientv3.TxnResponse, error) {
	if t.c.beforeWrite != nil && t.conds {
		t.c.beforeWrite()
	}
	t0 := time.Now()
	r, err := t.Txn.Commit()
	if err == nil {
		t.c.keys.Add(rangeKeys(r.Responses))
	}
	t.c.record(t.ops, t.conds, time.Since(t0))
	return r, err
}

// countedReplica is a store on a client of its own whose calls kv counts.
func countedReplica(t *testing.T) (*store.Store, *roundTripKV) {
	cli := newClient(t)
	kv := newRoundTripKV(cli.KV)
	cli.KV = kv
	return replica(t, cli), kv
}

// TestCreateRoundTrips: an endpoint creation (with an owner, as the
// Kubernetes adapter makes them) waits for etcd's commit of other writes
// at most once before its own transaction: one linearizable read, then
// the transaction. Each linearizable read waits for every write etcd
// knows of to be applied, so five of them in a row (the name, the
// network, its state, the owner, the probe: the code before) made a
// creation under a stream of writes wait about six commits.
func TestCreateRoundTrips(t *testing.T) {
	ctx := context.Background()
	s, kv := countedReplica(t)
	mustNetwork(t, s, "rt", 300, "192.0.2.0/24", "2001:db8:30::/64")
	kv.take()
	for i := range 10 {
		if _, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: fmt.Sprintf("rt-%d", i), Network: "rt", Node: "n1",
			Owner: fmt.Sprintf("pod:ns/rt-%d", i), Namespace: "ns", Labels: map[string]string{"app": "a"}}); err != nil {
			t.Fatal(err)
		}
	}
	calls, _ := kv.take()
	t.Logf("calls for 10 creations: %v", calls)
	if calls["write"] != 10 {
		t.Errorf("writes: %d for 10 creations, want 10 (no lost race here)", calls["write"])
	}
	if n := calls["linearizable read"]; n > 10 {
		t.Errorf("linearizable reads: %d for 10 creations, want at most 10 (one each)", n)
	}
	// A creation still finds what was just written, by it or another
	// client, and refuses what it must.
	if _, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "rt-0", Network: "rt", Node: "n1"}); err == nil {
		t.Error("rt-0 created twice")
	}
	if _, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "rt-x", Network: "nonet", Node: "n1"}); err == nil {
		t.Error("endpoint created on a network that does not exist")
	}
}

// TestIsolatedSubnetsDoNotConflict: subnets created at once on many
// isolated networks (tenants, which may reuse addresses) do not make each
// other retry: each is one write. Every subnet's creation compared every
// other subnet's revision before, so of 32 creations that had all read
// before any wrote, one succeeded per round of retries (and after 64
// attempts a creation gave up with Aborted: the scale harness's setup
// made 8 networks/s with 32 clients).
func TestIsolatedSubnetsDoNotConflict(t *testing.T) {
	ctx := context.Background()
	s, kv := countedReplica(t)
	const n = 32
	for i := range n {
		if _, err := s.CreateNetwork(ctx, &skiffv1.Network{Name: fmt.Sprintf("iso%d", i), Vni: uint32(700 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	// The first n writes wait for each other: every creation has read
	// before any writes.
	var arrived atomic.Int32
	all := make(chan struct{})
	kv.beforeWrite = func() {
		switch k := arrived.Add(1); {
		case k == n:
			close(all)
		case k < n:
			select {
			case <-all:
			case <-time.After(10 * time.Second): // not all came: the count below says so
			}
		}
	}
	kv.take()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.CreateSubnet(ctx, &skiffv1.Subnet{Name: fmt.Sprintf("iso%d-v4", i), Network: fmt.Sprintf("iso%d", i), Cidr: "198.51.100.0/24"}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	calls, _ := kv.take()
	if calls["write"] != n {
		t.Errorf("%d writes for %d subnets on isolated networks, want %d (none retried)", calls["write"], n, n)
	}
	// A routed network's subnet overlapping them is still refused, and an
	// isolated one overlapping a routed one too.
	if _, err := s.CreateNetwork(ctx, &skiffv1.Network{Name: "routed", Vni: 799, Egress: "snat"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSubnet(ctx, &skiffv1.Subnet{Name: "routed-v4", Network: "routed", Cidr: "198.51.100.128/25"}); err == nil {
		t.Error("a routed network's subnet overlapping isolated ones was created")
	}
	if _, err := s.CreateSubnet(ctx, &skiffv1.Subnet{Name: "routed-v4", Network: "routed", Cidr: "203.0.113.0/24"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSubnet(ctx, &skiffv1.Subnet{Name: "iso0-b", Network: "iso0", Cidr: "203.0.113.0/25"}); err == nil {
		t.Error("an isolated network's subnet overlapping a routed one was created")
	}
}

// BenchmarkCreateConcurrent: creations from 32 clients at once (the scale
// harness's width) on 32 networks: the time one creation takes, p50 and
// p99, and the mean time of each kind of etcd call in it.
func BenchmarkCreateConcurrent(b *testing.B) {
	ctx := context.Background()
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcdCli.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	kv := newRoundTripKV(cli.KV)
	cli.KV = kv
	s := store.New(cli, slog.New(slog.NewTextHandler(io.Discard, nil))).WithPrefix(fmt.Sprintf("/bench/concurrent/%d/", time.Now().UnixNano()))
	const width = 32
	for i := range width {
		if _, err := s.CreateNetwork(ctx, &skiffv1.Network{Name: fmt.Sprintf("c%d", i), Vni: uint32(500 + i)}); err != nil {
			b.Fatal(err)
		}
		if _, err := s.CreateSubnet(ctx, &skiffv1.Subnet{Name: fmt.Sprintf("c%d-v4", i), Network: fmt.Sprintf("c%d", i), Cidr: "198.51.100.0/24"}); err != nil {
			b.Fatal(err)
		}
	}
	kv.take()
	var next atomic.Int64
	lat := make([][]time.Duration, width)
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range width {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				j := next.Add(1)
				if j > int64(b.N) {
					return
				}
				t0 := time.Now()
				name := fmt.Sprintf("c%d-e%d", w, j)
				if _, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: name, Network: fmt.Sprintf("c%d", w), Node: "n1",
					Owner: "pod:ns/" + name, Namespace: "ns"}); err != nil {
					b.Error(err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
	calls, spent := kv.take()
	for kind, n := range calls {
		k := strings.ReplaceAll(kind, " ", "-")
		b.ReportMetric(float64(n)/float64(len(all)), k+"s/op")
		b.ReportMetric(float64(spent[kind].Microseconds())/1000/float64(n), k+"-ms")
	}
}
