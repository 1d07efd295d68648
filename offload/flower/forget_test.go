package flower

import (
	"slices"
	"testing"

	"github.com/skiff-sdn/skiff/internal/nl/tc"
)

// TestForget: a deleted filter of the programmer's own is forgotten, a
// changed one marked stale (replaced at its handle by the next write);
// changes elsewhere are ignored; a filter added by someone else where
// the programmer's filters sit, at a handle it does not know, cannot be
// placed (the device must be read again).
func TestForget(t *testing.T) {
	const dev = 5
	ck := func(b byte) []byte { c := make([]byte, cookieLen); c[4], c[10] = b, b; return c }
	mk := func(b byte) string { return string(ck(b)[4:10]) }
	fwd := func(handle uint32) installed {
		return installed{chain: ChainForward, handle: handle, info: uint32(PrioUnicast)<<16 | uint32(htons(EthAll)), cookie: ck(byte(handle))}
	}
	p := &Programmer{cache: map[int]*fwdCache{dev: {
		byMatch: map[string]installed{mk(1): fwd(1), mk(2): fwd(2), mk(3): fwd(3)},
		other:   []installed{{chain: ChainEntry, handle: 9, info: uint32(PrioARP)<<16 | uint32(htons(EthARP))}},
	}}}
	at := func(del bool, chain uint32, prio, proto uint16, handle uint32) tc.FilterChange {
		return tc.FilterChange{Delete: del, Chain: chain, Prio: prio, Proto: proto, Handle: handle}
	}
	got, ok := p.Forget(dev, []tc.FilterChange{
		at(true, ChainForward, PrioUnicast, EthAll, 1),  // ours, deleted
		at(false, ChainForward, PrioUnicast, EthAll, 2), // ours, changed
		at(true, ChainForward, PrioUnicast, EthARP, 3),  // another protocol's handle 3: not ours
		at(false, ChainEntry, PrioEntryAll, EthAll, 4),  // the policy programmer's place
		at(true, ChainEntry, PrioARP, EthARP, 9),        // ours, to delete anyway
		at(false, 7, PrioUnicast, EthAll, 5),            // another chain
	})
	want := []Place{{ChainForward, PrioUnicast, 1}, {ChainForward, PrioUnicast, 2}}
	if !ok || !slices.Equal(got, want) {
		t.Fatalf("Forget: %v, %v; want %v, true", got, ok, want)
	}
	c := p.cache[dev]
	if _, in := c.byMatch[mk(1)]; in || !c.byMatch[mk(2)].stale || c.byMatch[mk(3)].stale || len(c.other) != 0 {
		t.Errorf("after Forget: %+v", c)
	}
	// The stale one is replaced at its handle, not taken as installed.
	if ch, st, err := p.plan(nil, Device{Index: dev}, c, Rule{Prio: PrioUnicast, EthType: EthAll}, ck(2)); err != nil || st != nil || ch.kind != tc.Replace || ch.f.Handle != 2 {
		t.Errorf("plan of the changed filter: %+v, %v, %v; want a replacement at handle 2", ch, st, err)
	}
	if _, ok := p.Forget(dev, []tc.FilterChange{at(false, ChainForward, PrioUnicast, EthAll, 77)}); ok {
		t.Error("a filter added by hand at an unknown handle among Skiff's was placed")
	}
	if got, ok := p.Forget(6, []tc.FilterChange{at(true, ChainForward, PrioUnicast, EthAll, 1)}); !ok || got != nil {
		t.Errorf("a device not known: %v, %v; want nothing, true", got, ok)
	}

	// The policy programmer: chains 0-2, any priority.
	pf := func(chain uint32, prio uint16, handle uint32) PolicyFilter {
		return PolicyFilter{Rule: PolicyRule{Chain: chain, Prio: prio}, Handle: handle, Cookie: ck(byte(handle)), Info: uint32(prio)<<16 | uint32(htons(0x0800))}
	}
	pp := &PolicyProgrammer{cache: map[int]*polCache{dev: {at: map[string]PolicyFilter{"x": pf(ChainEntry, PrioEntryCt, 1), "y": pf(ChainIngress, 7, 2)}}}}
	got, ok = pp.Forget(dev, []tc.FilterChange{
		at(true, ChainEntry, PrioEntryCt, 0x0800, 1),
		at(false, ChainIngress, 7, 0x0800, 2),
		at(true, ChainForward, PrioUnicast, EthAll, 1), // forwarding's
	})
	if want := []Place{{ChainEntry, PrioEntryCt, 1}, {ChainIngress, 7, 2}}; !ok || !slices.Equal(got, want) {
		t.Fatalf("policy Forget: %v, %v; want %v, true", got, ok, want)
	}
	if pc := pp.cache[dev]; len(pc.at) != 1 || pc.at["y"].Cookie != nil {
		t.Errorf("after policy Forget: %+v", pc.at)
	}
}
