package nltest

import (
	"reflect"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/skiff-sdn/skiff/internal/nl/rtnl"
	"github.com/skiff-sdn/skiff/internal/nl/tc"
)

// The filters of a link's ingress or egress as the kernel holds them: a
// block of chains (in the order they were made), each of priorities
// (tcf_proto: one protocol and classifier each, in priority order), each
// of filters. What is kept of a filter is what the codec carries
// (tc.Decode of its encoding), with the flags the kernel adds.

type tcBlock struct{ chains []*tcChain }

type tcChain struct {
	index uint32
	refs  int // goto chain actions pointing at it
	tps   []*tcProto
}

type tcProto struct {
	prio    uint16
	proto   uint16
	kind    string
	mask    uint32 // a fw priority's mark mask, shared by its filters
	filters []*tcFilter
	seq     int
}

type tcFilter struct {
	f   tc.Filter
	seq int // order of insertion (fw dumps by hash bucket, newest first)
}

// refuse is the kernel's refusal of a request: its errno and extended
// acknowledgement's message.
func refuse(errno unix.Errno, msg string) error { return &rtnl.Error{Errno: errno, Message: msg} }

const (
	msgNoQdisc   = "Parent Qdisc doesn't exists"
	msgNoPrio    = "Filter with specified priority/protocol not found"
	msgKind      = "Specified filter kind does not match existing one"
	msgExists    = "Filter already exists"
	msgNeedBoth  = "Need both RTM_NEWTFILTER and NLM_F_CREATE to create a new filter"
	msgNoHandle  = "Specified filter handle not found"
	msgNoChain   = "Cannot find specified filter chain"
	msgKindProto = "Filter kind and protocol must be specified"
	msgNoDevice  = "Specified device does not exist"
	msgZeroPrio  = "Invalid filter command with priority of zero"
)

// block is the block of l at parent (ingress or egress of its qdisc), or
// the kernel's refusal.
func (l *link) block(parent uint32) (*tcBlock, error) {
	i := -1
	switch {
	case parent == tc.Ingress && l.qdisc != "":
		i = 0
	case parent == tc.TC_H_CLSACT&0xffff0000|tc.TC_H_MIN_EGRESS && l.qdisc == "clsact":
		i = 1
	}
	if i < 0 {
		return nil, refuse(unix.EINVAL, msgNoQdisc)
	}
	if l.blocks[i] == nil {
		l.blocks[i] = &tcBlock{}
	}
	return l.blocks[i], nil
}

func (b *tcBlock) chain(index uint32) *tcChain {
	for _, c := range b.chains {
		if c.index == index {
			return c
		}
	}
	return nil
}

// hold makes chain index (noting it when new) and returns it.
func (n *NS) hold(b *tcBlock, ifindex int, index uint32) *tcChain {
	if c := b.chain(index); c != nil {
		return c
	}
	c := &tcChain{index: index}
	b.chains = append(b.chains, c)
	n.notify(tcNote{ifindex: ifindex, chain: true})
	return c
}

// release deletes chain c when nothing holds it.
func (n *NS) release(b *tcBlock, ifindex int, c *tcChain) {
	if len(c.tps) == 0 && c.refs == 0 {
		b.chains = slices.DeleteFunc(b.chains, func(x *tcChain) bool { return x == c })
		n.notify(tcNote{ifindex: ifindex, chain: true})
	}
}

// gotos adds d (1 or -1) to the references of the chains f's goto
// actions name.
func (n *NS) gotos(b *tcBlock, ifindex int, f *tc.Filter, d int) {
	for _, a := range f.Actions {
		if a.Kind != tc.KindGact || a.Verdict&^tc.TC_ACT_EXT_VAL_MASK != tc.TC_ACT_GOTO_CHAIN {
			continue
		}
		c := n.hold(b, ifindex, a.Verdict&tc.TC_ACT_EXT_VAL_MASK)
		c.refs += d
		if d < 0 {
			n.release(b, ifindex, c)
		}
	}
}

func (c *tcChain) proto(prio uint16) *tcProto {
	for _, tp := range c.tps {
		if tp.prio == prio {
			return tp
		}
	}
	return nil
}

func (tp *tcProto) get(handle uint32) int {
	return slices.IndexFunc(tp.filters, func(x *tcFilter) bool { return x.f.Handle == handle })
}

// fwHash is cls_fw's bucket of a handle.
func fwHash(h uint32) uint32 {
	h ^= h >> 16
	h ^= h >> 8
	return h & 0xff
}

// dump returns the filters of b's chain index (all chains when all) in
// the kernel's order: chains as made, priorities ascending, flower by
// handle, fw by bucket and newest first. heads counts the priorities
// (each has a message of its own in a dump).
func (b *tcBlock) dump(index uint32, all bool) (out []*tcFilter, heads int) {
	for _, c := range b.chains {
		if !all && c.index != index {
			continue
		}
		for _, tp := range c.tps {
			heads++
			fs := slices.Clone(tp.filters)
			if tp.kind == tc.KindFw {
				slices.SortStableFunc(fs, func(a, b *tcFilter) int {
					if ha, hb := fwHash(a.f.Handle), fwHash(b.f.Handle); ha != hb {
						return int(ha) - int(hb)
					}
					return b.seq - a.seq
				})
			}
			out = append(out, fs...)
		}
	}
	return out, heads
}

// validFlags is cls_api's tc_flags_valid: skip_hw, skip_sw (not both)
// and verbose only.
func validFlags(flags uint32) bool {
	if flags&^(tc.TCA_CLS_FLAGS_SKIP_HW|tc.TCA_CLS_FLAGS_SKIP_SW|1<<4) != 0 {
		return false
	}
	return flags&(tc.TCA_CLS_FLAGS_SKIP_HW|tc.TCA_CLS_FLAGS_SKIP_SW) != tc.TCA_CLS_FLAGS_SKIP_HW|tc.TCA_CLS_FLAGS_SKIP_SW
}

// offload gives a flower filter on l the flags the kernel adds: in_hw
// when the device took it, not_in_hw otherwise; a skip_sw filter the
// device does not take is refused (EOPNOTSUPP on a device that offloads
// nothing, the driver's refusal on one that does).
func offload(l *link, f *tc.Filter) error {
	skipSW, skipHW := f.Flags&tc.TCA_CLS_FLAGS_SKIP_SW != 0, f.Flags&tc.TCA_CLS_FLAGS_SKIP_HW != 0
	switch {
	case skipHW:
	case !l.hw:
		if skipSW {
			return refuse(unix.EOPNOTSUPP, "")
		}
	case l.refusal != nil:
		if skipSW {
			return &rtnl.Error{Errno: l.refusal.Errno, Message: l.refusal.Message}
		}
	default:
		f.Flags |= tc.TCA_CLS_FLAGS_IN_HW
		return nil
	}
	f.Flags |= tc.TCA_CLS_FLAGS_NOT_IN_HW
	return nil
}

// write carries out one op of a tc client whose socket has port id
// port, as the kernel does, and notifies the watchers.
func (n *NS) write(port uint32, op tc.Op) error {
	if op.Filter == nil {
		return refuse(unix.EINVAL, "")
	}
	if op.Kind == tc.Delete {
		return n.deleteFilter(port, op.Filter)
	}
	// What the kernel reads of the request: the codec's encoding, with
	// a placeholder for a flower handle the kernel is to pick.
	enc := *op.Filter
	pick := enc.Kind != tc.KindFw && enc.Handle == 0
	if pick {
		enc.Handle = 1
	}
	f, ok, err := tc.Decode(enc.Encode())
	if err != nil || !ok {
		return refuse(unix.EINVAL, "")
	}
	if pick {
		f.Handle = 0
	}
	l := n.links[f.Ifindex]
	if l == nil {
		return refuse(unix.ENODEV, "")
	}
	b, err := l.block(f.Parent)
	if err != nil {
		return err
	}
	create := op.Kind == tc.Add
	if f.Prio == 0 && !create {
		return refuse(unix.ENOENT, msgZeroPrio)
	}
	c := n.hold(b, f.Ifindex, f.Chain)
	err = n.change(port, l, b, c, &f, create)
	n.release(b, f.Ifindex, c)
	return err
}

// change adds (create) or replaces f in chain c of b.
func (n *NS) change(port uint32, l *link, b *tcBlock, c *tcChain, f *tc.Filter, create bool) error {
	alloc := f.Prio == 0
	if alloc {
		f.Prio = 0xc000
		if len(c.tps) > 0 {
			f.Prio = c.tps[0].prio - 1
		}
	}
	tp := c.proto(f.Prio)
	switch {
	case tp != nil && (alloc || f.Proto != 0 && tp.proto != f.Proto):
		return refuse(unix.EINVAL, msgNoPrio)
	case tp != nil && tp.kind != f.Kind:
		return refuse(unix.EINVAL, msgKind)
	case tp == nil && f.Proto == 0:
		return refuse(unix.EINVAL, msgKindProto)
	case tp == nil && !create:
		return refuse(unix.ENOENT, msgNeedBoth)
	}
	i := -1
	if tp != nil {
		i = tp.get(f.Handle)
	}
	switch {
	case f.Kind == tc.KindFw && f.Handle == 0:
		return refuse(unix.EINVAL, "")
	case i >= 0 && create:
		return refuse(unix.EEXIST, msgExists)
	case i < 0 && !create:
		return refuse(unix.ENOENT, msgNeedBoth)
	case f.Kind != tc.KindFw && !validFlags(f.Flags):
		return refuse(unix.EINVAL, "")
	case f.Kind == tc.KindFw && tp != nil && tp.mask != f.Match.MarkMask && (len(tp.filters) > 1 || i < 0):
		return refuse(unix.EINVAL, "") // a fw priority's filters share one mask
	}
	for _, a := range f.Actions {
		switch {
		case a.Kind != tc.KindMirred:
		case a.Ifindex == 0:
			return refuse(unix.EINVAL, "act_mirred: "+msgNoDevice)
		case n.links[a.Ifindex] == nil:
			return refuse(unix.ENODEV, "")
		}
	}
	if f.Kind != tc.KindFw {
		// Another filter with the same keys is refused, but not when
		// replacing (flower: "it is okay if filter with same key exists
		// when overwriting").
		if tp != nil && create {
			for j, x := range tp.filters {
				if j != i && reflect.DeepEqual(x.f.Match, f.Match) {
					return refuse(unix.EEXIST, "")
				}
			}
		}
		if err := offload(l, f); err != nil {
			return err
		}
	}
	if tp == nil {
		tp = &tcProto{prio: f.Prio, proto: f.Proto, kind: f.Kind}
		c.tps = append(c.tps, tp)
		slices.SortFunc(c.tps, func(a, b *tcProto) int { return int(a.prio) - int(b.prio) })
	}
	if f.Kind == tc.KindFw {
		tp.mask = f.Match.MarkMask
	}
	if f.Handle == 0 {
		for f.Handle = 1; tp.get(f.Handle) >= 0; f.Handle++ {
		}
	}
	n.gotos(b, l.Index, f, 1)
	tp.seq++
	x := &tcFilter{f: *f, seq: tp.seq}
	if i >= 0 {
		n.gotos(b, l.Index, &tp.filters[i].f, -1)
		tp.filters[i] = x
	} else {
		tp.filters = append(tp.filters, x)
		slices.SortFunc(tp.filters, func(a, b *tcFilter) int { return int(a.f.Handle) - int(b.f.Handle) })
	}
	n.notify(tcNote{port: port, ifindex: l.Index,
		change: tc.FilterChange{Chain: c.index, Prio: f.Prio, Proto: f.Proto, Handle: f.Handle}})
	return nil
}

// deleteFilter deletes the filter at f's place (handle 0: its whole
// priority; priority 0: every filter of its chain).
func (n *NS) deleteFilter(port uint32, f *tc.Filter) error {
	h, err := tc.DecodeHead(f.AppendDelete(nil))
	if err != nil {
		return refuse(unix.EINVAL, "")
	}
	l := n.links[h.Ifindex]
	if l == nil {
		return refuse(unix.ENODEV, "")
	}
	b, err := l.block(h.Parent)
	if err != nil {
		return err
	}
	c := b.chain(f.Chain)
	if c == nil {
		return refuse(unix.ENOENT, msgNoChain)
	}
	drop := func(tp *tcProto) {
		for _, x := range tp.filters {
			n.gotos(b, l.Index, &x.f, -1)
		}
		c.tps = slices.DeleteFunc(c.tps, func(x *tcProto) bool { return x == tp })
		n.notify(tcNote{port: port, ifindex: l.Index, change: tc.FilterChange{Delete: true, Chain: c.index, Prio: tp.prio, Proto: tp.proto}})
	}
	defer n.release(b, l.Index, c)
	if h.Prio == 0 {
		for _, tp := range slices.Clone(c.tps) {
			drop(tp)
		}
		return nil
	}
	tp := c.proto(h.Prio)
	switch {
	case tp == nil:
		return refuse(unix.ENOENT, msgNoPrio)
	case h.Proto != 0 && tp.proto != h.Proto:
		return refuse(unix.EINVAL, msgNoPrio)
	case tp.kind != f.Kind && !(f.Kind == "" && tp.kind == "flower"):
		return refuse(unix.EINVAL, msgKind)
	}
	if h.Handle == 0 {
		drop(tp)
		return nil
	}
	i := tp.get(h.Handle)
	if i < 0 {
		return refuse(unix.ENOENT, msgNoHandle)
	}
	x := tp.filters[i]
	n.gotos(b, l.Index, &x.f, -1)
	tp.filters = slices.Delete(tp.filters, i, i+1)
	if len(tp.filters) == 0 {
		c.tps = slices.DeleteFunc(c.tps, func(y *tcProto) bool { return y == tp })
	}
	n.notify(tcNote{port: port, ifindex: l.Index,
		change: tc.FilterChange{Delete: true, Chain: c.index, Prio: tp.prio, Proto: tp.proto, Handle: x.f.Handle}})
	return nil
}
