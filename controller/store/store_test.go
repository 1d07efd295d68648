package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/skiff-sdn/skiff/controller/etcdserver"
	"github.com/skiff-sdn/skiff/controller/store"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

var (
	etcdCli *clientv3.Client
	etcdSrv *etcdserver.Server
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "skiff-store-test")
	if err != nil {
		panic(err)
	}
	srv, err := etcdserver.Start(context.Background(), etcdserver.Config{Dir: dir}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		panic(err)
	}
	etcdCli, etcdSrv = srv.Client(), srv
	code := m.Run()
	srv.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

// newStore returns a store under a prefix of its own.
func newStore(t *testing.T) *store.Store {
	t.Helper()
	return store.New(etcdCli, slog.New(slog.NewTextHandler(io.Discard, nil))).WithPrefix("/test/" + t.Name() + "/")
}

func prefixOf(t *testing.T) string { return "/test/" + t.Name() + "/" }

// dump returns every key and value under the test's prefix.
func dump(t *testing.T) map[string]string {
	t.Helper()
	resp, err := etcdCli.Get(context.Background(), prefixOf(t), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

func mustNetwork(t *testing.T, s *store.Store, name string, vni uint32, cidrs ...string) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.CreateNetwork(ctx, &skiffv1.Network{Name: name, Vni: vni}); err != nil {
		t.Fatal(err)
	}
	for i, c := range cidrs {
		if _, err := s.CreateSubnet(ctx, &skiffv1.Subnet{Name: fmt.Sprintf("%s-%d", name, i), Network: name, Cidr: c}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBadInputIsRefusedAndStoresNothing(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	mustNetwork(t, s, "blue", 100, "192.0.2.0/30")
	if _, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "only", Network: "blue", Node: "n1"}); err != nil {
		t.Fatal(err) // the /30 has one address left after the gateway
	}
	tests := []struct {
		name      string
		do        func() error
		kind      *store.Error
		wantField string
		wantWords string
	}{
		{"vni 0", func() error { _, err := s.CreateNetwork(ctx, &skiffv1.Network{Name: "x", Vni: 0}); return err }, store.ErrInvalid, "vni", "1..16777215"},
		{"vni too large", func() error { _, err := s.CreateNetwork(ctx, &skiffv1.Network{Name: "x", Vni: 16777216}); return err }, store.ErrInvalid, "vni", "16777216"},
		{"duplicate vni", func() error { _, err := s.CreateNetwork(ctx, &skiffv1.Network{Name: "x", Vni: 100}); return err }, store.ErrAlreadyExists, "vni", `network "blue"`},
		{"duplicate name", func() error { _, err := s.CreateNetwork(ctx, &skiffv1.Network{Name: "blue", Vni: 7}); return err }, store.ErrAlreadyExists, "name", "already exists"},
		{"bad network name", func() error { _, err := s.CreateNetwork(ctx, &skiffv1.Network{Name: "Blue_1", Vni: 7}); return err }, store.ErrInvalid, "name", "[a-z0-9.-]"},
		{"bad mtu", func() error {
			_, err := s.CreateNetwork(ctx, &skiffv1.Network{Name: "x", Vni: 7, Mtu: 100})
			return err
		}, store.ErrInvalid, "mtu", "576..9216"},
		{"malformed cidr", func() error {
			_, err := s.CreateSubnet(ctx, &skiffv1.Subnet{Name: "s", Network: "blue", Cidr: "198.51.100.0/33"})
			return err
		}, store.ErrInvalid, "cidr", "not a CIDR"},
		{"cidr with host bits", func() error {
			_, err := s.CreateSubnet(ctx, &skiffv1.Subnet{Name: "s", Network: "blue", Cidr: "198.51.100.7/24"})
			return err
		}, store.ErrInvalid, "cidr", "198.51.100.0/24"},
		{"gateway outside", func() error {
			_, err := s.CreateSubnet(ctx, &skiffv1.Subnet{Name: "s", Network: "blue", Cidr: "198.51.100.0/24", Gateway: "203.0.113.1"})
			return err
		}, store.ErrInvalid, "gateway", "not a usable address"},
		{"overlapping subnet", func() error {
			_, err := s.CreateSubnet(ctx, &skiffv1.Subnet{Name: "s", Network: "blue", Cidr: "192.0.2.0/24"})
			return err
		}, store.ErrInvalid, "cidr", "overlaps"},
		{"subnet on unknown network", func() error {
			_, err := s.CreateSubnet(ctx, &skiffv1.Subnet{Name: "s", Network: "nope", Cidr: "198.51.100.0/24"})
			return err
		}, store.ErrNotFound, "network", `"nope" does not exist`},
		{"endpoint on unknown network", func() error {
			_, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "e", Network: "nope", Node: "n1"})
			return err
		}, store.ErrNotFound, "network", `"nope" does not exist`},
		{"node name with bad characters", func() error {
			_, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "e", Network: "blue", Node: "Node_1"})
			return err
		}, store.ErrInvalid, "node", "[a-z0-9.-]"},
		{"full subnet", func() error {
			_, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "e", Network: "blue", Node: "n1"})
			return err
		}, store.ErrExhausted, "ips", "no free address"},
		{"bad kind", func() error {
			_, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "e", Network: "blue", Node: "n1", Kind: "macvlan"})
			return err
		}, store.ErrInvalid, "kind", "veth"},
		{"multicast mac", func() error {
			_, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "e", Network: "blue", Node: "n1", Mac: "01:00:5e:00:00:01"})
			return err
		}, store.ErrInvalid, "mac", "multicast"},
		{"bad label", func() error {
			_, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "e", Network: "blue", Node: "n1", Labels: map[string]string{"app": "a b"}})
			return err
		}, store.ErrInvalid, "labels", `"a b"`},
		{"requested gateway ip", func() error {
			_, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "e", Network: "blue", Node: "n1", Ips: []string{"192.0.2.1"}})
			return err
		}, store.ErrInvalid, "ips[0]", "gateway"},
		{"requested ip outside", func() error {
			_, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "e", Network: "blue", Node: "n1", Ips: []string{"203.0.113.9"}})
			return err
		}, store.ErrInvalid, "ips[0]", "not inside any subnet"},
		{"duplicate endpoint", func() error {
			_, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "only", Network: "blue", Node: "n1"})
			return err
		}, store.ErrAlreadyExists, "name", "already exists"},
		{"node with bad underlay", func() error {
			_, err := s.RegisterNode(ctx, &skiffv1.Node{Name: "n1", UnderlayIp: "192.0.2.300"})
			return err
		}, store.ErrInvalid, "underlayIp", "not an IP"},
		{"delete network with endpoints", func() error { return s.DeleteNetwork(ctx, "blue") }, store.ErrFailedPrecondition, "", `endpoint(s) (only)`},
		{"delete subnet with allocations", func() error { return s.DeleteSubnet(ctx, "blue-0") }, store.ErrFailedPrecondition, "", "only"},
	}
	for _, tc := range tests {
		before := dump(t)
		err := tc.do()
		if err == nil {
			t.Errorf("%s: accepted, want an error", tc.name)
			continue
		}
		var se *store.Error
		if !errors.As(err, &se) || !errors.Is(err, tc.kind) {
			t.Errorf("%s: error %v (%T), want kind %v", tc.name, err, err, tc.kind.Kind)
		}
		if se != nil && se.Field != tc.wantField {
			t.Errorf("%s: field %q, want %q (error %q)", tc.name, se.Field, tc.wantField, err)
		}
		if !strings.Contains(err.Error(), tc.wantWords) {
			t.Errorf("%s: error %q does not say %q", tc.name, err, tc.wantWords)
		}
		after := dump(t)
		if fmt.Sprint(before) != fmt.Sprint(after) {
			t.Errorf("%s: the store changed:\nbefore %v\nafter  %v", tc.name, before, after)
		}
	}
}

func TestConcurrentAllocationsAreUnique(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	mustNetwork(t, s, "blue", 100, "198.51.100.0/23", "2001:db8::/64")
	const clients, each = 20, 10
	var wg sync.WaitGroup
	var mu sync.Mutex
	eps := map[string]*skiffv1.Endpoint{}
	errs := make(chan error, clients*each)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				e, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: fmt.Sprintf("ep-%d-%d", c, i), Network: "blue", Node: fmt.Sprintf("n%d", c%3)})
				if err != nil {
					errs <- err
					continue
				}
				mu.Lock()
				eps[e.Name] = e
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	ips, macs := map[string]string{}, map[string]string{}
	for _, e := range eps {
		if len(e.Ips) != 2 {
			t.Fatalf("%s has %v, want one v4 and one v6 address", e.Name, e.Ips)
		}
		for _, ip := range e.Ips {
			if o, dup := ips[ip]; dup {
				t.Errorf("%s given to %s and %s", ip, o, e.Name)
			}
			ips[ip] = e.Name
		}
		if o, dup := macs[e.Mac]; dup {
			t.Errorf("MAC %s given to %s and %s", e.Mac, o, e.Name)
		}
		macs[e.Mac] = e.Name
	}
	if len(eps) != clients*each {
		t.Fatalf("%d endpoints created, want %d", len(eps), clients*each)
	}
	listed, err := s.ListEndpoints(ctx, "blue", "")
	if err != nil || len(listed) != clients*each {
		t.Fatalf("list: %d endpoints, err %v", len(listed), err)
	}
}

func TestDeleteFreesAddressesAndAllowsNetworkDelete(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	mustNetwork(t, s, "blue", 100, "192.0.2.0/30")
	e, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "a", Network: "blue", Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Ips[0] != "192.0.2.2/30" {
		t.Fatalf("got %v, want the only free address 192.0.2.2/30", e.Ips)
	}
	if err := s.DeleteEndpoint(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteEndpoint(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: got %v, want not found", err)
	}
	_, err = s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "b", Network: "blue", Node: "n1", Ips: []string{"192.0.2.2"}})
	if err != nil {
		t.Fatalf("freed address not reusable: %v", err)
	}
	if err := s.DeleteEndpoint(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteNetwork(ctx, "blue"); err != nil {
		t.Fatal(err)
	}
	if d := dump(t); len(d) != 0 {
		t.Fatalf("keys left after deleting everything: %v", d)
	}
	// Names and VNI are free again.
	mustNetwork(t, s, "blue", 100, "192.0.2.0/24")
}

func TestSameCIDROnTwoNetworks(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	mustNetwork(t, s, "blue", 100, "192.0.2.0/24")
	mustNetwork(t, s, "red", 200, "192.0.2.0/24")
	a, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "a", Network: "blue", Node: "n1", Ips: []string{"192.0.2.10"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "b", Network: "red", Node: "n1", Ips: []string{"192.0.2.10"}})
	if err != nil {
		t.Fatal(err)
	}
	if a.Ips[0] != b.Ips[0] {
		t.Fatalf("got %v and %v", a.Ips, b.Ips)
	}
	_, err = s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "c", Network: "red", Node: "n1", Ips: []string{"192.0.2.10"}})
	if !errors.Is(err, store.ErrAlreadyExists) || !strings.Contains(err.Error(), `"b"`) {
		t.Fatalf("taken address: got %v", err)
	}
}

func TestRegisterNodeIsIdempotentAndVTEPsUnique(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	n1, err := s.RegisterNode(ctx, &skiffv1.Node{Name: "n1", UnderlayIp: "192.0.2.1", Mode: "software"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.RegisterNode(ctx, &skiffv1.Node{Name: "n1", UnderlayIp: "192.0.2.1", Mode: "software"})
	if err != nil {
		t.Fatal(err)
	}
	if again.Revision != n1.Revision {
		t.Fatalf("re-registering the same node wrote to the store (revision %d -> %d)", n1.Revision, again.Revision)
	}
	_, err = s.RegisterNode(ctx, &skiffv1.Node{Name: "n2", UnderlayIp: "192.0.2.1"})
	if !errors.Is(err, store.ErrAlreadyExists) || !strings.Contains(err.Error(), "underlayIp") {
		t.Fatalf("duplicate VTEP: got %v", err)
	}
	if _, err := s.RegisterNode(ctx, &skiffv1.Node{Name: "n1", UnderlayIp: "192.0.2.2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RegisterNode(ctx, &skiffv1.Node{Name: "n2", UnderlayIp: "192.0.2.1"}); err != nil {
		t.Fatalf("old VTEP of n1 not released: %v", err)
	}
}

// TestRegisterNodeHostIP: a node's host address is of the other family
// than its VTEP, routable, and no other node's underlay or host address;
// bad ones are refused naming hostIp, storing nothing; a changed or
// dropped one is released, and a deleted node releases its own.
func TestRegisterNodeHostIP(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	reg := func(name, ul, host string) error {
		_, err := s.RegisterNode(ctx, &skiffv1.Node{Name: name, UnderlayIp: ul, HostIp: host, Mode: "software"})
		return err
	}
	if err := reg("n1", "192.0.2.1", "2001:db8::1"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, ul, host string
		kind           error
		msg            string
	}{
		{"n2", "192.0.2.2", "nonsense", store.ErrInvalid, `hostIp: "nonsense" is not an IP address`},
		{"n2", "192.0.2.2", "198.51.100.2", store.ErrInvalid, "hostIp: 198.51.100.2 is of the underlay address 192.0.2.2's family"},
		{"n2", "192.0.2.2", "fe80::2", store.ErrInvalid, "hostIp: fe80::2 is not a unicast address"},
		{"n2", "192.0.2.2", "ff02::2", store.ErrInvalid, "hostIp: ff02::2 is not a unicast address"},
		{"n2", "192.0.2.2", "2001:db8::1", store.ErrAlreadyExists, `hostIp: 2001:db8::1 is already an address of node "n1"`},
		{"n2", "2001:db8::1", "192.0.2.9", store.ErrAlreadyExists, `underlayIp: 2001:db8::1 is already an address of node "n1"`},
	} {
		err := reg(c.name, c.ul, c.host)
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s %s: got %v, want %q", c.ul, c.host, err, c.msg)
		}
		if _, err := s.GetNode(ctx, c.name); err == nil {
			t.Errorf("%s %s: the refused node was stored", c.ul, c.host)
		}
	}
	// The address moves: n1 gets another, then none; n2 takes the old.
	if err := reg("n1", "192.0.2.1", "2001:db8::11"); err != nil {
		t.Fatal(err)
	}
	if err := reg("n2", "192.0.2.2", "2001:db8::1"); err != nil {
		t.Fatalf("n1's old host address was not released: %v", err)
	}
	if err := reg("n1", "192.0.2.1", ""); err != nil {
		t.Fatal(err)
	}
	if err := reg("n3", "192.0.2.3", "2001:db8::11"); err != nil {
		t.Fatalf("n1's dropped host address was not released: %v", err)
	}
	if err := s.DeleteNode(ctx, "n3"); err != nil {
		t.Fatal(err)
	}
	if err := reg("n4", "2001:db8::11", "192.0.2.3"); err != nil {
		t.Fatalf("deleted n3's addresses were not released: %v", err)
	}
}

func TestReadStateAtRevisionAndWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newStore(t)
	mustNetwork(t, s, "blue", 100, "192.0.2.0/24")
	st0, err := s.ReadState(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		rev  int64
		kind string
		del  bool
	}
	got := make(chan seen, 100)
	go s.Watch(ctx, st0.Revision, func(rev int64, evs []store.Event) error {
		for _, e := range evs {
			got <- seen{rev, e.Kind(), e.Delete}
		}
		return nil
	})
	e, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "a", Network: "blue", Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteEndpoint(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	first, second := <-got, <-got
	if first != (seen{e.Revision, "endpoint", false}) || second.kind != "endpoint" || !second.del {
		t.Fatalf("watch saw %v then %v", first, second)
	}
	old, err := s.ReadState(ctx, e.Revision)
	if err != nil {
		t.Fatal(err)
	}
	if len(old.Endpoints) != 1 || old.Endpoints[0].Name != "a" || len(old.Networks) != 1 || len(old.Subnets) != 1 {
		t.Fatalf("state at %d: %d endpoints, %d networks, %d subnets", e.Revision, len(old.Endpoints), len(old.Networks), len(old.Subnets))
	}
	now, err := s.ReadState(ctx, 0)
	if err != nil || len(now.Endpoints) != 0 {
		t.Fatalf("state now: %v endpoints, err %v", now.Endpoints, err)
	}
	if _, err := netip.ParsePrefix(e.Ips[0]); err != nil {
		t.Fatal(err)
	}
}
