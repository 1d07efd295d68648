package nltest

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/rtnl"
	"github.com/skiff-sdn/skiff/internal/nl/tc"
)

// tcClient is a fake tc.Client: one port id per socket it was opened
// with, and the namespace's filters held as tcblock.go does. Not safe
// for concurrent use, as the real one (the namespace is).
type tcClient struct {
	w      *World
	ns     *NS
	ports  []uint32
	msgs   atomic.Int64
	closed atomic.Bool
}

var _ tc.Client = (*tcClient)(nil)

func (k *kernel) TC(sockets int) (tc.Client, error) {
	c := &tcClient{w: k.w}
	err := k.do(func(n *NS) error {
		c.ns = n
		for range max(sockets, 1) {
			n.w.port++
			c.ports = append(c.ports, n.w.port)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// do runs f on the client's namespace under the world's lock.
func (c *tcClient) do(f func(n *NS) error) error {
	if c.closed.Load() {
		return fmt.Errorf("tc: %w", errClosed)
	}
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	if c.ns.dead {
		return fmt.Errorf("tc: namespace %s was deleted", c.ns.path)
	}
	return f(c.ns)
}

func checkOps(ops []tc.Op) error {
	for i, op := range ops {
		if op.Kind < tc.Add || op.Kind > tc.Delete {
			return fmt.Errorf("tc: op %d: unknown kind %d", i, op.Kind)
		}
	}
	return nil
}

func (c *tcClient) Write(ops []tc.Op) ([]error, error) { return c.write(ops, false) }

// WriteAny carries ops out in order; as the real one, bulk writes are
// split in runs over the client's sockets (their notifications carry
// each run's port id).
func (c *tcClient) WriteAny(ops []tc.Op) ([]error, error) { return c.write(ops, true) }

func (c *tcClient) write(ops []tc.Op, split bool) ([]error, error) {
	if err := checkOps(ops); err != nil {
		return nil, err
	}
	errs := make([]error, len(ops))
	err := c.do(func(n *NS) error {
		runs := 1
		if split {
			runs = max(1, min(len(c.ports), len(ops)/rtnl.SplitMin))
		}
		for i, op := range ops {
			port := c.ports[i*runs/max(len(ops), 1)]
			if errs[i] = n.write(port, op); errs[i] != nil {
				c.msgs.Add(1)
			}
		}
		c.msgs.Add(int64(len(ops) + runs))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return errs, nil
}

func (c *tcClient) Do(op tc.Op) error {
	errs, err := c.Write([]tc.Op{op})
	if err != nil {
		return err
	}
	return errs[0]
}

func (c *tcClient) Dump(ifindex int, o tc.DumpOptions) ([]tc.Filter, error) {
	var out []tc.Filter
	err := c.DumpFunc(ifindex, o, func(f *tc.Filter) { out = append(out, *f) })
	return out, err
}

// filters are the filters a dump of ifindex with o returns, copied; a
// device or qdisc that is not there has none.
func (c *tcClient) filters(ifindex int, o tc.DumpOptions) ([]tc.Filter, error) {
	var out []tc.Filter
	err := c.do(func(n *NS) error {
		parent := o.Parent
		if parent == 0 {
			parent = tc.Ingress
		}
		chains := o.Chains
		if chains == nil {
			chains = []uint32{0}
		}
		for _, ch := range chains {
			c.msgs.Add(2) // the request and its end
			l := n.links[ifindex]
			if l == nil || l.qdisc == "" {
				continue
			}
			b, err := l.block(parent)
			if err != nil {
				continue
			}
			fs, heads := b.dump(ch, o.Chains == nil)
			c.msgs.Add(int64(len(fs) + heads))
			for _, x := range fs {
				out = append(out, copyFilter(x.f))
			}
		}
		return nil
	})
	return out, err
}

func copyFilter(f tc.Filter) tc.Filter {
	f.Actions = slices.Clone(f.Actions)
	for i := range f.Actions {
		f.Actions[i].Cookie = slices.Clone(f.Actions[i].Cookie)
	}
	f.Match.DstMAC = slices.Clone(f.Match.DstMAC)
	f.Match.DstMACMask = slices.Clone(f.Match.DstMACMask)
	return f
}

func (c *tcClient) DumpFunc(ifindex int, o tc.DumpOptions, fn func(f *tc.Filter)) error {
	fs, err := c.filters(ifindex, o)
	if err != nil {
		return fmt.Errorf("tc: dumping filters of ifindex %d: %w", ifindex, err)
	}
	for i := range fs {
		fn(&fs[i])
	}
	return nil
}

// DumpTerse gives what a terse dump carries: a flower filter's place,
// flags and actions' cookies and counters (no keys). fw has no terse
// form: the kernel ends a terse dump at the first fw priority it meets,
// without an error, so that priority and every filter after it in the
// dump (that chain's, and with chains nil the later chains') are not
// reported; the fake does the same.
func (c *tcClient) DumpTerse(ifindex int, chains []uint32, fn func(f *tc.Terse)) error {
	dumps := [][]uint32{nil}
	if chains != nil {
		dumps = nil
		for _, ch := range chains {
			dumps = append(dumps, []uint32{ch})
		}
	}
	var fs []tc.Filter
	for _, chs := range dumps {
		part, err := c.filters(ifindex, tc.DumpOptions{Chains: chs, Terse: true})
		if err != nil {
			return fmt.Errorf("tc: dumping filters of ifindex %d: %w", ifindex, err)
		}
		if i := slices.IndexFunc(part, func(f tc.Filter) bool { return f.Kind == tc.KindFw }); i >= 0 {
			part = part[:i]
		}
		fs = append(fs, part...)
	}
	for i := range fs {
		t := tc.TerseOf(&fs[i])
		fn(&t)
	}
	return nil
}

// rootQdisc is the qdisc the kernel gives an up link: pfifo_fast for a
// tap (it has a queue), noqueue for the others (virtual devices, and
// devices as netdevsim's ports and representors have it; a multiqueue
// NIC's mq is not modelled).
func rootQdisc(l *link) string {
	if !l.Up {
		return ""
	}
	if l.Kind == "tuntap" {
		return "pfifo_fast"
	}
	return "noqueue"
}

func (c *tcClient) Qdiscs() ([]tc.Qdisc, error) {
	var out []tc.Qdisc
	err := c.do(func(n *NS) error {
		ls := n.sorted()
		slices.SortFunc(ls, func(a, b *link) int { return a.seq - b.seq }) // the device list
		for _, l := range ls {
			if q := rootQdisc(l); q != "" {
				out = append(out, tc.Qdisc{Ifindex: l.Index, Parent: 0xffffffff, Kind: q}) // TC_H_ROOT
			}
			if l.qdisc != "" {
				out = append(out, tc.Qdisc{Ifindex: l.Index, Handle: tc.TC_H_CLSACT & 0xffff0000, Parent: tc.TC_H_CLSACT, Kind: l.qdisc})
			}
		}
		c.msgs.Add(int64(len(out) + 2))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("tc: listing qdiscs: %w", err)
	}
	return out, nil
}

func (c *tcClient) AddClsact(ifindex int) error {
	err := c.do(func(n *NS) error {
		c.msgs.Add(2)
		l := n.links[ifindex]
		switch {
		case l == nil:
			return refuse(unix.ENODEV, "")
		case l.qdisc != "":
			return refuse(unix.EEXIST, "Exclusivity flag on, cannot modify")
		}
		l.qdisc = "clsact"
		n.notify(tcNote{port: c.ports[0], ifindex: ifindex, qdisc: true})
		return nil
	})
	if err != nil {
		return fmt.Errorf("tc: clsact on ifindex %d: %w", ifindex, err)
	}
	return nil
}

func (c *tcClient) PortIDs() []uint32 { return slices.Clone(c.ports) }

func (c *tcClient) Messages() int64 { return c.msgs.Load() }

func (c *tcClient) Close() error {
	c.closed.Store(true)
	return nil
}

// tcWatcher is a fake tc.Watcher: the notifications of its namespace's
// tc changes not made through ignored port ids, kept as the real Watch
// keeps them. Safe for concurrent use.
type tcWatcher struct {
	ns   *NS
	mu   sync.Mutex
	own  map[uint32]bool
	devs map[int]*tc.DeviceChanges
	lost bool
	seen int64
}

var _ tc.Watcher = (*tcWatcher)(nil)

// maxFilterChanges is the real watch's limit of changes listed per
// device.
const maxFilterChanges = 64

func (k *kernel) WatchTC() (tc.Watcher, error) {
	w := &tcWatcher{own: map[uint32]bool{}, devs: map[int]*tc.DeviceChanges{}}
	err := k.do(func(n *NS) error {
		w.ns = n
		n.watchers = append(n.watchers, w)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return w, nil
}

// note takes one notification: one of an ignored socket is dropped
// before it is read, a chain's is read and not counted.
func (w *tcWatcher) note(x tcNote) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.own[x.port] {
		return
	}
	w.seen++
	if x.chain {
		return
	}
	dc := w.devs[x.ifindex]
	if dc == nil {
		dc = &tc.DeviceChanges{}
		w.devs[x.ifindex] = dc
	}
	switch {
	case dc.Whole:
	case x.qdisc || x.change.Handle == 0 || len(dc.Filters) == maxFilterChanges:
		dc.Whole, dc.Filters = true, nil
	default:
		dc.Filters = append(dc.Filters, x.change)
	}
}

func (w *tcWatcher) Ignore(portIDs ...uint32) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range portIDs {
		w.own[id] = true
	}
	return nil
}

func (w *tcWatcher) Changes() (map[int]tc.DeviceChanges, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	devs := make(map[int]tc.DeviceChanges, len(w.devs))
	for i, dc := range w.devs {
		devs[i] = *dc
	}
	lost := w.lost
	clear(w.devs)
	w.lost = false
	return devs, lost
}

func (w *tcWatcher) Changed() (map[int]bool, bool) {
	changes, lost := w.Changes()
	devs := make(map[int]bool, len(changes))
	for i := range changes {
		devs[i] = true
	}
	return devs, lost
}

func (w *tcWatcher) Notifications() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen
}

func (w *tcWatcher) Close() error {
	w.ns.w.mu.Lock()
	defer w.ns.w.mu.Unlock()
	w.ns.watchers = slices.DeleteFunc(w.ns.watchers, func(x *tcWatcher) bool { return x == w })
	return nil
}
