package store_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/skiff-sdn/skiff/controller/store"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

func labelsOf(t *testing.T, s *store.Store, ep string) string {
	t.Helper()
	e, err := s.GetEndpoint(context.Background(), ep)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s %v", e.Namespace, e.Labels)
}

// TestOwnerLabels: an endpoint takes its owner's labels and namespace
// whether the record comes before or after it, and follows the record.
func TestOwnerLabels(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	mustNetwork(t, s, "blue", 100, "198.51.100.0/24")
	mk := func(name, owner string, labels map[string]string) {
		t.Helper()
		if _, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: name, Network: "blue", Node: "n1", Owner: owner, Namespace: "prod", Labels: labels}); err != nil {
			t.Fatal(err)
		}
	}
	set := func(o *skiffv1.Owner) *skiffv1.Owner {
		t.Helper()
		out, err := s.SetOwner(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// Endpoint first (the CNI ADD before the adapter's sync): the CNI's
	// labels, until the record arrives.
	mk("a", "pod:prod/web-1", map[string]string{"from": "cni"})
	if got := labelsOf(t, s, "a"); got != "prod map[from:cni]" {
		t.Fatalf("before the record: %s", got)
	}
	o := set(&skiffv1.Owner{Name: "pod:prod/web-1", Labels: map[string]string{"app": "web"}, Uid: "u1", Node: "n1"})
	if o.Namespace != "prod" || o.Revision == 0 {
		t.Errorf("stored owner %v: want namespace prod from the name and a revision", o)
	}
	if got := labelsOf(t, s, "a"); got != "prod map[app:web]" {
		t.Errorf("after the record: %s", got)
	}
	// Record first: a new endpoint of the owner gets its labels at once.
	mk("b", "pod:prod/web-1", map[string]string{"from": "cni"})
	if got := labelsOf(t, s, "b"); got != "prod map[app:web]" {
		t.Errorf("created after the record: %s", got)
	}
	// A label change reaches both; another owner's endpoint is untouched.
	mk("c", "pod:prod/db-1", map[string]string{"from": "cni"})
	o2 := set(&skiffv1.Owner{Name: "pod:prod/web-1", Labels: map[string]string{"app": "web", "tier": "front"}, Uid: "u1", Node: "n1"})
	if o2.Revision <= o.Revision {
		t.Errorf("changed record: revision %d, not after %d", o2.Revision, o.Revision)
	}
	for _, ep := range []string{"a", "b"} {
		if got := labelsOf(t, s, ep); got != "prod map[app:web tier:front]" {
			t.Errorf("%s after the change: %s", ep, got)
		}
	}
	if got := labelsOf(t, s, "c"); got != "prod map[from:cni]" {
		t.Errorf("another owner's endpoint: %s", got)
	}
	// The same record again writes nothing.
	before := dump(t)
	again := set(&skiffv1.Owner{Name: "pod:prod/web-1", Labels: map[string]string{"tier": "front", "app": "web"}, Uid: "u1", Node: "n1"})
	if again.Revision != o2.Revision || !maps.Equal(before, dump(t)) {
		t.Errorf("setting the same record wrote: revision %d (was %d)", again.Revision, o2.Revision)
	}
	// Listing, by node.
	set(&skiffv1.Owner{Name: "vm:vm-7", Node: "n2"})
	all, err := s.ListOwners(ctx, "")
	if err != nil || len(all) != 2 || all[0].Name != "pod:prod/web-1" || all[1].Name != "vm:vm-7" {
		t.Errorf("list: %v %v", all, err)
	}
	n2, err := s.ListOwners(ctx, "n2")
	if err != nil || len(n2) != 1 || n2[0].Name != "vm:vm-7" {
		t.Errorf("list of n2: %v %v", n2, err)
	}
	// Deleting the record keeps the endpoints and their labels.
	if eps, err := s.DeleteOwner(ctx, "pod:prod/web-1", "", false); err != nil || len(eps) != 0 {
		t.Fatalf("delete owner: %v %v", eps, err)
	}
	if got := labelsOf(t, s, "a"); got != "prod map[app:web tier:front]" {
		t.Errorf("after the record's delete: %s", got)
	}
	if _, err := s.GetOwner(ctx, "pod:prod/web-1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get of a deleted owner: %v", err)
	}
}

// TestDeleteOwnerWithEndpoints: the garbage collection of a pod whose
// CNI DEL never came frees its addresses, only for the incarnation the
// caller names.
func TestDeleteOwnerWithEndpoints(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	mustNetwork(t, s, "blue", 100, "198.51.100.0/24")
	before := dump(t)
	if _, err := s.SetOwner(ctx, &skiffv1.Owner{Name: "pod:prod/web-1", Uid: "u2", Deleted: timestamppb.Now()}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b"} {
		if _, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: n, Network: "blue", Node: "n1", Owner: "pod:prod/web-1"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "other", Network: "blue", Node: "n1", Owner: "pod:prod/web-2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteOwner(ctx, "pod:prod/web-1", "u1", true); !errors.Is(err, store.ErrFailedPrecondition) || !strings.Contains(err.Error(), "uid") {
		t.Errorf("delete of another incarnation: %v, want a uid precondition error", err)
	}
	eps, err := s.DeleteOwner(ctx, "pod:prod/web-1", "u2", true)
	if err != nil || fmt.Sprint(eps) != "[a b]" {
		t.Fatalf("delete owner with endpoints: %v %v", eps, err)
	}
	if _, err := s.DeleteEndpoints(ctx, "", "pod:prod/web-2"); err != nil {
		t.Fatal(err)
	}
	if after := dump(t); !maps.Equal(before, after) {
		t.Errorf("left behind:\nbefore %v\nafter  %v", before, after)
	}
}

// TestDeleteNodeEndpoints: every endpoint of a node, and only those.
func TestDeleteNodeEndpoints(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	mustNetwork(t, s, "blue", 100, "198.51.100.0/24")
	for i := range 5 {
		if _, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: fmt.Sprintf("e%d", i), Network: "blue", Node: fmt.Sprintf("n%d", i%2), Owner: fmt.Sprintf("pod:p/x%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.DeleteEndpoints(ctx, "n0", "")
	if err != nil || fmt.Sprint(got) != "[e0 e2 e4]" {
		t.Fatalf("delete endpoints of n0: %v %v", got, err)
	}
	left, _ := s.ListEndpoints(ctx, "", "")
	if len(left) != 2 || left[0].Node != "n1" || left[1].Node != "n1" {
		t.Errorf("left: %v", left)
	}
	for k := range dump(t) {
		if strings.Contains(k, "/epowner/") && (strings.HasSuffix(k, "/e0") || strings.HasSuffix(k, "/e2")) {
			t.Errorf("index entry left: %s", k)
		}
	}
}

func TestOwnerBadInput(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	mustNetwork(t, s, "blue", 100, "198.51.100.0/24")
	if _, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "a", Network: "blue", Node: "n1", Owner: "pod:prod/web-1", Labels: map[string]string{"x": "y"}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		o     *skiffv1.Owner
		field string
		words string
	}{
		{"no name", &skiffv1.Owner{}, "name", "required"},
		{"no kind", &skiffv1.Owner{Name: "web-1"}, "name", "KIND:ID"},
		{"bad kind", &skiffv1.Owner{Name: "Pod:prod/web-1"}, "name", "KIND:ID"},
		{"pod without namespace", &skiffv1.Owner{Name: "pod:web-1"}, "name", "pod:NAMESPACE/NAME"},
		{"pod with a bad name", &skiffv1.Owner{Name: "pod:prod/Web_1"}, "name", "DNS subdomain"},
		{"other namespace", &skiffv1.Owner{Name: "pod:prod/web-1", Namespace: "dev"}, "namespace", `"prod"`},
		{"bad label", &skiffv1.Owner{Name: "pod:prod/web-1", Labels: map[string]string{"app": "a b"}}, "labels", `"a b"`},
		{"bad uid", &skiffv1.Owner{Name: "pod:prod/web-1", Uid: "a b"}, "uid", "white space"},
		{"bad node", &skiffv1.Owner{Name: "pod:prod/web-1", Node: "N_1"}, "node", "[a-z0-9.-]"},
		{"bad deleted", &skiffv1.Owner{Name: "pod:prod/web-1", Deleted: &timestamppb.Timestamp{Nanos: -1}}, "deleted", "nanos"},
	} {
		before := dump(t)
		_, err := s.SetOwner(ctx, c.o)
		var se *store.Error
		if !errors.As(err, &se) || se.Kind != store.Invalid || se.Field != c.field || !strings.Contains(err.Error(), c.words) {
			t.Errorf("%s: %v, want an invalid %s error saying %q", c.name, err, c.field, c.words)
		}
		if !maps.Equal(before, dump(t)) {
			t.Errorf("%s: the store changed", c.name)
		}
	}
	if got := labelsOf(t, s, "a"); got != " map[x:y]" {
		t.Errorf("the endpoint changed: %s", got)
	}
}

// TestOwnerRacesCreate: records set while endpoints of the owner are
// created concurrently; every endpoint ends with the last record's labels.
func TestOwnerRacesCreate(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	mustNetwork(t, s, "blue", 100, "198.51.100.0/24")
	var wg sync.WaitGroup
	errc := make(chan error, 100)
	wg.Go(func() {
		for i := range 30 {
			if _, err := s.SetOwner(ctx, &skiffv1.Owner{Name: "pod:prod/web-1", Labels: map[string]string{"gen": fmt.Sprint(i)}}); err != nil {
				errc <- err
			}
		}
	})
	for c := range 3 {
		wg.Go(func() {
			for i := range 10 {
				if _, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: fmt.Sprintf("e%d-%d", c, i), Network: "blue", Node: "n1", Owner: "pod:prod/web-1"}); err != nil {
					errc <- err
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	eps, _ := s.ListEndpoints(ctx, "", "")
	if len(eps) != 30 {
		t.Fatalf("%d endpoints", len(eps))
	}
	for _, e := range eps {
		if e.Labels["gen"] != "29" || e.Namespace != "prod" {
			t.Errorf("%s: labels %v namespace %q, want gen=29 in prod", e.Name, e.Labels, e.Namespace)
		}
	}
}

// TestIndexOwners: endpoints stored before the owner index existed are
// indexed at start, so their owner's record reaches them.
func TestIndexOwners(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	mustNetwork(t, s, "blue", 100, "198.51.100.0/24")
	if _, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "old", Network: "blue", Node: "n1", Owner: "pod:prod/web-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := etcdCli.Delete(ctx, prefixOf(t)+"epowner/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{1, 0} {
		if n, err := s.IndexOwners(ctx); err != nil || n != want {
			t.Errorf("IndexOwners run %d: %d %v, want %d", i+1, n, err, want)
		}
	}
	if _, err := s.SetOwner(ctx, &skiffv1.Owner{Name: "pod:prod/web-1", Labels: map[string]string{"app": "web"}}); err != nil {
		t.Fatal(err)
	}
	if got := labelsOf(t, s, "old"); got != "prod map[app:web]" {
		t.Errorf("indexed endpoint: %s", got)
	}
}

func TestDeleteNamespace(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	before := dump(t)
	if _, err := s.SetNamespace(ctx, &skiffv1.Namespace{Name: "prod", Labels: map[string]string{"env": "prod"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteNamespace(ctx, "prod"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteNamespace(ctx, "prod"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	if !maps.Equal(before, dump(t)) {
		t.Error("left behind")
	}
}
