package offload

import (
	"slices"
	"time"
)

// Phase is one part of an Apply and how long it took. A name ending in
// ".netlink" is the part of the phase before it spent in the tc writer
// (encoding, sending, waiting for the kernel's answers).
type Phase struct {
	Name string
	Took time.Duration
}

// phaseClock times the parts of one Apply (under d.op).
type phaseClock struct {
	at   time.Time
	list []Phase
}

func (c *phaseClock) begin() {
	c.list = c.list[:0]
	c.at = time.Now()
}

// mark ends the current phase, named name.
func (c *phaseClock) mark(name string) {
	now := time.Now()
	c.list = append(c.list, Phase{name, now.Sub(c.at)})
	c.at = now
}

// part records a part of the phase just marked (not a phase of its own).
func (c *phaseClock) part(name string, took time.Duration) {
	c.list = append(c.list, Phase{name, took})
}

// Phases returns the parts of the last Apply, in order, with their
// times: where a change's time goes. Safe for concurrent use; it waits
// for a running Apply.
func (d *Datapath) Phases() []Phase {
	d.op.Lock()
	defer d.op.Unlock()
	return slices.Clone(d.clock.list)
}
