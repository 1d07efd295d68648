package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// State is every object the planner needs, read at one store revision.
type State struct {
	Revision   int64
	Networks   []*skiffv1.Network
	Subnets    []*skiffv1.Subnet
	Endpoints  []*skiffv1.Endpoint
	Nodes      []*skiffv1.Node
	Policies   []*skiffv1.Policy
	Namespaces []*skiffv1.Namespace
	// Connected: the nodes whose agent held a session, with the time it
	// connected; Away: nodes whose agent's last session ended, with the
	// time it did (MarkConnected); DPUReady: the DPUs' reports on their
	// hosts' endpoints.
	Connected map[string]time.Time
	Away      map[string]time.Time
	DPUReady  []*skiffv1.DPUEndpointReport
}

// ErrCompacted is returned by ReadState and Watch when the requested
// revision has been compacted away.
var ErrCompacted = errors.New("store: revision compacted")

// ReadState reads all objects at revision rev, or at the current revision
// when rev is 0.
func (s *Store) ReadState(ctx context.Context, rev int64) (*State, error) {
	st := &State{Revision: rev}
	if rev == 0 {
		cur, err := s.Revision(ctx)
		if err != nil {
			return nil, fmt.Errorf("store: read state: %w", err)
		}
		st.Revision = cur
	}
	var err error
	wrap := func(e error) error {
		if errors.Is(e, rpctypes.ErrCompacted) {
			return fmt.Errorf("%w: %d", ErrCompacted, st.Revision)
		}
		return e
	}
	if st.Networks, err = list[skiffv1.Network](ctx, s, s.k("networks")+"/", st.Revision, func(x *skiffv1.Network, r int64) { x.Revision = r }); err != nil {
		return nil, wrap(err)
	}
	if st.Subnets, err = list[skiffv1.Subnet](ctx, s, s.k("snet")+"/", st.Revision, func(x *skiffv1.Subnet, r int64) { x.Revision = r }); err != nil {
		return nil, wrap(err)
	}
	if st.Endpoints, err = list[skiffv1.Endpoint](ctx, s, s.k("endpoints")+"/", st.Revision, func(x *skiffv1.Endpoint, r int64) { x.Revision = r }); err != nil {
		return nil, wrap(err)
	}
	if st.Nodes, err = list[skiffv1.Node](ctx, s, s.k("nodes")+"/", st.Revision, func(x *skiffv1.Node, r int64) { x.Revision = r }); err != nil {
		return nil, wrap(err)
	}
	if st.Policies, err = list[skiffv1.Policy](ctx, s, s.k("policies")+"/", st.Revision, func(x *skiffv1.Policy, r int64) { x.Revision = r }); err != nil {
		return nil, wrap(err)
	}
	if st.Namespaces, err = list[skiffv1.Namespace](ctx, s, s.k("namespaces")+"/", st.Revision, func(x *skiffv1.Namespace, r int64) { x.Revision = r }); err != nil {
		return nil, wrap(err)
	}
	if st.DPUReady, err = list[skiffv1.DPUEndpointReport](ctx, s, s.k("dpuready")+"/", st.Revision, func(*skiffv1.DPUEndpointReport, int64) {}); err != nil {
		return nil, wrap(err)
	}
	if st.Connected, err = s.timesOf(ctx, "status", st.Revision); err != nil {
		return nil, wrap(err)
	}
	if st.Away, err = s.timesOf(ctx, "away", st.Revision); err != nil {
		return nil, wrap(err)
	}
	return st, nil
}

// Revision returns the store's current revision.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	resp, err := s.cli.Get(ctx, s.k("networks")+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("store: revision: %w", err)
	}
	return resp.Header.Revision, nil
}

// Event is one change of an object. On deletes the object is the last
// stored version.
type Event struct {
	Revision  int64
	Delete    bool
	Network   *skiffv1.Network
	Subnet    *skiffv1.Subnet
	Endpoint  *skiffv1.Endpoint
	Node      *skiffv1.Node
	Policy    *skiffv1.Policy
	Namespace *skiffv1.Namespace
	// Status is a node's agent connecting (a put of its leased status
	// key) or going away (its deletion: the session ended or the lease
	// expired).
	Status *NodeStatus
	// DPUReady is a DPU's report on one of its host's endpoints (on a
	// delete only its Endpoint is set).
	DPUReady *skiffv1.DPUEndpointReport
}

// NodeStatus is whether a node's agent holds a session, and since when
// it connected (zero on a deletion).
type NodeStatus struct {
	Node      string
	Connected bool
	Since     time.Time
}

// Kind names the kind of the event's object: network, subnet, endpoint,
// node, policy, namespace or status.
func (e Event) Kind() string {
	switch {
	case e.Network != nil:
		return "network"
	case e.Subnet != nil:
		return "subnet"
	case e.Endpoint != nil:
		return "endpoint"
	case e.Policy != nil:
		return "policy"
	case e.Namespace != nil:
		return "namespace"
	case e.Status != nil:
		return "status"
	case e.DPUReady != nil:
		return "dpuready"
	default:
		return "node"
	}
}

// Watch calls fn with the object changes of each store revision after
// fromRev, in order, until ctx ends or fn fails. Changes to index and
// allocation keys are not reported. It returns ErrCompacted when fromRev+1
// is no longer in etcd's history.
func (s *Store) Watch(ctx context.Context, fromRev int64, fn func(rev int64, events []Event) error) error {
	ctx = clientv3.WithRequireLeader(ctx)
	wch := s.cli.Watch(ctx, s.prefix, clientv3.WithPrefix(), clientv3.WithRev(fromRev+1), clientv3.WithPrevKV())
	var (
		batch []Event
		cur   int64
	)
	flush := func() error {
		if cur == 0 {
			return nil
		}
		err := fn(cur, batch)
		batch, cur = nil, 0
		return err
	}
	for resp := range wch {
		if err := resp.Err(); err != nil {
			if resp.CompactRevision != 0 || errors.Is(err, rpctypes.ErrCompacted) {
				return fmt.Errorf("%w: watch from %d", ErrCompacted, fromRev)
			}
			return fmt.Errorf("store: watch: %w", err)
		}
		for _, ev := range resp.Events {
			rev := ev.Kv.ModRevision
			if cur != 0 && rev != cur {
				if err := flush(); err != nil {
					return err
				}
			}
			e, ok, err := s.decodeEvent(ev)
			if err != nil {
				return err
			}
			cur = rev
			if ok {
				batch = append(batch, e)
			}
		}
		// A watch response never splits one revision's events.
		if err := flush(); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("store: watch channel closed")
}

func (s *Store) decodeEvent(ev *clientv3.Event) (Event, bool, error) {
	key := strings.TrimPrefix(string(ev.Kv.Key), s.prefix)
	kind, _, _ := strings.Cut(key, "/")
	e := Event{Revision: ev.Kv.ModRevision, Delete: ev.Type == mvccpb.DELETE}
	if kind == "status" {
		e.Status = &NodeStatus{Node: lastSeg(ev.Kv.Key), Connected: !e.Delete}
		if !e.Delete {
			e.Status.Since, _ = time.Parse(time.RFC3339Nano, string(ev.Kv.Value))
		}
		return e, true, nil
	}
	if kind == "dpuready" {
		e.DPUReady = &skiffv1.DPUEndpointReport{Endpoint: lastSeg(ev.Kv.Key)}
		if !e.Delete {
			r, err := unmarshal[skiffv1.DPUEndpointReport](ev.Kv.Value)
			if err != nil {
				return e, false, fmt.Errorf("store: watch: key %s: %w", key, err)
			}
			e.DPUReady = r
		}
		return e, true, nil
	}
	body := ev.Kv.Value
	if e.Delete {
		if ev.PrevKv == nil {
			return e, false, nil
		}
		body = ev.PrevKv.Value
	}
	var err error
	switch kind {
	case "networks":
		e.Network, err = unmarshal[skiffv1.Network](body)
		if err == nil {
			e.Network.Revision = e.Revision
		}
	case "snet":
		e.Subnet, err = unmarshal[skiffv1.Subnet](body)
		if err == nil {
			e.Subnet.Revision = e.Revision
		}
	case "endpoints":
		e.Endpoint, err = unmarshal[skiffv1.Endpoint](body)
		if err == nil {
			e.Endpoint.Revision = e.Revision
		}
	case "nodes":
		e.Node, err = unmarshal[skiffv1.Node](body)
		if err == nil {
			e.Node.Revision = e.Revision
		}
	case "policies":
		e.Policy, err = unmarshal[skiffv1.Policy](body)
		if err == nil {
			e.Policy.Revision = e.Revision
		}
	case "namespaces":
		e.Namespace, err = unmarshal[skiffv1.Namespace](body)
		if err == nil {
			e.Namespace.Revision = e.Revision
		}
	default:
		return e, false, nil
	}
	if err != nil {
		return e, false, fmt.Errorf("store: watch: key %s: %w", key, err)
	}
	return e, true, nil
}
