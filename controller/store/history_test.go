package store_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/skiff-sdn/skiff/controller/store"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// TestChanges reads the history back: every object change up to the
// revision asked, a change of an existing object as its old version
// deleted then the new one, nothing after the revision asked.
func TestChanges(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.RegisterNode(ctx, &skiffv1.Node{Name: "n1", UnderlayIp: "192.0.2.1"}); err != nil {
		t.Fatal(err)
	}
	moved, err := s.RegisterNode(ctx, &skiffv1.Node{Name: "n1", UnderlayIp: "192.0.2.2"})
	if err != nil {
		t.Fatal(err)
	}
	mustNetwork(t, s, "blue", 100, "198.51.100.0/24")
	e, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: "a", Network: "blue", Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteEndpoint(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	var got []string
	var last int64
	floor, err := s.Changes(ctx, e.Revision, func(rev int64, evs []store.Event) error {
		last = rev
		for _, ev := range evs {
			what := ev.Kind()
			switch {
			case ev.Node != nil:
				what += " " + ev.Node.UnderlayIp
			case ev.Endpoint != nil:
				what += " " + ev.Endpoint.Name
			}
			if ev.Delete {
				what += " deleted"
			}
			if rev == moved.Revision || rev == e.Revision {
				got = append(got, what)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"node 192.0.2.1 deleted", "node 192.0.2.2", "endpoint a"}
	if last != e.Revision {
		t.Errorf("last revision given %d, want %d (the endpoint's creation; its deletion comes after)", last, e.Revision)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || floor != 0 {
		t.Fatalf("changes %q (floor %d), want %q (floor 0)", got, floor, want)
	}
}

// TestChangesWindows reads a longer history through one watch, through
// many small windows (one watch each, read at once) and through the
// embedded etcd's backend (WithHistoryReader): the same changes, in the
// same order, with the same revisions.
func TestChangesWindows(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	for i, n := range []string{"n1", "n2"} {
		if _, err := s.RegisterNode(ctx, &skiffv1.Node{Name: n, UnderlayIp: fmt.Sprintf("192.0.2.%d", i+1)}); err != nil {
			t.Fatal(err)
		}
	}
	mustNetwork(t, s, "blue", 100, "198.51.100.0/24")
	var last int64
	for i := range 40 {
		e, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: fmt.Sprintf("e%02d", i), Network: "blue", Node: []string{"n1", "n2"}[i%2]})
		if err != nil {
			t.Fatal(err)
		}
		last = e.Revision
		if i%4 == 0 {
			if err := s.DeleteEndpoint(ctx, e.Name); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := s.RegisterNode(ctx, &skiffv1.Node{Name: "n1", UnderlayIp: "192.0.2.9"}); err != nil {
		t.Fatal(err)
	}
	read := func(window int64) []string {
		defer store.SetHistoryWindow(window)()
		s := s
		if window == 0 {
			s = s.WithHistoryReader(etcdSrv)
		}
		var got []string
		if _, err := s.Changes(ctx, last, func(rev int64, evs []store.Event) error {
			for _, ev := range evs {
				got = append(got, fmt.Sprintf("%d %s %v", rev, ev.Kind(), ev.Delete))
			}
			return nil
		}); err != nil {
			t.Fatalf("window %d: %v", window, err)
		}
		return got
	}
	one := read(1 << 40)
	if len(one) < 40+10+4 {
		t.Fatalf("%d changes read through one watch, want at least %d", len(one), 54)
	}
	// Window 0: the embedded etcd's backend read in one pass.
	for _, w := range []int64{7, 1, 0} {
		if got := read(w); fmt.Sprint(got) != fmt.Sprint(one) {
			t.Errorf("window %d: %d changes\n%q\nwant (one watch) %d\n%q", w, len(got), got, len(one), one)
		}
	}
}

// BenchmarkChanges reads histories of growing length (endpoint puts, one
// revision each) through Changes: the time per read against the number of
// revisions says whether the read is linear in the history.
func BenchmarkChanges(b *testing.B) {
	ctx := context.Background()
	s := store.New(etcdCli, slog.New(slog.NewTextHandler(io.Discard, nil))).WithPrefix("/bench/changes/")
	written := 0
	for _, h := range []int{5000, 10000, 20000, 40000} {
		// Bring the history to h revisions of endpoint puts.
		if err := parallelPuts(ctx, written, h, 8); err != nil {
			b.Fatal(err)
		}
		written = h
		cur, err := etcdCli.Get(ctx, "/bench/changes/none")
		if err != nil {
			b.Fatal(err)
		}
		to := cur.Header.Revision
		for _, way := range []string{"watches", "backend"} {
			s := s
			if way == "backend" {
				s = s.WithHistoryReader(etcdSrv)
			}
			b.Run(fmt.Sprintf("%s/revisions=%d", way, h), func(b *testing.B) {
				for b.Loop() {
					n := 0
					if _, err := s.Changes(ctx, to, func(int64, []store.Event) error { n++; return nil }); err != nil {
						b.Fatal(err)
					}
					if n < h {
						b.Fatalf("%d revisions with changes read, want at least %d", n, h)
					}
				}
			})
		}
	}
}

// parallelPuts writes endpoints from..to-1 under the benchmark's prefix,
// one revision each, with width writers.
func parallelPuts(ctx context.Context, from, to, width int) error {
	var wg sync.WaitGroup
	errs := make(chan error, width)
	for w := range width {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := from + w; i < to; i += width {
				e := &skiffv1.Endpoint{Name: fmt.Sprintf("e%06d", i), Network: "blue", Node: fmt.Sprintf("n%d", i%100), Ips: []string{"198.51.100.7/24"}}
				b, err := proto.Marshal(e)
				if err != nil {
					errs <- err
					return
				}
				if _, err := etcdCli.Put(ctx, "/bench/changes/endpoints/"+e.Name, string(b)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// TestChangesAfterCompaction: once etcd compacted its history, Changes
// gives the changes after the compaction and says so (the floor), through
// watches and through the backend alike.
func TestChangesAfterCompaction(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	mustNetwork(t, s, "blue", 100, "198.51.100.0/24")
	var revs []int64
	for i := range 6 {
		e, err := s.CreateEndpoint(ctx, &skiffv1.Endpoint{Name: fmt.Sprintf("e%d", i), Network: "blue", Node: "n1"})
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, e.Revision)
	}
	if _, err := etcdCli.Compact(ctx, revs[3], clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	read := func(s *store.Store) (int64, []string) {
		var got []string
		floor, err := s.Changes(ctx, revs[5], func(rev int64, evs []store.Event) error {
			for _, ev := range evs {
				got = append(got, fmt.Sprintf("%d %s %v", rev, ev.Kind(), ev.Delete))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return floor, got
	}
	wf, watched := read(s)
	bf, direct := read(s.WithHistoryReader(etcdSrv))
	if wf != revs[3]-1 || bf != wf {
		t.Errorf("floor: %d through watches, %d through the backend; want %d (compacted at %d)", wf, bf, revs[3]-1, revs[3])
	}
	want := fmt.Sprint([]string{fmt.Sprintf("%d endpoint false", revs[3]), fmt.Sprintf("%d endpoint false", revs[4]), fmt.Sprintf("%d endpoint false", revs[5])})
	for _, got := range [][]string{watched, direct} {
		// Other tests' changes under other prefixes are not ours.
		if fmt.Sprint(got) != want {
			t.Errorf("changes %q, want %s", got, want)
		}
	}
}
