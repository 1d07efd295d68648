package datapath

import "sync"

// PlumbGate keeps a datapath's Ready honest about time: an Apply that
// began before an endpoint's latest Plumb saw the kernel as it was before
// (perhaps an earlier interface of the same name, since deleted), and so
// did one that began while Plumb ran (before the interface existed: it
// made no rules for it), so their verdicts on that endpoint do not count.
// A datapath calls Plumbing at the start of Plumb and Plumbed at its end,
// Begin at the start of Apply and Done when Apply has recorded its
// verdicts, and asks Current before answering Ready.
//
// The zero value is ready to use. Its methods are safe for concurrent use.
type PlumbGate struct {
	mu      sync.Mutex
	seq     uint64
	plumbed map[string]uint64 // endpoint -> seq of its latest Plumb
	applied uint64            // seq at the start of the last finished Apply
}

// Plumbing records that endpoint is being plumbed now.
func (g *PlumbGate) Plumbing(endpoint string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seq++
	if g.plumbed == nil {
		g.plumbed = map[string]uint64{}
	}
	g.plumbed[endpoint] = g.seq
}

// Plumbed records that endpoint's Plumb has ended (whether or not it
// succeeded): only an Apply that begins after this counts for it.
func (g *PlumbGate) Plumbed(endpoint string) { g.Plumbing(endpoint) }

// Begin marks the start of an Apply; pass what it returns to Done.
func (g *PlumbGate) Begin() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.seq
}

// Done marks the end of the Apply that began at start. Plumbs that the
// Apply saw are forgotten.
func (g *PlumbGate) Done(start uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.applied = start
	for name, s := range g.plumbed {
		if s <= start {
			delete(g.plumbed, name)
		}
	}
}

// Current reports whether the last finished Apply began after endpoint's
// latest Plumb, so that its verdict on endpoint holds.
func (g *PlumbGate) Current(endpoint string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.plumbed[endpoint] <= g.applied
}

// NotCurrent is the reason Ready gives while Current is false.
const NotCurrent = "plumbed after the last apply began"
