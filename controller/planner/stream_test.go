package planner

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"
)

// pacedPlanner returns a planner whose subscriptions wait for the test to
// end each interval: paced receives one channel per wait, which the test
// closes to end it.
func pacedPlanner(interval time.Duration) (*Planner, chan chan time.Time) {
	paced := make(chan chan time.Time, 16)
	p := New(slog.New(slog.DiscardHandler), Options{Interval: interval, After: func(time.Duration) <-chan time.Time {
		c := make(chan time.Time)
		paced <- c
		return c
	}})
	return p, paced
}

// A consumer that reads as soon as it can (what a gRPC stream does: Send
// returns before the message is written) gets the changes of one interval
// as one delta, and that delta gives the planner's plan.
func TestIntervalCoalescesAStreamThatKeepsReading(t *testing.T) {
	p, paced := pacedPlanner(time.Hour)
	p.Load(1, base())
	s, err := p.Subscribe(context.Background(), "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	held := *next(t, s).Snapshot
	rev := int64(1)
	messages, changes := 0, 0
	for round := range 3 {
		got := make(chan Update, 1)
		go func() {
			u, err := s.Next(context.Background())
			if err != nil {
				t.Error(err)
			}
			got <- u
		}()
		// The first change wakes the consumer, which then waits for the
		// interval's end (After is called); the others come meanwhile.
		var end chan time.Time
		const n = 40
		for i := range n {
			rev++
			e := ep(fmt.Sprintf("c%d-%d", round, i), "blue", "n2", byte(10+i))
			p.Update(rev, []Change{{Endpoint: &e}})
			changes++
			if i == 0 {
				end = <-paced
			}
		}
		select {
		case u := <-got:
			t.Fatalf("round %d: an update before the interval ended: %+v", round, u)
		default:
		}
		close(end)
		var u Update
		select {
		case u = <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: no update after the interval", round)
		}
		messages++
		if u.Delta == nil || u.Delta.From != held.Revision || u.Delta.Revision != rev || len(u.Delta.UpsertRemote) != n {
			t.Fatalf("round %d: %+v, want one delta %d->%d with %d remotes", round, u, held.Revision, rev, n)
		}
		if err := held.Apply(*u.Delta); err != nil {
			t.Fatal(err)
		}
	}
	if messages != 3 || changes != 120 {
		t.Fatalf("%d messages for %d changes, want 3", messages, changes)
	}
	if cur := p.Plan("n1"); !held.Equal(cur) || held.Revision != cur.Revision {
		t.Fatalf("held %s at %d, want %s at %d", summary(held), held.Revision, summary(cur), cur.Revision)
	}
}

// A stream quiet for the interval sends its next change at once.
func TestIntervalDoesNotDelayAQuietStream(t *testing.T) {
	p, paced := pacedPlanner(time.Millisecond)
	p.Load(1, base())
	s, err := p.Subscribe(context.Background(), "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	next(t, s)
	for i := range 3 {
		time.Sleep(5 * time.Millisecond) // longer than the interval
		e := ep(fmt.Sprintf("q%d", i), "blue", "n2", byte(10+i))
		p.Update(int64(2+i), []Change{{Endpoint: &e}})
		if u := next(t, s); u.Delta == nil || u.Delta.Revision != int64(2+i) {
			t.Fatalf("change %d: %+v", i, u)
		}
		select {
		case <-paced:
			t.Fatalf("change %d: a stream quiet for the interval was paced", i)
		default:
		}
	}
}
