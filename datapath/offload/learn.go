package offload

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/skiff-sdn/skiff/internal/atomicfile"
	"github.com/skiff-sdn/skiff/internal/nl"
	"github.com/skiff-sdn/skiff/internal/plan"
	"github.com/skiff-sdn/skiff/offload/flower"
)

// Encap rules on demand (Options.Learn): a representor holds an encap
// rule only for the remote endpoints its endpoint sends to, so its rules
// grow with what the endpoint talks to, not with the nodes of its
// network. A frame for a remote endpoint without a rule leaves the
// representor unmatched and enters the replication bridge, whose static
// entries send it through the VXLAN device to the endpoint's VTEP (the
// software path; suppress.go). On its way the bridge's forward hook
// (nftables, bridge family, table LearnTable) adds the pair (input port,
// destination MAC) of every unicast frame going to the VXLAN port to a
// set whose elements expire after learnTimeout. Learn reads that set,
// gives each new pair its encap rule (flower.SendRules, written alone),
// and removes the rules whose counters have not moved for
// LearnOptions.Idle: that pair's traffic goes back to the software path
// and is learnt again when it resumes. The pairs are kept in
// LearnOptions.State, so a restarted agent compiles the same rules and
// writes nothing.

// LearnTable is the bridge-family nftables table that learns the pairs.
const LearnTable = "skiff-learn"

// learnSet is the table's set of (input port, destination MAC) pairs.
const learnSet = "sent"

// learnTimeout is how long a pair stays in the set after its last frame:
// longer than Learn's interval, shorter than any Idle.
const learnTimeout = 30 * time.Second

// learnSize caps the pairs the set holds (what the bridge forwards to
// the tunnel between two reads).
const learnSize = 65536

// LearnOptions turns encap rules on demand on.
type LearnOptions struct {
	// Idle is how long an encap rule may carry nothing before it is
	// removed (5 minutes when 0; at least learnTimeout).
	Idle time.Duration
	// State is the file the learnt pairs are kept in across restarts
	// (none when empty).
	State string
}

// sent is a learnt pair's rule: its counter when last read, and since
// when it has not moved.
type sent struct {
	packets uint64
	since   time.Time
}

// learning is the datapath's learnt pairs, under d.op.
type learning struct {
	opts LearnOptions
	// sends: local endpoint -> remote endpoint name -> its rule.
	sends map[string]map[string]*sent
	// What the set's pairs are read by, made by the last whole Apply
	// and kept by remote endpoint changes: local endpoints by their
	// representors, their networks, and remote endpoints by network and
	// MAC. byRep is nil before the first whole Apply.
	byRep, nets map[string]string
	macs        map[[2]string]string
	// learnt and idle count the pairs learnt and removed as idle.
	learnt, idle int
	// swept is when idle rules were last looked for.
	swept time.Time
	now   func() time.Time // time.Now; tests turn it
}

// learnState is the State file.
type learnState struct {
	Sends map[string][]string `json:"sends"`
}

// newLearning reads the State file. The file only saves relearning: one
// that cannot be read or decoded is logged and the pairs start empty
// (their traffic takes the software path until learnt again); the next
// save replaces it.
func newLearning(o *LearnOptions, log *slog.Logger) (*learning, error) {
	if o == nil {
		return nil, nil
	}
	l := &learning{opts: *o, sends: map[string]map[string]*sent{}, now: time.Now}
	if l.opts.Idle == 0 {
		l.opts.Idle = 5 * time.Minute
	}
	if l.opts.Idle < learnTimeout {
		return nil, fmt.Errorf("learn.idle: %v is shorter than the learning set's timeout %v", l.opts.Idle, learnTimeout)
	}
	if l.opts.State == "" {
		return l, nil
	}
	b, err := os.ReadFile(l.opts.State)
	if errors.Is(err, os.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		log.Warn("learnt pairs not read, starting with none", "state", l.opts.State, "err", err)
		return l, nil
	}
	var s learnState
	if err := json.Unmarshal(b, &s); err != nil {
		log.Warn("learnt pairs not decoded, starting with none", "state", l.opts.State, "err", err)
		return l, nil
	}
	now := l.now()
	for ep, names := range s.Sends {
		for _, n := range names {
			l.add(ep, n, now)
		}
	}
	return l, nil
}

func (l *learning) add(ep, name string, now time.Time) bool {
	m := l.sends[ep]
	if m == nil {
		m = map[string]*sent{}
		l.sends[ep] = m
	}
	if _, ok := m[name]; ok {
		return false
	}
	m[name] = &sent{since: now}
	return true
}

func (l *learning) remove(ep, name string) {
	delete(l.sends[ep], name)
	if len(l.sends[ep]) == 0 {
		delete(l.sends, ep)
	}
}

// of is flower.Input.Sends: the remote endpoints ep sends to, sorted.
func (l *learning) of(ep string) []string {
	return slices.Sorted(maps.Keys(l.sends[ep]))
}

// prune forgets the pairs whose endpoint or remote endpoint left p.
func (l *learning) prune(p plan.Plan) (changed bool) {
	for ep, m := range l.sends {
		if _, ok := p.Local[ep]; !ok {
			delete(l.sends, ep)
			changed = true
			continue
		}
		for n := range m {
			if _, ok := p.Remote[n]; !ok {
				l.remove(ep, n)
				changed = true
			}
		}
	}
	return changed
}

// index makes what the set's pairs are read by from p and the
// representors of its local endpoints.
func (l *learning) index(p plan.Plan, reps map[string]string) {
	l.indexReps(p, reps)
	l.macs = make(map[[2]string]string, len(p.Remote))
	for n, r := range p.Remote {
		l.macs[[2]string{r.Network, strings.ToLower(r.MAC)}] = n
	}
}

// indexReps makes the local endpoints' part of the index: only the
// pairs of these representors are learnt.
func (l *learning) indexReps(p plan.Plan, reps map[string]string) {
	l.byRep = make(map[string]string, len(reps))
	l.nets = make(map[string]string, len(reps))
	for ep, rep := range reps {
		l.byRep[rep], l.nets[ep] = ep, p.Local[ep].Network
	}
}

// remotes follows the change of the named remote endpoints from old to
// cur: the index, and the pairs of those that left.
func (l *learning) remotes(old, cur plan.Plan, names []string) (changed bool) {
	if l.macs == nil {
		l.macs = map[[2]string]string{}
	}
	for _, n := range names {
		if r, ok := old.Remote[n]; ok {
			k := [2]string{r.Network, strings.ToLower(r.MAC)}
			if l.macs[k] == n {
				delete(l.macs, k)
			}
		}
		if r, ok := cur.Remote[n]; ok {
			l.macs[[2]string{r.Network, strings.ToLower(r.MAC)}] = n
			continue
		}
		for ep, m := range l.sends {
			if _, ok := m[n]; ok {
				l.remove(ep, n)
				changed = true
			}
		}
	}
	return changed
}

// save writes the pairs to the State file.
func (l *learning) save() error {
	if l.opts.State == "" {
		return nil
	}
	s := learnState{Sends: map[string][]string{}}
	for ep := range l.sends {
		s.Sends[ep] = l.of(ep)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteWith(filepath.Dir(l.opts.State), filepath.Base(l.opts.State), b, atomicfile.Options{Perm: 0o600, DirPerm: 0o700}); err != nil {
		return fmt.Errorf("offload datapath: saving learnt pairs: %w", err)
	}
	return nil
}

// learnTable is LearnTable as the kernel must hold it: with rules when
// the node has the replication bridge or representors to serve (the
// bridge is made in the same Apply), none (deleted) otherwise.
func learnTable(bridge bool) nl.NftTable {
	t := nl.NftTable{Family: nl.NftBridge, Name: LearnTable}
	if !bridge {
		return t
	}
	t.Sets = []nl.NftSet{{Name: learnSet, Key: nl.SetKeyIfNameEther, Timeout: learnTimeout, Size: learnSize}}
	t.Chains = []nl.NftChain{{Name: "forward", Hook: nl.HookForward, Type: nl.ChainFilter, Priority: nl.PriorityFilter,
		Rules: []nl.NftRule{{Tag: "learn", Match: []nl.NftMatch{nl.IfName{Out: true, Name: VXLANName}, nl.EtherUnicast{}},
			Action: nl.LearnPair{Set: learnSet}}}}}
	return t
}

// Learn gives each pair (local endpoint, remote endpoint) the
// replication bridge forwarded since the last call its encap rule, and
// removes the rules of pairs idle for LearnOptions.Idle. apply: what it
// learnt needs a whole Apply of the current plan (the last one was not
// whole and clean, or the change cannot be made alone). A datapath
// without Options.Learn learns nothing. Safe to call while Apply runs
// (one waits for the other); call it about every second.
func (d *Datapath) Learn() (apply bool, err error) {
	l := d.learn
	if l == nil {
		return false, nil
	}
	d.op.Lock()
	defer d.op.Unlock()
	es, err := d.k.SetElements(nl.NftBridge, LearnTable, learnSet)
	if err != nil {
		return false, fmt.Errorf("offload datapath: reading learnt pairs: %w", err)
	}
	now := l.now()
	added := l.pairs(es, now)
	if !d.last.valid {
		// The last Apply was not whole and clean: the next one
		// compiles what was learnt.
		if len(added) == 0 {
			return false, nil
		}
		return true, l.save()
	}
	p, in := d.last.plan, d.last.in
	var errs []error
	changed := len(added) > 0
	if changed {
		if err := d.changeSends(p, in, added, false); err != nil {
			if !errors.Is(err, flower.ErrNotIncremental) && !errors.Is(err, errDevices) {
				errs = append(errs, err)
			}
			d.last.valid, apply = false, true
		}
	}
	if !apply && now.Sub(l.swept) >= l.opts.Idle/4 {
		l.swept = now
		idle, err := d.idleSends(now)
		if err != nil {
			errs = append(errs, err)
		} else if len(idle) > 0 {
			changed = true
			if err := d.changeSends(p, in, idle, true); err != nil {
				if !errors.Is(err, flower.ErrNotIncremental) && !errors.Is(err, errDevices) {
					errs = append(errs, err)
				}
				d.last.valid, apply = false, true
			}
			for ep, names := range idle {
				for _, n := range names {
					l.remove(ep, n)
					l.idle++
				}
			}
		}
	}
	if changed {
		if err := l.save(); err != nil {
			errs = append(errs, err)
		}
	}
	return apply, errors.Join(errs...)
}

// pairs adds what es holds to the learnt pairs and returns the new
// ones.
func (l *learning) pairs(es []nl.NftElement, now time.Time) map[string][]string {
	added := map[string][]string{}
	for _, e := range es {
		ep, ok := l.byRep[e.IfName]
		if !ok {
			continue
		}
		n, ok := l.macs[[2]string{l.nets[ep], e.MAC}]
		if ok && l.add(ep, n, now) {
			added[ep] = append(added[ep], n)
			l.learnt++
		}
	}
	return added
}

// learnForApply makes the learnt pairs match p before a whole Apply
// compiles it: those whose endpoint or remote endpoint left are
// forgotten, and the index is made again (Learn reads the set). It
// returns in with Sends.
func (d *Datapath) learnForApply(p plan.Plan, in flower.Input) (flower.Input, error) {
	l := d.learn
	if l == nil {
		return in, nil
	}
	l.index(p, in.Reps)
	in.Sends = l.of
	if l.prune(p) {
		return in, l.save()
	}
	return in, nil
}

// changeSends writes the encap rules of pairs alone, added or (remove)
// deleted, and keeps the rule list of the last Apply. An error of
// flower.ErrNotIncremental or errDevices: a whole Apply must follow.
func (d *Datapath) changeSends(p plan.Plan, in flower.Input, pairs map[string][]string, remove bool) error {
	rules, err := flower.SendRules(p, in, pairs)
	if err != nil {
		return fmt.Errorf("offload datapath: %w", err)
	}
	if len(rules) == 0 {
		return nil
	}
	d.mu.Lock()
	devs := d.devs
	d.mu.Unlock()
	touched := map[string]int{}
	for _, r := range rules {
		touched[r.Dev] = d.prog.Installed(devs[r.Dev].Index)
	}
	var old, cur []flower.Rule
	if remove {
		old = rules
	} else {
		cur = rules
	}
	now, err := d.prog.Change(devs, old, cur)
	if err != nil {
		return err
	}
	d.mu.Lock()
	swapRules(&d.rules, &d.states, &d.fwdAt, fwdAt, old, cur, now)
	d.mu.Unlock()
	for dev, n := range touched {
		if (n == 0) != (d.prog.Installed(devs[dev].Index) == 0) {
			return errDevices // the policy pipeline's way into forwarding changes
		}
	}
	return nil
}

// idleSends returns the learnt pairs whose rule's counters have not
// moved for Idle (or that have no rule), reading the counters of every
// learnt pair's rule.
func (d *Datapath) idleSends(now time.Time) (map[string][]string, error) {
	l, p, in := d.learn, d.last.plan, d.last.in
	type at struct{ ep, name string }
	var where []at
	var states []flower.State
	d.mu.Lock()
	if d.fwdAt == nil {
		d.fwdAt = positions(d.rules, fwdAt)
	}
	for ep, m := range l.sends {
		for n := range m {
			r, ok := p.Remote[n]
			i, found := d.fwdAt[fwdPlace{in.Reps[ep], flower.PrioUnicast, flower.EthAll, flower.Match{DstMAC: r.MAC}}]
			if !ok || !found {
				where = append(where, at{ep, n})
				states = append(states, flower.State{})
				continue
			}
			where = append(where, at{ep, n})
			states = append(states, d.states[i])
		}
	}
	devs := d.devs
	d.mu.Unlock()
	var read []flower.State
	for _, s := range states {
		if s.Rule.Dev != "" {
			read = append(read, s)
		}
	}
	if len(read) > 0 {
		if err := d.prog.Refresh(devs, read); err != nil {
			return nil, fmt.Errorf("offload datapath: reading learnt rules: %w", err)
		}
	}
	idle := map[string][]string{}
	j := 0
	for i, w := range where {
		s := l.sends[w.ep][w.name]
		if states[i].Rule.Dev != "" {
			c := read[j]
			j++
			if c.Packets != s.packets {
				s.packets, s.since = c.Packets, now
				continue
			}
		}
		if now.Sub(s.since) >= l.opts.Idle {
			idle[w.ep] = append(idle[w.ep], w.name)
		}
	}
	return idle, nil
}

// LearnStats is the pairs (local endpoint, remote endpoint) with an
// encap rule now, and how many were learnt and removed as idle so far;
// all 0 without Options.Learn.
func (d *Datapath) LearnStats() (pairs, learnt, idle int) {
	if d.learn == nil {
		return 0, 0, 0
	}
	d.op.Lock()
	defer d.op.Unlock()
	for _, m := range d.learn.sends {
		pairs += len(m)
	}
	return pairs, d.learn.learnt, d.learn.idle
}
