package bgp

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// importer turns the paths learned from peers into the set handed to
// Options.OnLearned. Routes of a peer whose session changed state less
// than hold ago are kept when they vanish, so a flapping peer that comes
// back with the same routes changes nothing downstream.
type importer struct {
	s    *Speaker
	hold time.Duration
	wake chan struct{}

	mu       sync.Mutex
	flaps    map[netip.Addr]time.Time
	have     map[string]Route // key|peer -> route, as last reported
	reported bool
}

func newImporter(s *Speaker, hold time.Duration) *importer {
	return &importer{s: s, hold: hold, wake: make(chan struct{}, 1), flaps: map[netip.Addr]time.Time{}, have: map[string]Route{}}
}

func (im *importer) kick() {
	select {
	case im.wake <- struct{}{}:
	default:
	}
}

func (im *importer) peerChanged(addr netip.Addr, up bool) {
	im.mu.Lock()
	im.flaps[addr] = time.Now()
	im.mu.Unlock()
	im.s.metrics.peerChanged(addr, up)
	im.s.log.Info("bgp peer session", "peer", addr, "established", up)
	im.kick()
}

func (im *importer) run(ctx context.Context) {
	var timer <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-im.wake:
		case <-timer:
		}
		// Coalesce a burst of updates.
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		select {
		case <-im.wake:
		default:
		}
		next, err := im.sync()
		if err != nil {
			im.s.log.Error("bgp import", "err", err)
			next = time.Second
		}
		timer = nil
		if next > 0 {
			timer = time.After(next)
		}
	}
}

// sync recomputes the learned set and reports it when it changed. It
// returns when to look again for held routes (0: no need).
func (im *importer) sync() (time.Duration, error) {
	all, err := im.s.received()
	if err != nil {
		return 0, err
	}
	cur := map[string]Route{}
	for _, r := range all {
		if !r.Peer.IsValid() || (r.Type != TypeMACIP && r.Type != TypeMulticast) || !r.NextHop.IsValid() || im.s.isOwnVTEP(r.NextHop) {
			continue
		}
		cur[r.key()+"|"+r.Peer.String()] = r
	}
	im.mu.Lock()
	now := time.Now()
	var next time.Duration
	for k, r := range im.have {
		if _, ok := cur[k]; ok {
			continue
		}
		if at, ok := im.flaps[r.Peer]; ok && now.Sub(at) < im.hold {
			cur[k] = r
			if d := im.hold - now.Sub(at) + 10*time.Millisecond; next == 0 || d < next {
				next = d
			}
		}
	}
	changed := !im.reported || len(cur) != len(im.have)
	if !changed {
		for k, r := range cur {
			if o, ok := im.have[k]; !ok || !o.same(r) {
				changed = true
				break
			}
		}
	}
	im.have = cur
	im.reported = true
	im.mu.Unlock()
	if changed {
		out := make([]Route, 0, len(cur))
		for _, r := range cur {
			out = append(out, r)
		}
		sortRoutes(out)
		im.s.metrics.setLearned(out)
		if im.s.opts.OnLearned != nil {
			im.s.opts.OnLearned(out)
		}
	}
	return next, nil
}

// Learned returns the routes learned from peers as last reported.
func (s *Speaker) Learned() []Route {
	s.imp.mu.Lock()
	defer s.imp.mu.Unlock()
	out := make([]Route, 0, len(s.imp.have))
	for _, r := range s.imp.have {
		out = append(out, r)
	}
	sortRoutes(out)
	return slices.Clip(out)
}
