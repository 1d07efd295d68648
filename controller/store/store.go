// Package store keeps Skiff's objects in etcd: networks, subnets, endpoints
// and nodes, with their uniqueness indexes and address allocations. Every
// change is one etcd transaction guarded by compares, so several controller
// replicas may share one etcd cluster: a VNI, a name, an IP on a network or a
// MAC on a network belongs to at most one object whatever the concurrency.
//
//	st := store.New(etcdClient, logger)
//	net, err := st.CreateNetwork(ctx, &skiffv1.Network{Name: "blue", Vni: 100})
//	ep, err := st.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "pod-a", Network: "blue", Node: "n1"})
//
// Errors are *Error values: their Kind says what went wrong (Invalid,
// NotFound, AlreadyExists, FailedPrecondition, Exhausted, Aborted) and Field
// names the field at fault.
//
// Key layout under the prefix (default /skiff/v1/):
//
//	networks/NET            Network            vni/VNI -> NET
//	snet/NET/SUB            Subnet             subnets/SUB -> NET
//	subnetguard/NET         bumped on every subnet change of NET
//	routedguard             bumped on every subnet creation on a network whose egress is not none
//	netlock/NET, sublock/NET/SUB   held while a delete checks for users
//	endpoints/EP            Endpoint           epnet/NET/EP
//	ipalloc/NET/ADDR -> EP  macalloc/NET/MAC -> EP
//	nodes/NODE              Node               vtep/ADDR -> NODE
//	status/NODE             leased: the node's agent is connected
//	owners/OWNER            Owner (OWNER path-escaped)
//	epowner/OWNER/EP        the owner's endpoints
package store

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
)

// DefaultPrefix is where Skiff keeps its keys in etcd.
const DefaultPrefix = "/skiff/v1/"

// Aborted means a change kept losing races with concurrent changes; the
// caller may retry.
const Aborted Kind = Exhausted + 1

const maxAttempts = 64

// Store is Skiff's etcd-backed object store. It is safe for concurrent use;
// all state lives in etcd.
type Store struct {
	cli    *clientv3.Client
	log    *slog.Logger
	prefix string
	hist   HistoryReader // nil: Changes reads through watches
	leases *statusLeases // shared by the copies WithPrefix makes
}

// New returns a store on cli under DefaultPrefix.
func New(cli *clientv3.Client, log *slog.Logger) *Store {
	return &Store{cli: cli, log: log, prefix: DefaultPrefix, leases: &statusLeases{m: map[int64]*statusLease{}}}
}

// WithPrefix returns a store using another key prefix (tests).
func (s *Store) WithPrefix(p string) *Store {
	c := *s
	c.prefix = p
	return &c
}

// Client returns the etcd client.
func (s *Store) Client() *clientv3.Client { return s.cli }

func (s *Store) k(parts ...string) string { return s.prefix + strings.Join(parts, "/") }

func (s *Store) netKey(n string) string           { return s.k("networks", n) }
func (s *Store) vniKey(v uint32) string           { return s.k("vni", fmt.Sprint(v)) }
func (s *Store) subnetKey(net, sub string) string { return s.k("snet", net, sub) }
func (s *Store) subnetName(sub string) string     { return s.k("subnets", sub) }
func (s *Store) subnetGuard(net string) string    { return s.k("subnetguard", net) }
func (s *Store) netLock(net string) string        { return s.k("netlock", net) }
func (s *Store) routedGuard() string              { return s.k("routedguard") }
func (s *Store) subLock(net, sub string) string   { return s.k("sublock", net, sub) }
func (s *Store) epKey(ep string) string           { return s.k("endpoints", ep) }
func (s *Store) epNetKey(net, ep string) string   { return s.k("epnet", net, ep) }
func (s *Store) ipKey(net string, a netip.Addr) string {
	return s.k("ipalloc", net, a.String())
}
func (s *Store) macKey(net, mac string) string { return s.k("macalloc", net, mac) }
func (s *Store) nodeKey(n string) string       { return s.k("nodes", n) }
func (s *Store) vtepKey(a string) string       { return s.k("vtep", a) }
func (s *Store) statusKey(n string) string     { return s.k("status", n) }
func (s *Store) awayKey(n string) string       { return s.k("away", n) }

func notExist(key string) clientv3.Cmp { return clientv3.Compare(clientv3.CreateRevision(key), "=", 0) }
func modRev(key string, r int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(key), "=", r)
}

func marshal(m proto.Message) string {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("store: marshal %T: %v", m, err)) // cannot happen for valid messages
	}
	return string(b)
}

func unmarshal[T any, P interface {
	*T
	proto.Message
}](b []byte) (P, error) {
	m := P(new(T))
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("store: decode %T: %w", m, err)
	}
	return m, nil
}

func list[T any, P interface {
	*T
	proto.Message
}](ctx context.Context, s *Store, prefix string, rev int64, setRev func(P, int64)) ([]P, error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend)}
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := s.cli.Get(ctx, prefix, opts...)
	if err != nil {
		return nil, fmt.Errorf("store: list %s: %w", strings.TrimPrefix(prefix, s.prefix), err)
	}
	out := make([]P, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		m, err := unmarshal[T, P](kv.Value)
		if err != nil {
			return nil, fmt.Errorf("key %s: %w", kv.Key, err)
		}
		setRev(m, kv.ModRevision)
		out = append(out, m)
	}
	return out, nil
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "...")
	}
	return s
}

// lastSeg returns the part of key after its last slash.
func lastSeg(key []byte) string {
	k := string(key)
	return k[strings.LastIndexByte(k, '/')+1:]
}
