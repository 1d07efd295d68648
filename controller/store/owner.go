package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// ---- owners ----
//
// An owner record (owners/OWNER) is what an orchestrator says about the
// owner of endpoints, such as a pod: its labels and namespace, which its
// endpoints take. The index epowner/OWNER/EP lists an owner's endpoints.
// Whichever comes first, the record or an endpoint, the endpoint ends with
// the record's labels: CreateEndpoint copies them under a compare on the
// record, and SetOwner rewrites the endpoints it indexes under a compare
// that no endpoint joined the index meanwhile. Owner names are escaped in
// keys (a pod's holds a slash).

// PodPrefix starts the owner of a pod's endpoints: "pod:NAMESPACE/NAME".
const PodPrefix = "pod:"

var ownerKindRE = regexp.MustCompile(`^[a-z]{1,32}$`)

func (s *Store) ownerKey(o string) string       { return s.k("owners", url.PathEscape(o)) }
func (s *Store) epOwnerPrefix(o string) string  { return s.k("epowner", url.PathEscape(o)) + "/" }
func (s *Store) epOwnerKey(o, ep string) string { return s.epOwnerPrefix(o) + ep }

// validateOwner checks an owner record and fills a pod's namespace.
func validateOwner(o *skiffv1.Owner) error {
	name := o.GetName()
	kind, id, ok := strings.Cut(name, ":")
	switch {
	case name == "":
		return invalid("name", "required")
	case len(name) > maxNameBytes:
		return invalid("name", "%d characters, at most %d allowed", len(name), maxNameBytes)
	case !ok || !ownerKindRE.MatchString(kind) || id == "":
		return invalid("name", "%q is not KIND:ID (such as pod:NAMESPACE/NAME)", name)
	}
	if kind+":" == PodPrefix {
		ns, pod, ok := strings.Cut(id, "/")
		if !ok || len(ns) > 63 || !namespaceRE.MatchString(ns) || ValidateName("name", pod) != nil {
			return invalid("name", "%q: a pod's owner is pod:NAMESPACE/NAME with a namespace name and a DNS subdomain", name)
		}
		switch o.GetNamespace() {
		case "":
			o.Namespace = ns
		case ns:
		default:
			return invalid("namespace", "%q is not the pod's namespace %q", o.GetNamespace(), ns)
		}
	} else if strings.ContainsAny(id, " \t\n") {
		return invalid("name", "%q holds white space", name)
	}
	if ns := o.GetNamespace(); ns != "" && (len(ns) > 63 || !namespaceRE.MatchString(ns)) {
		return invalid("namespace", "%q is not a valid namespace name", ns)
	}
	if err := validateLabels("labels", o.GetLabels()); err != nil {
		return err
	}
	if u := o.GetUid(); len(u) > 128 || strings.ContainsAny(u, " \t\n/") {
		return invalid("uid", "%q: at most 128 characters, no white space or slash", u)
	}
	if n := o.GetNode(); n != "" {
		if err := ValidateName("node", n); err != nil {
			return err
		}
	}
	if d := o.GetDeleted(); d != nil {
		if err := d.CheckValid(); err != nil {
			return invalid("deleted", "%v", err)
		}
	}
	return nil
}

// ownedLabels applies an owner record to an endpoint; it reports whether
// the endpoint changed.
func ownedLabels(e *skiffv1.Endpoint, o *skiffv1.Owner) bool {
	labels := o.GetLabels()
	ns := e.GetNamespace()
	if o.GetNamespace() != "" {
		ns = o.GetNamespace()
	}
	if maps.Equal(e.GetLabels(), labels) && ns == e.GetNamespace() {
		return false
	}
	e.Labels = maps.Clone(labels)
	e.Namespace = ns
	return true
}

// getOwner reads an owner record and its mod revision (0: none).
func (s *Store) getOwner(ctx context.Context, name string) (*skiffv1.Owner, int64, error) {
	resp, err := s.cli.Get(ctx, s.ownerKey(name))
	if err != nil {
		return nil, 0, fmt.Errorf("store: get owner %q: %w", name, err)
	}
	return ownerFrom(resp.Kvs)
}

// ownerFrom reads an owner record from the answer to a read of its key.
func ownerFrom(kvs []*mvccpb.KeyValue) (*skiffv1.Owner, int64, error) {
	if len(kvs) == 0 {
		return nil, 0, nil
	}
	o, err := unmarshal[skiffv1.Owner](kvs[0].Value)
	if err != nil {
		return nil, 0, err
	}
	o.Revision = kvs[0].ModRevision
	return o, o.Revision, nil
}

// ownerEndpoints reads the endpoints an owner's index lists, and the
// revision the index was read at.
func (s *Store) ownerEndpoints(ctx context.Context, owner string) ([]*skiffv1.Endpoint, int64, error) {
	idx, err := s.cli.Get(ctx, s.epOwnerPrefix(owner), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, 0, fmt.Errorf("store: endpoints of owner %q: %w", owner, err)
	}
	var out []*skiffv1.Endpoint
	for kvs := range slices.Chunk(idx.Kvs, 100) {
		var gets []clientv3.Op
		for _, kv := range kvs {
			gets = append(gets, clientv3.OpGet(s.epKey(lastSeg(kv.Key))))
		}
		resp, err := s.cli.Txn(ctx).Then(gets...).Commit()
		if err != nil {
			return nil, 0, fmt.Errorf("store: endpoints of owner %q: %w", owner, err)
		}
		for _, r := range resp.Responses {
			for _, kv := range r.GetResponseRange().Kvs {
				e, err := unmarshal[skiffv1.Endpoint](kv.Value)
				if err != nil {
					return nil, 0, err
				}
				e.Revision = kv.ModRevision
				out = append(out, e)
			}
		}
	}
	return out, idx.Header.Revision, nil
}

// noNewIndex compares that no endpoint joined owner's index after rev.
func (s *Store) noNewIndex(owner string, rev int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(s.epOwnerPrefix(owner)), "<", rev+1).WithPrefix()
}

// SetOwner creates or replaces an owner record and gives the owner's
// endpoints its labels and namespace, in one transaction. A record and
// endpoints that already say the same write nothing.
func (s *Store) SetOwner(ctx context.Context, in *skiffv1.Owner) (*skiffv1.Owner, error) {
	o := proto.Clone(in).(*skiffv1.Owner)
	o.Revision = 0
	if err := validateOwner(o); err != nil {
		return nil, err
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		cur, curRev, err := s.getOwner(ctx, o.Name)
		if err != nil {
			return nil, err
		}
		eps, idxRev, err := s.ownerEndpoints(ctx, o.Name)
		if err != nil {
			return nil, err
		}
		cmps := []clientv3.Cmp{modRev(s.ownerKey(o.Name), curRev), s.noNewIndex(o.Name, idxRev)}
		var ops []clientv3.Op
		if cur != nil {
			cur.Revision = 0
		}
		if cur == nil || !proto.Equal(cur, o) {
			ops = append(ops, clientv3.OpPut(s.ownerKey(o.Name), marshal(o)))
		}
		for _, e := range eps {
			rev := e.Revision
			e.Revision = 0
			if ownedLabels(e, o) {
				cmps = append(cmps, modRev(s.epKey(e.Name), rev))
				ops = append(ops, clientv3.OpPut(s.epKey(e.Name), marshal(e)))
			}
		}
		if len(ops) == 0 {
			o.Revision = curRev
			return o, nil
		}
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return nil, fmt.Errorf("store: set owner %q: %w", o.Name, err)
		}
		if resp.Succeeded {
			if cur == nil || !proto.Equal(cur, o) {
				o.Revision = resp.Header.Revision
			} else {
				o.Revision = curRev
			}
			return o, nil
		}
	}
	return nil, errorf(Aborted, "", "owner %q kept changing; retry", o.Name)
}

// GetOwner returns an owner record.
func (s *Store) GetOwner(ctx context.Context, name string) (*skiffv1.Owner, error) {
	o, _, err := s.getOwner(ctx, name)
	if err != nil {
		return nil, err
	}
	if o == nil {
		return nil, errorf(NotFound, "", "owner %q does not exist", name)
	}
	return o, nil
}

// ListOwners returns the owner records sorted by name, only those of node
// when it is not empty.
func (s *Store) ListOwners(ctx context.Context, node string) ([]*skiffv1.Owner, error) {
	all, err := list[skiffv1.Owner](ctx, s, s.k("owners")+"/", 0, func(x *skiffv1.Owner, r int64) { x.Revision = r })
	if err != nil {
		return nil, err
	}
	all = slices.DeleteFunc(all, func(o *skiffv1.Owner) bool { return node != "" && o.Node != node })
	slices.SortFunc(all, func(a, b *skiffv1.Owner) int { return strings.Compare(a.Name, b.Name) })
	return all, nil
}

// DeleteOwner deletes an owner record, only when its uid is uid (unless
// uid is empty), and with endpoints every endpoint of the owner, in one
// transaction. It returns the endpoints deleted.
func (s *Store) DeleteOwner(ctx context.Context, name, uid string, endpoints bool) ([]string, error) {
	for attempt := 0; attempt < maxAttempts; attempt++ {
		cur, curRev, err := s.getOwner(ctx, name)
		if err != nil {
			return nil, err
		}
		if cur == nil {
			return nil, errorf(NotFound, "", "owner %q does not exist", name)
		}
		if uid != "" && cur.Uid != uid {
			return nil, errorf(FailedPrecondition, "uid", "owner %q is now uid %q, not %q", name, cur.Uid, uid)
		}
		cmps := []clientv3.Cmp{modRev(s.ownerKey(name), curRev)}
		ops := []clientv3.Op{clientv3.OpDelete(s.ownerKey(name))}
		var names []string
		if endpoints {
			eps, idxRev, err := s.ownerEndpoints(ctx, name)
			if err != nil {
				return nil, err
			}
			cmps = append(cmps, s.noNewIndex(name, idxRev))
			for _, e := range eps {
				cmps = append(cmps, modRev(s.epKey(e.Name), e.Revision))
				ops = append(ops, s.endpointDeleteOps(ctx, e)...)
				names = append(names, e.Name)
			}
		}
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return nil, fmt.Errorf("store: delete owner %q: %w", name, err)
		}
		if resp.Succeeded {
			return names, nil
		}
	}
	return nil, errorf(Aborted, "", "owner %q kept changing during delete; retry", name)
}

// DeleteEndpoints deletes every endpoint of node, of owner, or of owner on
// node, each in a transaction of its own, and returns those it deleted.
// An endpoint deleted meanwhile by someone else is not an error.
func (s *Store) DeleteEndpoints(ctx context.Context, node, owner string) ([]string, error) {
	if node == "" && owner == "" {
		return nil, invalid("node", "node or owner is required")
	}
	if node != "" {
		if err := ValidateName("node", node); err != nil {
			return nil, err
		}
	}
	var eps []*skiffv1.Endpoint
	var err error
	if owner != "" {
		eps, _, err = s.ownerEndpoints(ctx, owner)
	} else {
		eps, err = s.ListEndpoints(ctx, "", node)
	}
	if err != nil {
		return nil, err
	}
	var deleted []string
	var errs []error
	for _, e := range eps {
		if node != "" && e.Node != node {
			continue
		}
		switch err := s.DeleteEndpoint(ctx, e.Name); {
		case err == nil:
			deleted = append(deleted, e.Name)
		case errors.Is(err, ErrNotFound):
		default:
			errs = append(errs, err)
		}
	}
	return deleted, errors.Join(errs...)
}

// IndexOwners adds the owner index entries of endpoints stored before the
// index existed. Idempotent; the controller runs it at start.
func (s *Store) IndexOwners(ctx context.Context) (int, error) {
	eps, err := s.ListEndpoints(ctx, "", "")
	if err != nil {
		return 0, err
	}
	idx, err := s.cli.Get(ctx, s.k("epowner")+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return 0, fmt.Errorf("store: owner index: %w", err)
	}
	have := map[string]bool{}
	for _, kv := range idx.Kvs {
		have[string(kv.Key)] = true
	}
	var puts []clientv3.Op
	for _, e := range eps {
		if k := s.epOwnerKey(e.Owner, e.Name); e.Owner != "" && !have[k] {
			// Only while the endpoint is still there.
			puts = append(puts, clientv3.OpTxn([]clientv3.Cmp{modRev(s.epKey(e.Name), e.Revision)}, []clientv3.Op{clientv3.OpPut(k, "")}, nil))
		}
	}
	for ops := range slices.Chunk(puts, 100) {
		if _, err := s.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return 0, fmt.Errorf("store: owner index: %w", err)
		}
	}
	return len(puts), nil
}
