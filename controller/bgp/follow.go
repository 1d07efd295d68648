package bgp

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/skiff-sdn/skiff/controller/store"
	skiffv1 "github.com/skiff-sdn/skiff/proto/skiff/v1"
)

// Follow keeps the speaker's advertisement equal to what the store calls
// for, until ctx ends: it loads the objects, follows the store's watch,
// and reads the nodes' lease status every poll (lease expiry is not an
// object change). Every controller replica that follows the same store
// advertises the same routes.
func Follow(ctx context.Context, st *store.Store, sp *Speaker, log *slog.Logger, poll time.Duration) error {
	if poll <= 0 {
		poll = time.Second
	}
	f := &follower{nets: map[string]*skiffv1.Network{}, eps: map[string]*skiffv1.Endpoint{}, nodes: map[string]*skiffv1.Node{},
		connected: map[string]bool{}, dirty: make(chan struct{}, 1)}
	for ctx.Err() == nil {
		s, err := st.ReadState(ctx, 0)
		if err != nil {
			log.Error("bgp: load store state", "err", err)
			sleep(ctx, time.Second)
			continue
		}
		f.load(s)
		wctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			f.pollStatus(wctx, st, poll, log)
		}()
		go func() {
			defer wg.Done()
			f.advertise(wctx, sp, log)
		}()
		err = st.Watch(wctx, s.Revision, func(_ int64, evs []store.Event) error {
			f.apply(evs)
			return nil
		})
		cancel()
		wg.Wait()
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, store.ErrCompacted) {
			log.Warn("bgp: store watch fell behind compaction; reloading")
			continue
		}
		log.Warn("bgp: store watch ended; reloading", "err", err)
		sleep(ctx, 500*time.Millisecond)
	}
	return ctx.Err()
}

type follower struct {
	mu        sync.Mutex
	nets      map[string]*skiffv1.Network
	eps       map[string]*skiffv1.Endpoint
	nodes     map[string]*skiffv1.Node
	connected map[string]bool
	dirty     chan struct{}
}

func (f *follower) mark() {
	select {
	case f.dirty <- struct{}{}:
	default:
	}
}

func (f *follower) load(s *store.State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.nets)
	clear(f.eps)
	clear(f.nodes)
	for _, n := range s.Networks {
		f.nets[n.GetName()] = n
	}
	for _, e := range s.Endpoints {
		f.eps[e.GetName()] = e
	}
	for _, n := range s.Nodes {
		f.nodes[n.GetName()] = n
	}
	f.mark()
}

func (f *follower) apply(evs []store.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range evs {
		switch {
		case e.Network != nil:
			put(f.nets, e.Network.GetName(), e.Network, e.Delete)
		case e.Endpoint != nil:
			put(f.eps, e.Endpoint.GetName(), e.Endpoint, e.Delete)
		case e.Node != nil:
			put(f.nodes, e.Node.GetName(), e.Node, e.Delete)
		default:
			continue
		}
		f.mark()
	}
}

func put[T any](m map[string]T, k string, v T, del bool) {
	if del {
		delete(m, k)
	} else {
		m[k] = v
	}
}

func (f *follower) pollStatus(ctx context.Context, st *store.Store, every time.Duration, log *slog.Logger) {
	for {
		nodes, err := st.ListNodes(ctx)
		if err != nil && ctx.Err() == nil {
			log.Warn("bgp: read node status", "err", err)
		}
		if err == nil {
			now := map[string]bool{}
			for _, n := range nodes {
				now[n.GetName()] = n.GetConnected()
			}
			f.mu.Lock()
			changed := len(now) != len(f.connected)
			for k, v := range now {
				if f.connected[k] != v {
					changed = true
				}
			}
			f.connected = now
			f.mu.Unlock()
			if changed {
				f.mark()
			}
		}
		if !sleep(ctx, every) {
			return
		}
	}
}

// advertise reconciles the speaker each time the objects change, at most
// every 50ms.
func (f *follower) advertise(ctx context.Context, sp *Speaker, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.dirty:
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return
		}
		s := f.state()
		var vteps []netip.Addr
		for _, n := range s.Nodes {
			if n.VTEP.IsValid() {
				vteps = append(vteps, n.VTEP)
			}
		}
		sp.SetNodeVTEPs(vteps)
		start := time.Now()
		want := sp.cfg.desired(s)
		added, withdrawn, err := sp.Advertise(want)
		if err != nil {
			log.Error("bgp: advertise", "err", err)
			f.mark()
			sleep(ctx, time.Second)
			continue
		}
		if added+withdrawn > 0 {
			log.Info("bgp routes reconciled", "added", added, "withdrawn", withdrawn, "advertised", len(want), "took", time.Since(start))
		}
	}
}

func (f *follower) state() State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return StateOf(f.nets, f.eps, f.nodes, f.connected)
}

// StateOf reduces store objects to the speaker's State; connected holds
// the nodes with a live lease.
func StateOf(nets map[string]*skiffv1.Network, eps map[string]*skiffv1.Endpoint, nodes map[string]*skiffv1.Node, connected map[string]bool) State {
	var s State
	for _, n := range nets {
		s.Networks = append(s.Networks, Network{Name: n.GetName(), VNI: n.GetVni()})
	}
	for _, e := range eps {
		ep := Endpoint{Name: e.GetName(), Network: e.GetNetwork(), Node: e.GetNode(), MAC: e.GetMac()}
		for _, ip := range e.GetIps() {
			if p, err := netip.ParsePrefix(ip); err == nil {
				ep.IPs = append(ep.IPs, p.Addr())
			} else if a, err := netip.ParseAddr(ip); err == nil {
				ep.IPs = append(ep.IPs, a)
			}
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	for _, n := range nodes {
		vtep, _ := netip.ParseAddr(n.GetUnderlayIp())
		s.Nodes = append(s.Nodes, Node{Name: n.GetName(), VTEP: vtep, Connected: connected[n.GetName()]})
	}
	return s
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func addr(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}
