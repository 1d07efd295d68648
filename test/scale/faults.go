package scale

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// Restart stops the first controller (SIGKILL with kill, else SIGTERM)
// while every agent is connected and in sync, starts it again, and
// measures the time until every agent has resumed, how (snapshot, delta,
// or in sync), and, when a real agent runs, that its datapath saw no
// change.
func (e *Env) Restart(ctx context.Context, kill bool) error {
	sc := "controller restart"
	if kill {
		sc += " (SIGKILL)"
	}
	if err := e.InSync(ctx, 2*time.Minute); err != nil {
		return fmt.Errorf("before restart: %w", err)
	}
	before := e.Fleet.Stats()
	e.Fleet.TakeFailures()
	var mon *Monitor
	if e.Real != nil {
		var err error
		if mon, err = e.Real.Monitor(); err != nil {
			return err
		}
	}
	ct := e.Cluster.Controllers[0]
	down := time.Now()
	if kill {
		ct.Proc.Kill()
	} else {
		ct.Proc.Stop()
	}
	stopped := time.Now()
	if err := ct.Start(ctx); err != nil {
		return err
	}
	serving := time.Now()
	wait := e.profile(ctx, "restart", 10*time.Second)
	last, err := e.Fleet.WaitSessions(ctx, down)
	if err != nil {
		return err
	}
	after := e.Fleet.Stats()
	resumed := e.Fleet.Resumed(down)
	e.Report.Add(sc, "agents connected", "%d", len(e.Fleet.Agents))
	e.Report.Add(sc, "controller stopped in", "%s", secs(stopped.Sub(down)))
	e.Report.Add(sc, "controller started -> serving", "%s", secs(serving.Sub(stopped)))
	e.Report.Add(sc, "stop -> every agent resumed", "%s", secs(last.Sub(down)))
	e.Report.Add(sc, "serving -> every agent resumed", "%s", secs(last.Sub(serving)))
	e.Report.Add(sc, "resumed: in sync (empty delta) / with a delta / with a snapshot", "%d / %d / %d",
		resumed["in-sync"], resumed["delta"], resumed["snapshot"])
	e.Report.Add(sc, "snapshots sent", "%d", after.Snapshots-before.Snapshots)
	e.Report.Add(sc, "sessions that failed on the way (agents retried)", "%d", after.Errors-before.Errors)
	e.Report.Add(sc, "agents' sessions that failed, by cause", "%s", e.Fleet.TakeFailures())
	if u, err := ct.Usage(); err == nil {
		e.Report.Add(sc, "controller RSS after", "%s", mib(u.RSS))
	}
	wait()
	if err := e.InSync(ctx, 2*time.Minute); err != nil {
		return err
	}
	if e.Real != nil {
		if err := e.Real.WaitResumed(ctx); err != nil {
			return err
		}
		seen, learned := mon.Stop()
		e.Report.Add(sc, "real agent: datapath changes seen by ip/bridge monitor", "%d (and %d kernel neighbour events: ARP for VTEPs on the underlay, multicast group entries)", len(seen), learned)
		e.Report.Add(sc, "real agent: resumed with", "%s", e.Real.ResumedWith())
		if len(seen) > 0 {
			return fmt.Errorf("the real agent's datapath changed during the restart: %v", first(seen))
		}
	}
	return nil
}

// creator makes endpoint creations in the background, width at a time,
// and keeps what it created.
type creator struct {
	e       *Env
	done    chan struct{}
	made    atomic.Int64
	mu      sync.Mutex
	created []string
	err     error
}

func (e *Env) create(ctx context.Context, n, width int) *creator {
	c := &creator{e: e, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		err := parallel(n, width, func(int) error {
			ep, _ := e.newEndpoint("fo")
			if err := CreateEndpoint(ctx, e.Mgmt, ep); err != nil {
				return err
			}
			c.mu.Lock()
			c.created = append(c.created, ep.Name)
			c.mu.Unlock()
			c.made.Add(1)
			return nil
		})
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
	}()
	return c
}

// until waits until n creations are made.
func (c *creator) until(ctx context.Context, n int64) error {
	for c.made.Load() < n {
		select {
		case <-c.done:
			return c.err
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// Failover makes creations endpoint creations through every replica (the
// management clients fail over as agents do) and meanwhile SIGKILLs the
// second controller replica (its agents move to the others) and later the
// etcd leader (started again after 5 s). It then checks that every
// creation is stored once, that no address or MAC is given twice on a
// network, and that every agent holds its correct plan.
func (e *Env) Failover(ctx context.Context, creations, width int) error {
	const sc = "replica and etcd member loss"
	if len(e.Cluster.Controllers) < 2 || len(e.Cluster.Members) != 3 {
		return errors.New("failover needs controller replicas on a three-member etcd cluster")
	}
	if err := e.InSync(ctx, 2*time.Minute); err != nil {
		return fmt.Errorf("before failover: %w", err)
	}
	start := time.Now()
	c := e.create(ctx, creations, width)
	if err := c.until(ctx, int64(creations/5)); err != nil {
		return err
	}
	victim := e.Cluster.Controllers[1]
	if e.Real != nil {
		// The real agent's replica, so that the real agent fails over too.
		for _, ct := range e.Cluster.Controllers {
			if ct.Addr == e.Real.Replica() {
				victim = ct
			}
		}
		e.Real.Mark()
	}
	var moved []*Agent
	for _, a := range e.Fleet.Agents {
		if s, _, _ := a.state(); s.peer == victim.Addr {
			moved = append(moved, a)
		}
	}
	killed := time.Now()
	victim.Proc.Kill()
	last, err := waitNewSessions(ctx, moved, killed)
	if err != nil {
		return err
	}
	kinds := map[string]int{}
	for _, a := range moved {
		s, _, _ := a.state()
		kinds[s.resumed]++
	}
	e.Report.Add(sc, "agents on the killed replica", "%d of %d", len(moved), len(e.Fleet.Agents))
	e.Report.Add(sc, "replica SIGKILL -> its agents resumed on the others", "%s", secs(last.Sub(killed)))
	e.Report.Add(sc, "their resumes: in sync / delta / snapshot", "%d / %d / %d", kinds["in-sync"], kinds["delta"], kinds["snapshot"])
	if e.Real != nil {
		if err := e.Real.WaitResumed(ctx); err != nil {
			return err
		}
		e.Report.Add(sc, "the real agent (on the killed replica) resumed with", "%s, on %s", e.Real.ResumedWith(), e.Real.Replica())
	}

	if err := c.until(ctx, int64(creations*3/5)); err != nil {
		return err
	}
	leader, err := e.etcdLeader(ctx)
	if err != nil {
		return err
	}
	beforeKill := c.made.Load()
	leader.Proc.Kill()
	memberKilled := time.Now()
	time.Sleep(5 * time.Second)
	during := c.made.Load() - beforeKill
	if err := leader.Start(ctx); err != nil {
		return err
	}
	e.Report.Add(sc, "etcd leader SIGKILLed; creations completed in the 5 s it was down", "%d", during)
	<-c.done
	if c.err != nil {
		return fmt.Errorf("creations: %w", c.err)
	}
	made := time.Now()
	e.Report.Add(sc, "creations through the replicas", "%d in %s (%.0f/s), %d clients", creations, secs(made.Sub(start)),
		float64(creations)/made.Sub(start).Seconds(), width)
	if err := victim.Start(ctx); err != nil {
		return err
	}
	if err := e.InSync(ctx, 3*time.Minute); err != nil {
		return err
	}
	e.Report.Add(sc, "etcd member killed -> every agent in sync", "%s", secs(time.Since(memberKilled)))
	return e.checkAllocations(ctx, sc, c.created)
}

// waitNewSessions waits until each agent has a session opened after since
// and received its first update; it returns the last such time.
func waitNewSessions(ctx context.Context, agents []*Agent, since time.Time) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		var last time.Time
		waiting := 0
		for _, a := range agents {
			s, _, _ := a.state()
			if s.opened.Before(since) || s.first.IsZero() {
				waiting++
			} else if s.first.After(last) {
				last = s.first
			}
		}
		if waiting == 0 {
			return last, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d agents did not resume: %w", waiting, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// etcdLeader returns the member that leads the etcd cluster.
func (e *Env) etcdLeader(ctx context.Context) (*Member, error) {
	for _, m := range e.Cluster.Members {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.Client}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cli.Status(sctx, m.Client)
		cancel()
		cli.Close()
		if err == nil && st.Header.MemberId == st.Leader {
			return m, nil
		}
	}
	return nil, errors.New("no etcd member says it leads")
}

// checkAllocations lists every endpoint and checks that each created one
// is there, and that no IP or MAC is held twice on one network.
func (e *Env) checkAllocations(ctx context.Context, sc string, created []string) error {
	list, err := e.Mgmt.ListEndpoints(ctx, &skiffv1.ListRequest{}, grpc.MaxCallRecvMsgSize(1<<30))
	if err != nil {
		return fmt.Errorf("list endpoints: %w", err)
	}
	byName := map[string]bool{}
	ips, macs := map[string]string{}, map[string]string{}
	dupIP, dupMAC := 0, 0
	for _, ep := range list.Endpoints {
		byName[ep.Name] = true
		for _, ip := range ep.Ips {
			k := ep.Network + "/" + ip
			if o, ok := ips[k]; ok {
				dupIP++
				e.logf("duplicate address %s: %s and %s", k, o, ep.Name)
			}
			ips[k] = ep.Name
		}
		k := ep.Network + "/" + ep.Mac
		if _, ok := macs[k]; ok {
			dupMAC++
		}
		macs[k] = ep.Name
	}
	missing := 0
	for _, n := range created {
		if !byName[n] {
			missing++
		}
	}
	e.Report.Add(sc, "endpoints stored / duplicate addresses / duplicate MACs / lost creations", "%d / %d / %d / %d",
		len(list.Endpoints), dupIP, dupMAC, missing)
	if dupIP+dupMAC+missing > 0 {
		return fmt.Errorf("%d duplicate addresses, %d duplicate MACs, %d creations lost", dupIP, dupMAC, missing)
	}
	return nil
}
