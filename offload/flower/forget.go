package flower

import (
	"slices"

	"github.com/skiff-sdn/skiff/internal/nl/tc"
)

// Place is where a filter of a programmer sits on a device: chain,
// priority and handle. Forget returns the places of the programmer's
// own filters that someone else deleted or changed.
type Place struct {
	Chain  uint32
	Prio   uint16
	Handle uint32
}

// Forget applies someone else's changes of filters on the device at
// ifindex (tc.Watch) to what the programmer knows of it, without
// reading the kernel: a forwarding filter of its own that was deleted is
// forgotten (the next Sync or Change adds it again), one that was
// changed is marked so (the next Sync or Change replaces it in place, at
// its handle). It returns the places of those filters. false: a change
// it cannot place (a filter added or changed where its filters sit, at
// a handle it does not know, which may carry Skiff's cookie): the caller
// must Invalidate the device. A device it does not know is read anyway:
// true, and nothing.
func (p *Programmer) Forget(ifindex int, changes []tc.FilterChange) ([]Place, bool) {
	c, ok := p.cache[ifindex]
	if !ok {
		return nil, true
	}
	return forget(c.byMatch, &c.other, changes,
		func(ch tc.FilterChange) bool { // where Skiff's forwarding filters sit
			return (ch.Chain == ChainForward || ch.Chain == ChainEntry) && skiffPrio(ch.Prio)
		},
		func(h installed) (uint32, uint32, uint32) { return h.chain, h.info, h.handle },
		func(h installed) installed { h.stale = true; return h })
}

// Forget is Programmer.Forget for the policy filters (chains 0-2, any
// priority: a filter carrying a policy cookie is Skiff's wherever it
// sits).
func (p *PolicyProgrammer) Forget(ifindex int, changes []tc.FilterChange) ([]Place, bool) {
	c, ok := p.cache[ifindex]
	if !ok {
		return nil, true
	}
	return forget(c.at, &c.extra, changes,
		func(ch tc.FilterChange) bool {
			return ch.Chain == ChainEntry || ch.Chain == ChainEgress || ch.Chain == ChainIngress
		},
		func(f PolicyFilter) (uint32, uint32, uint32) { return f.Rule.Chain, f.Info, f.Handle },
		func(f PolicyFilter) PolicyFilter { f.Cookie = nil; return f }) // not the rule's: replaced in place
}

// forget is Forget over a programmer's filters of one device: known by
// key, and extra ones (to delete). ours says whether a change is where
// the programmer's filters sit; id gives a filter's chain, tcmsg info
// and handle; changed marks a filter changed by someone else.
func forget[F any](known map[string]F, extra *[]F, changes []tc.FilterChange, ours func(tc.FilterChange) bool,
	id func(F) (uint32, uint32, uint32), changed func(F) F) ([]Place, bool) {
	var out []Place
	for _, ch := range changes {
		if !ours(ch) {
			continue
		}
		info := uint32(ch.Prio)<<16 | uint32(htons(ch.Proto))
		is := func(f F) bool {
			chain, in, handle := id(f)
			return chain == ch.Chain && in == info && handle == ch.Handle
		}
		found := false
		for k, f := range known {
			if !is(f) {
				continue
			}
			found = true
			if ch.Delete {
				delete(known, k)
			} else {
				known[k] = changed(f)
			}
			out = append(out, Place{ch.Chain, ch.Prio, ch.Handle})
			break
		}
		if i := slices.IndexFunc(*extra, is); !found && i >= 0 {
			found = true
			if ch.Delete {
				*extra = slices.Delete(slices.Clip(*extra), i, i+1)
			}
		}
		if !found && !ch.Delete {
			return nil, false
		}
	}
	return out, true
}
