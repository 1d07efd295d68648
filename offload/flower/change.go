package flower

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/tc"
	"github.com/skiff-sdn/skiff/internal/plan"
)

// RemoteRules returns the rules Compile makes of p for the named remote
// endpoints: encap and ARP on each representor of their network, the
// rules whose only input besides the locals is the remote endpoint (a
// remote endpoint's change changes nothing else). Names not in p have
// none.
func RemoteRules(p plan.Plan, in Input, names []string) ([]Rule, error) {
	q := p
	q.Remote = make(map[string]plan.Remote, len(names))
	for _, n := range names {
		if r, ok := p.Remote[n]; ok {
			q.Remote[n] = r
		}
	}
	if len(q.Remote) == 0 {
		return nil, nil
	}
	in.encapOnly = true
	all, err := Compile(q, in)
	if refused := RefusedNetworks(err); refused != nil {
		// Another network refused is none of these endpoints' business;
		// their own refused is decided by compiling the whole plan.
		for _, n := range names {
			if r, ok := q.Remote[n]; ok && refused[r.Network] != nil {
				return nil, fmt.Errorf("remote endpoint %s: %w: %w", n, ErrNotIncremental, refused[r.Network])
			}
		}
		err = nil
	}
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, r := range all {
		if r.Kind == KindEncap && len(r.Actions) > 0 && r.Actions[0].Kind == TunnelSet {
			out = append(out, r)
		}
	}
	return out, nil
}

// SendRules returns the encap rules Compile makes of p, with in.Sends
// naming these pairs (local endpoint -> remote endpoint names), on
// those endpoints' representors: what pairs newly learnt add
// (Programmer.Change), or what idle ones remove. A pair whose endpoint
// has no representor, or whose remote endpoint is not in p or in
// another network, has none. ErrNotIncremental: the network of a pair
// is refused (a whole compile decides whether it still is).
func SendRules(p plan.Plan, in Input, pairs map[string][]string) ([]Rule, error) {
	q := p
	q.Local = make(map[string]plan.Endpoint, len(pairs))
	q.Remote = map[string]plan.Remote{}
	for ep, names := range pairs {
		e, ok := p.Local[ep]
		if !ok {
			continue
		}
		q.Local[ep] = e
		for _, n := range names {
			if r, ok := p.Remote[n]; ok && r.Network == e.Network {
				q.Remote[n] = r
			}
		}
	}
	if len(q.Remote) == 0 {
		return nil, nil
	}
	in.Sends = func(ep string) []string { return pairs[ep] }
	in.encapOnly = true
	all, err := Compile(q, in)
	if refused := RefusedNetworks(err); refused != nil {
		for ep := range q.Local {
			if e := refused[q.Local[ep].Network]; e != nil {
				return nil, fmt.Errorf("local endpoint %s: %w: %w", ep, ErrNotIncremental, e)
			}
		}
		err = nil
	}
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, r := range all {
		if r.Kind == KindEncap && r.Endpoint != "" {
			out = append(out, r)
		}
	}
	return out, nil
}

// ErrNotIncremental says Change cannot make a change on its own: a rule
// it would add has the match of a rule it was not told about (Sync
// decides).
var ErrNotIncremental = errors.New("flower: change not incremental")

// Change adds (or replaces in place) the rules add and deletes the
// installed rules of remove whose match no rule of add takes, on devices
// it knows (Sync or Read saw them), without reading the kernel. It
// returns the state of every rule of add. ErrNotIncremental, before
// anything is written: a device is not known, or a rule of add has the
// match of an installed rule that is not in remove.
func (p *Programmer) Change(devs map[string]Device, remove, add []Rule) ([]State, error) {
	type key struct {
		dev string
		mk  string
	}
	removing := map[key]bool{}
	for _, r := range remove {
		removing[key{r.Dev, string(cookieFor(devs, r)[4:10])}] = true
	}
	// Check first: nothing is written unless all of it can be.
	byDev := map[string][]int{}
	cookies := make([][]byte, len(add))
	for i, r := range add {
		dev, ok := devs[r.Dev]
		if !ok {
			return nil, ErrNotIncremental
		}
		c, ok := p.cache[dev.Index]
		if !ok {
			return nil, ErrNotIncremental
		}
		cookies[i] = cookieFor(devs, r)
		k := key{r.Dev, string(cookies[i][4:10])}
		if _, taken := c.byMatch[k.mk]; taken && !removing[k] {
			return nil, ErrNotIncremental
		}
		byDev[r.Dev] = append(byDev[r.Dev], i)
		delete(removing, k) // replaced in place, not deleted
	}
	for k := range removing {
		dev, ok := devs[k.dev]
		if !ok {
			return nil, ErrNotIncremental
		}
		if _, ok := p.cache[dev.Index]; !ok {
			return nil, ErrNotIncremental
		}
	}
	states := make([]State, len(add))
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(byDev)) {
		dev := devs[name]
		errs = append(errs, p.sync(devs, dev, p.cache[dev.Index], add, cookies, byDev[name], states)...)
	}
	// Delete last.
	var ops []tc.Op
	var gone []key
	for _, k := range slices.SortedFunc(maps.Keys(removing), func(a, b key) int {
		if a.dev != b.dev {
			return strings.Compare(a.dev, b.dev)
		}
		return strings.Compare(a.mk, b.mk)
	}) {
		dev := devs[k.dev]
		h, ok := p.cache[dev.Index].byMatch[k.mk]
		if !ok {
			continue
		}
		ops = append(ops, tc.Op{Kind: tc.Delete, Filter: &tc.Filter{Ifindex: dev.Index, Chain: h.chain, Prio: uint16(h.info >> 16), Proto: htons(uint16(h.info)), Handle: h.handle}})
		gone = append(gone, k)
	}
	if len(ops) > 0 {
		res, err := p.w.do(ops)
		if err != nil {
			p.InvalidateAll()
			return fill(add, states), fmt.Errorf("flower: deleting filters: %w", err)
		}
		for i, k := range gone {
			if e := res[i]; e != nil && !errors.Is(e, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("flower: deleting filter of %s: %w", k.dev, e))
				continue
			}
			delete(p.cache[devs[k.dev].Index].byMatch, k.mk)
		}
	}
	return fill(add, states), errors.Join(errs...)
}
