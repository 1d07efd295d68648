package store_test

import (
	"context"
	"testing"
	"time"
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
	connected := func() bool {
		st, err := s.ReadState(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, ok := st.Connected["d1"]
		return ok
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after 10 s: not %s", what)
			}
		}
	}
	stop1, done1 := session()
	waitFor("connected", connected)
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
	waitFor("connected again", connected)
	if st, _ := s.ReadState(ctx, 0); len(st.Away) != 0 {
		t.Errorf("away times while connected: %v", st.Away)
	}
	// A newer session of the same node, then the older one ends.
	lease := func() int64 {
		resp, err := etcdCli.Get(ctx, prefixOf(t)+"status/d1")
		if err != nil || len(resp.Kvs) != 1 {
			return 0
		}
		return resp.Kvs[0].Lease
	}
	old := lease()
	stop3, done3 := session()
	waitFor("the newer session's status", func() bool { l := lease(); return l != 0 && l != old })
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
