package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/skiff-sdn/skiff/test/testkit"
)

// A session's end keeps when it ended (Away) until the node connects
// again; a session replaced by a newer one (the agent reconnected
// through another replica) leaves the newer one's status alone and
// records no away time.
func TestAwayKeptUntilTheNodeReturns(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	session := func() (cancel func(), done chan error) {
		sctx, cancel := context.WithCancel(ctx)
		done = make(chan error, 1)
		go func() { done <- s.MarkConnected(sctx, "d1", 10*time.Second) }()
		return cancel, done
	}
	connected := func() (bool, string) {
		st, err := s.ReadState(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, ok := st.Connected["d1"]
		return ok, ""
	}
	stop1, done1 := session()
	testkit.Eventually(t, "connected", 10*time.Second, connected)
	before := time.Now()
	stop1()
	<-done1
	st, err := s.ReadState(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	away, ok := st.Away["d1"]
	if _, conn := st.Connected["d1"]; conn || !ok || away.Before(before.Add(-time.Second)) || away.After(time.Now()) {
		t.Fatalf("after the session ended: connected %v, away %v (%v), want away since about %v", st.Connected, away, ok, before)
	}
	// Back: no away time.
	stop2, done2 := session()
	testkit.Eventually(t, "connected again", 10*time.Second, connected)
	if st, _ := s.ReadState(ctx, 0); len(st.Away) != 0 {
		t.Errorf("away times while connected: %v", st.Away)
	}
	// A newer session of the same node, then the older one ends.
	written := func() int64 {
		resp, err := etcdCli.Get(ctx, prefixOf(t)+"status/d1")
		if err != nil || len(resp.Kvs) != 1 {
			return 0
		}
		return resp.Kvs[0].ModRevision
	}
	old := written()
	stop3, done3 := session()
	testkit.Eventually(t, "the newer session's status", 10*time.Second, func() (bool, string) {
		r := written()
		return r != 0 && r != old, fmt.Sprintf("status at revision %d, was %d", r, old)
	})
	stop2()
	<-done2
	st, _ = s.ReadState(ctx, 0)
	if _, conn := st.Connected["d1"]; !conn || len(st.Away) != 0 {
		t.Errorf("the older session's end touched the newer one's status: connected %v, away %v", st.Connected, st.Away)
	}
	stop3()
	<-done3
	if st, _ := s.ReadState(ctx, 0); len(st.Away) != 1 || len(st.Connected) != 0 {
		t.Errorf("after the last session: connected %v, away %v", st.Connected, st.Away)
	}
}

// Every session of a store holds its status on one lease: 50 agents'
// sessions cost one grant and one keepalive, not 50 (and a restarted
// controller's etcd revokes one lease, not one per agent). A session's
// end leaves the others' status and the lease alone.
func TestSessionsShareOneLease(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	const n = 50
	var cancels []context.CancelFunc
	var dones []chan error
	for i := range n {
		sctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- s.MarkConnected(sctx, fmt.Sprintf("n%02d", i), 10*time.Second) }()
		cancels, dones = append(cancels, cancel), append(dones, done)
	}
	leases := func() map[int64]int {
		resp, err := etcdCli.Get(ctx, prefixOf(t)+"status/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		out := map[int64]int{}
		for _, kv := range resp.Kvs {
			out[kv.Lease]++
		}
		return out
	}
	for deadline := time.Now().Add(10 * time.Second); sum(leases()) < n && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	got := leases()
	if len(got) != 1 || sum(got) != n {
		t.Fatalf("status keys by lease: %v, want %d keys on one lease", got, n)
	}
	var id int64
	for l := range got {
		id = l
	}
	cancels[0]()
	if err := <-dones[0]; err != context.Canceled {
		t.Errorf("the first session ended with %v", err)
	}
	ttl, err := etcdCli.TimeToLive(ctx, clientv3.LeaseID(id))
	if err != nil || ttl.TTL <= 0 {
		t.Fatalf("the shared lease after one session ended: ttl %v, %v", ttl, err)
	}
	if got := leases(); sum(got) != n-1 || got[id] != n-1 {
		t.Errorf("after one session ended: %v, want %d keys on lease %x", got, n-1, id)
	}
	for i := 1; i < n; i++ {
		cancels[i]()
		<-dones[i]
	}
	if got := leases(); len(got) != 0 {
		t.Errorf("after every session ended: %v", got)
	}
	st, err := s.ReadState(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Away) != n {
		t.Errorf("%d away times after %d sessions ended", len(st.Away), n)
	}
}

func sum(m map[int64]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
