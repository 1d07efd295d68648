package planner

import "github.com/skiff-sdn/skiff/internal/plan"

// deltaLog is one node's bounded delta log, with the items it holds: a ring
// that grows (doubling) up to the bound on deltas, so that appending
// neither allocates nor moves the log once it is full.
type deltaLog struct {
	ring  []plan.Delta // the log is ring[(head+i) % len(ring)], i < n
	head  int
	n     int
	items int
}

func (l *deltaLog) at(i int) *plan.Delta { return &l.ring[(l.head+i)%len(l.ring)] }

// deltas is the log, oldest first, as a slice of its own; a nil log is
// empty.
func (l *deltaLog) deltas() []plan.Delta {
	if l == nil || l.n == 0 {
		return nil
	}
	out := make([]plan.Delta, l.n)
	for i := range out {
		out[i] = *l.at(i)
	}
	return out
}

// add appends d, dropping the oldest delta when the log holds maxDeltas
// already, then the oldest ones while the log holds more than maxItems
// items (d too, when it alone holds more).
func (l *deltaLog) add(d plan.Delta, maxDeltas, maxItems int) {
	if l.n == len(l.ring) {
		if l.n < maxDeltas {
			grown := make([]plan.Delta, min(max(2*l.n, 4), maxDeltas))
			for i := range l.n {
				grown[i] = *l.at(i)
			}
			l.ring, l.head = grown, 0
		} else {
			l.drop()
		}
	}
	*l.at(l.n) = d
	l.n++
	l.items += d.Size()
	for l.n > 0 && l.items > maxItems {
		l.drop()
	}
}

// drop removes the oldest delta.
func (l *deltaLog) drop() {
	old := l.at(0)
	l.items -= old.Size()
	*old = plan.Delta{} // its items are no longer held
	l.head = (l.head + 1) % len(l.ring)
	l.n--
}

// record appends d to its node's bounded log and wakes the node's
// subscribers. Caller holds mu.
func (p *Planner) record(d plan.Delta) {
	l := p.dlog[d.Node]
	if l == nil {
		l = &deltaLog{}
		p.dlog[d.Node] = l
	}
	l.add(d, p.opts.LogDeltas, p.opts.LogItems)
	for _, s := range p.subs[d.Node] {
		s.push(d)
	}
}
